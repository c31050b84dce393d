//! Endpoints and regions, the AWS way: the SDKs' environment variables
//! (`AWS_ENDPOINT_URL_<SERVICE>`, then `AWS_ENDPOINT_URL`, then the public endpoint), read from
//! the host's environment, never from the plugin.

use super::AwsError;
use std::collections::BTreeMap;

/// The `AWS_*` variables of the host's environment, read once when the backend is made. Its
/// `Debug` names the variables and shows none of their values.
#[derive(Clone, Default, PartialEq)]
pub struct Environment(BTreeMap<String, String>);

impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl Environment {
    /// The process's `AWS_*` variables.
    pub fn from_process() -> Self {
        Environment(
            std::env::vars()
                .filter(|(k, _)| k.starts_with("AWS_"))
                .collect(),
        )
    }

    /// Given variables (tests, and hosts that configure themselves otherwise).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Environment(
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// A variable, when set and not empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
    }

    /// The region a call that names none goes to.
    pub fn region(&self) -> Option<&str> {
        self.get("AWS_REGION")
            .or_else(|| self.get("AWS_DEFAULT_REGION"))
    }
}

/// The service ids the SDKs' per-service endpoint variables use, by signing name and API
/// version: Elastic Load Balancing's two APIs share a signing name.
fn service_ids(service: &str, version: &str) -> &'static [&'static str] {
    match (service, version) {
        ("ec2", _) => &["EC2"],
        ("elasticloadbalancing", "2015-12-01") => {
            &["ELASTIC_LOAD_BALANCING_V2", "ELASTIC_LOAD_BALANCING"]
        }
        ("elasticloadbalancing", _) => &["ELASTIC_LOAD_BALANCING"],
        _ => &[],
    }
}

/// Where a call of `service` in `region` goes: `scheme://authority/`.
pub fn endpoint(
    env: &Environment,
    service: &str,
    version: &str,
    region: &str,
) -> Result<http::Uri, AwsError> {
    let configured = service_ids(service, version)
        .iter()
        .map(|id| format!("AWS_ENDPOINT_URL_{id}"))
        .chain(std::iter::once("AWS_ENDPOINT_URL".to_string()))
        .find_map(|var| env.get(&var).map(|url| (var, url.to_string())));
    let (source, url) = match configured {
        Some((var, url)) => (var, url),
        None => {
            let suffix = if region.starts_with("cn-") {
                "amazonaws.com.cn"
            } else {
                "amazonaws.com"
            };
            (
                "the public endpoint".to_string(),
                format!("https://{service}.{region}.{suffix}"),
            )
        }
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|e| AwsError::Unavailable(format!("{source} ({url}) is not a URL: {e}")))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(AwsError::Unavailable(format!(
            "{source} ({url}) needs a scheme and a host"
        )));
    };
    if scheme != "https" && scheme != "http" {
        return Err(AwsError::Unavailable(format!(
            "{source} ({url}) must be http or https"
        )));
    }
    let path = match uri.path() {
        "" => "/",
        p => p,
    };
    format!("{scheme}://{authority}{path}")
        .parse()
        .map_err(|e| AwsError::Unavailable(format!("{source} ({url}): {e}")))
}

/// `us-east-1`, `eu-west-3`, `us-gov-west-1`, `cn-north-1`: letters and digits in dashed
/// words, ending in a number. A region goes into the public endpoint's host name, so nothing
/// else may.
pub fn is_region(region: &str) -> bool {
    let parts: Vec<&str> = region.split('-').collect();
    parts.len() >= 3
        && region.len() <= 32
        && parts[..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts
            .last()
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_sdk_variables_win_over_the_public_endpoint() {
        let none = Environment::default();
        assert_eq!(
            endpoint(&none, "ec2", "2016-11-15", "eu-west-1").unwrap(),
            "https://ec2.eu-west-1.amazonaws.com/"
        );
        assert_eq!(
            endpoint(&none, "ec2", "2016-11-15", "cn-north-1").unwrap(),
            "https://ec2.cn-north-1.amazonaws.com.cn/"
        );
        let all = Environment::from_pairs([("AWS_ENDPOINT_URL", "http://127.0.0.1:5055")]);
        assert_eq!(
            endpoint(&all, "elasticloadbalancing", "2015-12-01", "us-east-1").unwrap(),
            "http://127.0.0.1:5055/"
        );
        let per = Environment::from_pairs([
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
            ("AWS_ENDPOINT_URL_EC2", "http://127.0.0.1:2"),
            (
                "AWS_ENDPOINT_URL_ELASTIC_LOAD_BALANCING",
                "http://127.0.0.1:3",
            ),
        ]);
        assert_eq!(
            endpoint(&per, "ec2", "2016-11-15", "us-east-1").unwrap(),
            "http://127.0.0.1:2/"
        );
        assert_eq!(
            endpoint(&per, "elasticloadbalancing", "2015-12-01", "us-east-1").unwrap(),
            "http://127.0.0.1:3/"
        );
        let bad = Environment::from_pairs([("AWS_ENDPOINT_URL_EC2", "ftp://x")]);
        let e = endpoint(&bad, "ec2", "2016-11-15", "us-east-1").unwrap_err();
        assert!(e.to_string().contains("AWS_ENDPOINT_URL_EC2"), "{e}");
    }

    #[test]
    fn only_region_shaped_names_are_regions() {
        for ok in ["us-east-1", "eu-west-3", "us-gov-west-1", "cn-north-1"] {
            assert!(is_region(ok), "{ok}");
        }
        for bad in [
            "",
            "us-east",
            "us-east-1.evil.com",
            "US-EAST-1",
            "us--1",
            "169.254.169.254",
            "us-east-1/",
        ] {
            assert!(!is_region(bad), "{bad}");
        }
    }
}
