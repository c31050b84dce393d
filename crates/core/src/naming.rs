//! Names and label values the lifecycle and topology controllers make: upstream's 5-character
//! random suffix, its naming templates (`internal/topology/names`: Go `text/template` with
//! `missingkey=error`, through the `gotmpl` crate), and `format.MustFormatValue` for names too
//! long to be label values.

use rand::Rng;
use serde_json::{Value, json};

/// Lowercase letters and digits without vowels (no accidental words), as upstream's.
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const MAX_NAME: usize = 63;
const RANDOM_LENGTH: usize = 5;

/// The default `naming.template` of a topology's infrastructure cluster and control plane.
pub const DEFAULT_CLUSTER_OBJECT: &str = "{{ .cluster.name }}-{{ .random }}";
/// The default `naming.template` of a topology's MachineDeployments.
pub const DEFAULT_MACHINE_DEPLOYMENT: &str =
    "{{ .cluster.name }}-{{ .machineDeployment.topologyName }}-{{ .random }}";

pub fn random_suffix() -> String {
    let mut rng = rand::rng();
    (0..RANDOM_LENGTH)
        .map(|_| ALPHANUMS[rng.random_range(0..ALPHANUMS.len())] as char)
        .collect()
}

/// `prefix-xxxxx`, with `prefix` cut so the whole fits a name.
pub fn with_suffix(prefix: &str, suffix: &str) -> String {
    let cut: String = prefix.chars().take(MAX_NAME - 6).collect();
    format!("{cut}-{suffix}")
}

/// Renders a naming template over `data` with `.cluster.name` and `.random` added, as
/// upstream's `templateGenerator`: a key the data lacks is an error, and a result over 63
/// characters is cut to 58 and gets 5 random ones.
pub fn render(template: &str, cluster: &str, mut data: Value) -> Result<String, String> {
    if !data.is_object() {
        data = json!({});
    }
    data["cluster"] = json!({"name": cluster});
    data["random"] = json!(random_suffix());
    let value = gotmpl::to_value(&data).map_err(|e| format!("template data: {e}"))?;
    let name = gotmpl::Template::new("template name generator")
        .missing_key(gotmpl::MissingKey::Error)
        .parse(template)
        .map_err(|e| format!("parsing template {template:?}: {e}"))?
        .execute_to_string(&value)
        .map_err(|e| format!("rendering template {template:?}: {e}"))?;
    if name.chars().count() > MAX_NAME {
        let cut: String = name.chars().take(MAX_NAME - RANDOM_LENGTH).collect();
        return Ok(cut + &random_suffix());
    }
    Ok(name)
}

/// Fills a `machineNaming.template` (`{{ .cluster.name }}`, `{{ .machineSet.name }}` or
/// `{{ .kubeadmControlPlane.name }}`, and `{{ .random }}`, which it must use so that names
/// differ). `owner_key` is the owner's placeholder, such as `.machineSet.name`.
pub fn from_template(
    template: &str,
    cluster: &str,
    owner_key: &str,
    owner: &str,
) -> Result<String, String> {
    if !template.contains(".random") {
        return Err(format!("{template:?} must contain {{{{ .random }}}}"));
    }
    let mut data = json!({});
    let path: Vec<&str> = owner_key.trim_start_matches('.').split('.').collect();
    if let [kind, field] = path.as_slice() {
        data[*kind] = json!({ *field: owner });
    }
    render(template, cluster, data)
}

/// A topology MachineDeployment's name from its class's `naming.template` or the default.
pub fn machine_deployment(
    template: Option<&str>,
    cluster: &str,
    topology: &str,
) -> Result<String, String> {
    render(
        template.unwrap_or(DEFAULT_MACHINE_DEPLOYMENT),
        cluster,
        json!({"machineDeployment": {"topologyName": topology}}),
    )
}

/// A topology's infrastructure cluster or control plane name, from the class's template or the
/// default.
pub fn cluster_object(template: Option<&str>, cluster: &str) -> Result<String, String> {
    render(
        template.unwrap_or(DEFAULT_CLUSTER_OBJECT),
        cluster,
        json!({}),
    )
}

/// The name of a template cloned for a topology MachineDeployment: `<cluster>-<md>-` and 5
/// random characters, cut to fit (upstream's `SimpleNameGenerator` over the prefix).
pub fn machine_deployment_template(cluster: &str, topology: &str) -> String {
    simple(&format!("{cluster}-{topology}-"))
}

/// The name of the control plane's cloned machine template: `<cluster>-` and 5 random ones.
pub fn control_plane_machine_template(cluster: &str) -> String {
    simple(&format!("{cluster}-"))
}

/// `base` cut to 58 characters, then 5 random ones.
fn simple(base: &str) -> String {
    let cut: String = base.chars().take(MAX_NAME - RANDOM_LENGTH).collect();
    cut + &random_suffix()
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

    /// Upstream's `Test_templateGenerator_GenerateName` rows.
    #[test]
    fn template_generator_rows() {
        assert_eq!(
            render("some-simple-{{ .test }}", "c", json!({"test": "testdata"})).unwrap(),
            "some-simple-testdata"
        );
        let zeros64 = "0".repeat(64);
        let n = render(&zeros64, "c", json!({})).unwrap();
        assert!(
            n.starts_with(&"0".repeat(58)) && !n.ends_with("00000"),
            "{n}"
        );
        assert_eq!(n.len(), 63);
        let zeros63 = "0".repeat(63);
        assert_eq!(render(&zeros63, "c", json!({})).unwrap(), zeros63);
        assert!(render("some-hardcoded-name-{{ .doesnotexistindata", "c", json!({})).is_err());
        let e = render(
            "some-hardcoded-name-{{ .doesnotexistindata }}",
            "c",
            Value::Null,
        )
        .unwrap_err();
        assert!(e.contains("doesnotexistindata"), "{e}");
    }

    /// The topology names and their defaults (`names.go`).
    #[test]
    fn topology_names() {
        let md = machine_deployment(None, "c1", "md-0").unwrap();
        assert!(md.starts_with("c1-md-0-") && md.len() == 13, "{md}");
        let md = machine_deployment(
            Some("{{ .machineDeployment.topologyName }}-x"),
            "c1",
            "md-0",
        )
        .unwrap();
        assert_eq!(md, "md-0-x");
        let cp = cluster_object(None, "c1").unwrap();
        assert!(cp.starts_with("c1-") && cp.len() == 8, "{cp}");
        assert!(cluster_object(Some("{{ .machineDeployment.topologyName }}"), "c1").is_err());
        let t = machine_deployment_template("c1", "md-0");
        assert!(t.starts_with("c1-md-0-") && t.len() == 13, "{t}");
        assert_eq!(machine_deployment_template(&"x".repeat(80), "md").len(), 63);
        assert!(control_plane_machine_template("c1").starts_with("c1-"));
    }
}
