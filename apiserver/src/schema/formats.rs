//! The string formats kube-openapi checks on custom resources (`format:` in a CRD schema).
//! Hand-written: the checks are small, kube's acceptance rules (Go's `net.ParseIP`,
//! `net.ParseMAC`, `time.ParseDuration`, strfmt's regexes) differ from the RFC-strict parsers
//! crates offer, and a user must see the same verdict as on a real cluster.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

fn re(pattern: &str) -> Option<regex::Regex> {
    regex::Regex::new(pattern).ok()
}

static UUID: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| re("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"));
static HOSTNAME: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
    re(
        r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$",
    )
});
static EMAIL: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| re(r"^[^@\s<>()\[\],;:]+@[^@\s<>()\[\],;:]+$"));
static GO_DURATION: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| re(r"^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$"));
static STRFMT_DURATION: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
    re(
        r"^(?i)[0-9]+\s*(ns|us|µs|ms|s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hr|hrs|hour|hours|d|day|days|w|wk|wks|week|weeks)$",
    )
});
static URI_SCHEME: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| re(r"^[a-zA-Z][a-zA-Z0-9+.-]*:[^\s]*$"));

fn matches(r: &LazyLock<Option<regex::Regex>>, s: &str) -> bool {
    r.as_ref().is_some_and(|r| r.is_match(s))
}

/// Go's `net.ParseIP` for IPv4: dotted decimal, or an IPv4-mapped IPv6 address.
fn ipv4(s: &str) -> bool {
    s.parse::<Ipv4Addr>().is_ok()
        || s.parse::<Ipv6Addr>()
            .is_ok_and(|a| a.to_ipv4_mapped().is_some())
}

fn mac(s: &str) -> bool {
    let hex2 = |p: &str| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit());
    let hex4 = |p: &str| p.len() == 4 && p.chars().all(|c| c.is_ascii_hexdigit());
    let ok_len = |n: usize| matches!(n, 6 | 8 | 20);
    for sep in [':', '-'] {
        let parts: Vec<&str> = s.split(sep).collect();
        if parts.len() > 1 {
            return ok_len(parts.len()) && parts.iter().all(|p| hex2(p));
        }
    }
    let parts: Vec<&str> = s.split('.').collect();
    matches!(parts.len(), 3 | 4 | 10) && parts.iter().all(|p| hex4(p))
}

fn cidr(s: &str) -> bool {
    let Some((addr, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match addr.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => bits <= 32,
        Ok(IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn date(s: &str) -> bool {
    s.len() == 10 && s.parse::<jiff::civil::Date>().is_ok()
}

fn byte(s: &str) -> bool {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).is_ok()
}

/// Whether `s` is valid for `format`; formats kube does not check are always valid.
pub fn valid(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => date(s),
        "byte" => byte(s),
        "duration" => matches(&GO_DURATION, s) || matches(&STRFMT_DURATION, s),
        "uuid" => matches(&UUID, s),
        "ipv4" => ipv4(s),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => cidr(s),
        "mac" => mac(s),
        "hostname" => s.len() <= 255 && matches(&HOSTNAME, s),
        "email" => matches(&EMAIL, s),
        "uri" => s.starts_with('/') || matches(&URI_SCHEME, s),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::valid;

    #[test]
    fn formats_accept_and_refuse_as_kube_openapi() {
        let cases = [
            ("byte", "aGVsbG8=", "not base64!"),
            ("date", "2026-12-01", "2026-13-01"),
            ("duration", "1h30m", "an hour"),
            ("uuid", "6f1a0a52-8c1e-4c8e-9a59-6f0c3d3e2b11", "6f1a0a52"),
            ("ipv4", "10.0.0.1", "10.0.0.256"),
            ("ipv6", "fd00::1", "10.0.0.1"),
            ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
            ("mac", "00:1a:2b:3c:4d:5e", "00:1a:2b"),
            ("hostname", "node-1.example.com", "-bad-.example.com"),
            ("email", "ops@example.com", "ops.example.com"),
            ("uri", "https://example.com/x", "example.com x"),
            ("date-time", "2026-12-01T10:00:00Z", "yesterday"),
        ];
        for (format, good, bad) in cases {
            assert!(valid(format, good), "{format} should accept {good:?}");
            assert!(!valid(format, bad), "{format} should refuse {bad:?}");
        }
        assert!(valid("password", "anything"));
    }
}
