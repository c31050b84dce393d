//! Names and label values the lifecycle controllers make: upstream's 5-character random
//! suffix, its `machineNaming` templates, and `format.MustFormatValue` for names too long to
//! be label values. Hand-written: the template language is three fixed placeholders, which no
//! template crate would make simpler.

use rand::Rng;

/// Lowercase letters and digits without vowels (no accidental words), as upstream's.
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const MAX_NAME: usize = 63;

pub fn random_suffix() -> String {
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHANUMS[rng.random_range(0..ALPHANUMS.len())] as char)
        .collect()
}

/// `prefix-xxxxx`, with `prefix` cut so the whole fits a name.
pub fn with_suffix(prefix: &str, suffix: &str) -> String {
    let cut: String = prefix.chars().take(MAX_NAME - 6).collect();
    format!("{cut}-{suffix}")
}

/// Fills a `machineNaming.template` (`{{ .cluster.name }}`, `{{ .machineSet.name }}` or
/// `{{ .kubeadmControlPlane.name }}`, and `{{ .random }}`). A result over 63 characters is cut
/// to 57 and gets a fresh suffix, as upstream's.
pub fn from_template(
    template: &str,
    cluster: &str,
    owner_key: &str,
    owner: &str,
) -> Result<String, String> {
    let random = random_suffix();
    let mut out = String::new();
    let mut rest = template;
    let mut saw_random = false;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find("}}") else {
            return Err(format!("unclosed {{{{ in {template:?}"));
        };
        let key = rest[start + 2..start + end].trim();
        match key {
            ".cluster.name" => out.push_str(cluster),
            ".random" => {
                saw_random = true;
                out.push_str(&random)
            }
            k if k == owner_key => out.push_str(owner),
            other => {
                return Err(format!(
                    "unknown placeholder {other} in {template:?}: use .cluster.name, {owner_key} or .random"
                ));
            }
        }
        rest = &rest[start + end + 2..];
    }
    out.push_str(rest);
    if !saw_random {
        return Err(format!("{template:?} must contain {{{{ .random }}}}"));
    }
    if out.len() > MAX_NAME {
        return Ok(with_suffix(&out[..MAX_NAME - 6], &random_suffix()));
    }
    Ok(out)
}

fn fnv32a(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// A name as a label value: as is when it fits, else `hash_<base64url(fnv32a)>_z`.
pub fn label_value(name: &str) -> String {
    use base64::Engine as _;
    if name.len() <= MAX_NAME {
        return name.to_string();
    }
    let h = fnv32a(name).to_be_bytes();
    format!(
        "hash_{}_z",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(h)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_templates_fill() {
        let n = from_template(
            "{{ .machineSet.name }}-{{ .random }}",
            "c",
            ".machineSet.name",
            "ms",
        )
        .unwrap();
        assert!(n.starts_with("ms-") && n.len() == 8, "{n}");
        let n = from_template(
            "{{.cluster.name}}-w-{{ .random }}",
            "c",
            ".machineSet.name",
            "ms",
        )
        .unwrap();
        assert!(n.starts_with("c-w-"), "{n}");
        assert!(from_template("{{ .machineSet.name }}", "c", ".machineSet.name", "ms").is_err());
        assert!(from_template("{{ .nope }}-{{ .random }}", "c", ".machineSet.name", "ms").is_err());
        let long = "x".repeat(80);
        let n = from_template(
            "{{ .machineSet.name }}-{{ .random }}",
            "c",
            ".machineSet.name",
            &long,
        )
        .unwrap();
        assert_eq!(n.len(), 63);
        assert_eq!(label_value("short"), "short");
        let v = label_value(&long);
        assert!(
            v.starts_with("hash_") && v.ends_with("_z") && v.len() <= 63,
            "{v}"
        );
        assert_eq!(with_suffix(&long, "abcde").len(), 63);
    }
}
