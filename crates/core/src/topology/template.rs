//! The Go templates of a ClusterClass's patches (`enabledIf` and `valueFrom.template`), as
//! upstream's inline patch generator renders them: Go `text/template` (the `gotmpl` crate) with
//! the variables as nested data, a missing key printing `<no value>`, and the output read as
//! YAML. The functions are Go's builtins and the sprig ones upstream's classes use; sprig has no
//! Rust port, so those few are written here, each as sprig defines its arguments (the piped
//! value comes last). A function that is neither is an error that names it.

use gotmpl::Value as T;
use serde_json::Value;
use std::sync::Arc;

/// Why a template could not be rendered; the message names the template and the cause.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TemplateError {
    #[error("failed to parse template {template:?}: {message}")]
    Parse { template: String, message: String },
    #[error("failed to render template {template:?}: {message}")]
    Render { template: String, message: String },
    #[error("failed to unmarshal rendered template {output:?}: {message}")]
    Yaml { output: String, message: String },
}

/// Renders `template` over `variables` and reads the output as YAML.
pub fn render(template: &str, variables: &Value) -> Result<Value, TemplateError> {
    let output = text(template, variables)?;
    serde_yaml::from_str::<Value>(&output).map_err(|e| TemplateError::Yaml {
        output: output.clone(),
        message: e.to_string(),
    })
}

/// `enabledIf`: an unset one is enabled, a set one where it renders `true`.
pub fn enabled(enabled_if: Option<&str>, variables: &Value) -> Result<bool, TemplateError> {
    match enabled_if {
        None | Some("") => Ok(true),
        Some(t) => Ok(render(t, variables)? == Value::Bool(true)),
    }
}

/// The template's output as text.
pub fn text(template: &str, variables: &Value) -> Result<String, TemplateError> {
    let render_err = |message: String| TemplateError::Render {
        template: template.into(),
        message,
    };
    let data = gotmpl::to_value(variables).map_err(|e| render_err(e.to_string()))?;
    let mut t = gotmpl::Template::new("tpl");
    for (name, f) in functions() {
        t = t.func(name, f);
    }
    t.parse(template)
        .map_err(|e| TemplateError::Parse {
            template: template.into(),
            message: e.to_string(),
        })?
        .execute_to_string(&data)
        .map_err(|e| render_err(e.to_string()))
}

type Func = fn(&[T]) -> gotmpl::Result<T>;

fn functions() -> [(&'static str, Func); 20] {
    [
        ("default", default),
        ("quote", |a| {
            Ok(s(a
                .iter()
                .map(|v| format!("{:?}", text_of(v)))
                .collect::<Vec<_>>()
                .join(" ")))
        }),
        ("squote", |a| {
            Ok(s(a
                .iter()
                .map(|v| format!("'{}'", text_of(v)))
                .collect::<Vec<_>>()
                .join(" ")))
        }),
        ("replace", |a| {
            let [old, new, src] = args::<3>("replace", a)?;
            Ok(s(text_of(src).replace(&text_of(old), &text_of(new))))
        }),
        ("trim", |a| {
            Ok(s(text_of(one("trim", a)?).trim().to_string()))
        }),
        ("trimPrefix", |a| {
            let [p, v] = args::<2>("trimPrefix", a)?;
            let v = text_of(v);
            Ok(s(v
                .strip_prefix(text_of(p).as_str())
                .unwrap_or(&v)
                .to_string()))
        }),
        ("trimSuffix", |a| {
            let [p, v] = args::<2>("trimSuffix", a)?;
            let v = text_of(v);
            Ok(s(v
                .strip_suffix(text_of(p).as_str())
                .unwrap_or(&v)
                .to_string()))
        }),
        ("lower", |a| Ok(s(text_of(one("lower", a)?).to_lowercase()))),
        ("upper", |a| Ok(s(text_of(one("upper", a)?).to_uppercase()))),
        ("join", |a| {
            let [sep, list] = args::<2>("join", a)?;
            let items: Vec<String> = match list {
                T::List(l) => l.iter().map(text_of).collect(),
                other => vec![text_of(other)],
            };
            Ok(s(items.join(&text_of(sep))))
        }),
        ("list", |a| Ok(T::List(Arc::from(a.to_vec())))),
        ("dict", |a| {
            let mut m = std::collections::BTreeMap::new();
            for pair in a.chunks(2) {
                let v = pair.get(1).cloned().unwrap_or(s(String::new()));
                m.insert(Arc::from(text_of(&pair[0])), v);
            }
            Ok(T::Map(Arc::new(m)))
        }),
        ("hasPrefix", |a| {
            let [p, v] = args::<2>("hasPrefix", a)?;
            Ok(T::Bool(text_of(v).starts_with(&text_of(p))))
        }),
        ("hasSuffix", |a| {
            let [p, v] = args::<2>("hasSuffix", a)?;
            Ok(T::Bool(text_of(v).ends_with(&text_of(p))))
        }),
        ("contains", |a| {
            let [p, v] = args::<2>("contains", a)?;
            Ok(T::Bool(text_of(v).contains(&text_of(p))))
        }),
        ("semverCompare", |a| {
            let [c, v] = args::<2>("semverCompare", a)?;
            semver_compare(&text_of(c), &text_of(v))
                .map(T::Bool)
                .map_err(gotmpl::TemplateError::Exec)
        }),
        ("toYaml", |a| {
            let v = json_of(one("toYaml", a)?);
            let y = serde_yaml::to_string(&v)
                .map_err(|e| gotmpl::TemplateError::Exec(e.to_string()))?;
            Ok(s(y.trim_end_matches('\n').to_string()))
        }),
        ("toJson", |a| Ok(s(json_of(one("toJson", a)?).to_string()))),
        ("empty", |a| Ok(T::Bool(!one("empty", a)?.is_truthy()))),
        ("ternary", |a| {
            let [yes, no, cond] = args::<3>("ternary", a)?;
            Ok(if cond.is_truthy() {
                yes.clone()
            } else {
                no.clone()
            })
        }),
    ]
}

/// sprig's `default DEFAULT VALUE`: the value unless it is empty.
fn default(a: &[T]) -> gotmpl::Result<T> {
    match a {
        [d] => Ok(d.clone()),
        [d, v, ..] => Ok(if v.is_truthy() { v.clone() } else { d.clone() }),
        [] => Err(arg_count("default", 1, 0)),
    }
}

fn s(v: String) -> T {
    T::String(Arc::from(v))
}

/// A value as Go's `fmt` prints it in a template (`<no value>` and `<nil>` included).
fn text_of(v: &T) -> String {
    match v {
        T::String(s) => s.to_string(),
        other => other.to_string(),
    }
}

fn json_of(v: &T) -> Value {
    match v {
        T::Nil => Value::Null,
        T::Bool(b) => Value::Bool(*b),
        T::Int(n) => Value::from(*n),
        T::Uint(n) => Value::from(*n),
        T::Float(f) => Value::from(*f),
        T::String(s) => Value::String(s.to_string()),
        T::List(l) => Value::Array(l.iter().map(json_of).collect()),
        T::Map(m) => Value::Object(m.iter().map(|(k, v)| (k.to_string(), json_of(v))).collect()),
        other => Value::String(other.to_string()),
    }
}

fn arg_count(name: &str, expected: usize, got: usize) -> gotmpl::TemplateError {
    gotmpl::TemplateError::ArgCount {
        name: name.into(),
        expected,
        got,
    }
}

fn args<'a, const N: usize>(name: &str, a: &'a [T]) -> gotmpl::Result<[&'a T; N]> {
    let refs: Vec<&T> = a.iter().collect();
    refs.try_into().map_err(|_| arg_count(name, N, a.len()))
}

fn one<'a>(name: &str, a: &'a [T]) -> gotmpl::Result<&'a T> {
    args::<1>(name, a).map(|[v]| v)
}

/// sprig's `semverCompare CONSTRAINT VERSION` (Masterminds semver): comparators joined by `,`
/// or spaces (all must hold) and `||` (any), each an operator (`=`, `!=`, `<`, `<=`, `>`,
/// `>=`, `~`, `^`) and a version with an optional `v` and missing minor or patch read as 0.
pub fn semver_compare(constraint: &str, version: &str) -> Result<bool, String> {
    let bad = |what: &str| format!("semverCompare: {what}");
    let v = semver::Version::parse(version.trim().trim_start_matches('v'))
        .map_err(|e| bad(&format!("version {version:?}: {e}")))?;
    for alternative in constraint.split("||") {
        let mut all = true;
        let mut saw = false;
        for (op, want) in comparators(alternative).map_err(|e| bad(&e))? {
            saw = true;
            let holds = match op.as_str() {
                "" | "=" => v == want,
                "!=" => v != want,
                "<" => v < want,
                "<=" => v <= want,
                ">" => v > want,
                ">=" => v >= want,
                "~" => v >= want && v.major == want.major && v.minor == want.minor,
                "^" => v >= want && v.major == want.major,
                other => return Err(bad(&format!("unknown operator {other:?}"))),
            };
            all &= holds;
        }
        if saw && all {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The comparators of one `||` alternative: `op version` pairs, spaces allowed in between.
fn comparators(s: &str) -> Result<Vec<(String, semver::Version)>, String> {
    let mut out = vec![];
    let mut rest = s.trim();
    while !rest.is_empty() {
        rest = rest.trim_start_matches([',', ' ']);
        if rest.is_empty() {
            break;
        }
        let op_len = rest
            .find(|c: char| c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        let op = rest[..op_len].trim().to_string();
        rest = rest[op_len..].trim_start();
        let end = rest.find([',', ' ']).unwrap_or(rest.len());
        let raw = rest[..end].trim_start_matches('v');
        rest = &rest[end..];
        out.push((op, padded(raw)?));
    }
    Ok(out)
}

/// `1.25-0` as `1.25.0-0`: Masterminds reads a missing minor or patch as 0.
fn padded(raw: &str) -> Result<semver::Version, String> {
    let (core, tail) = match raw.find(['-', '+']) {
        Some(i) => raw.split_at(i),
        None => (raw, ""),
    };
    let mut parts: Vec<&str> = core.split('.').collect();
    while parts.len() < 3 {
        parts.push("0");
    }
    let full = format!("{}{tail}", parts.join("."));
    semver::Version::parse(&full).map_err(|e| format!("version {raw:?} in the constraint: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Upstream's `TestRenderValueTemplate` rows, and the quick-start class's templates.
    #[test]
    fn render_value_template() {
        let vars = json!({
            "builtin": {"cluster": {"name": "cluster1"}, "controlPlane": {"version": "v1.24.3"},
                        "machineDeployment": {"version": "v1.28.13+k3s1"}},
            "integerVariable": 4,
            "numberVariable": 2.5,
            "booleanVariable": true,
            "stringVariable": "value",
            "arrayVariable": ["a", "b"],
            "podSecurityStandard": {"enabled": true, "enforce": "baseline"},
        });
        // A literal, numbers, booleans and a nested builtin.
        assert_eq!(render("test", &vars).unwrap(), json!("test"));
        assert_eq!(render("{{ .integerVariable }}", &vars).unwrap(), json!(4));
        assert_eq!(render("{{ .numberVariable }}", &vars).unwrap(), json!(2.5));
        assert_eq!(
            render("{{ .booleanVariable }}", &vars).unwrap(),
            json!(true)
        );
        assert_eq!(
            render("{{ .builtin.cluster.name }}", &vars).unwrap(),
            json!("cluster1")
        );
        // YAML out of a template: a list of objects.
        assert_eq!(
            render(
                "- name: a\n  value: {{ .stringVariable }}\n- name: b\n  value: {{ index .arrayVariable 1 }}",
                &vars
            )
            .unwrap(),
            json!([{"name": "a", "value": "value"}, {"name": "b", "value": "b"}])
        );
        // A missing key prints `<no value>` (Go's default), not an error.
        assert_eq!(render("{{ .nope }}", &vars).unwrap(), json!("<no value>"));
        // The quick-start class's customImage and PSS version switch.
        assert_eq!(
            render(
                "kindest/node:{{ .builtin.machineDeployment.version | replace \"+\" \"_\" }}\n",
                &vars
            )
            .unwrap(),
            json!("kindest/node:v1.28.13_k3s1")
        );
        assert_eq!(
            text(
                "v1{{ if semverCompare \"< v1.25-0\" .builtin.controlPlane.version }}beta1{{ end }}",
                &vars
            )
            .unwrap(),
            "v1beta1"
        );
        // enabledIf.
        assert!(enabled(Some("{{ .podSecurityStandard.enabled }}"), &vars).unwrap());
        assert!(enabled(Some("{{ ne .stringVariable \"\" }}"), &vars).unwrap());
        assert!(!enabled(Some("{{ eq .stringVariable \"\" }}"), &vars).unwrap());
        assert!(enabled(None, &vars).unwrap());
    }

    #[test]
    fn sprig_functions() {
        let vars = json!({"s": "  Hi  ", "l": ["x", "y"], "e": ""});
        let t = |tpl: &str| text(tpl, &vars).unwrap();
        assert_eq!(t("{{ .s | trim | lower }}"), "hi");
        assert_eq!(t("{{ .s | trim | upper | quote }}"), "\"HI\"");
        assert_eq!(t("{{ .e | default \"d\" }}"), "d");
        assert_eq!(t("{{ .l | join \",\" }}"), "x,y");
        assert_eq!(t("{{ list 1 2 | toJson }}"), "[1,2]");
        assert_eq!(t("{{ dict \"a\" 1 | toYaml }}"), "a: 1");
        assert_eq!(
            t("{{ hasPrefix \"x\" \"xy\" }} {{ hasSuffix \"z\" \"xy\" }}"),
            "true false"
        );
        assert_eq!(t("{{ printf \"%s-%d\" \"a\" 3 }}"), "a-3");
    }

    /// An unknown function is an error that names it.
    #[test]
    fn an_unknown_function_is_named() {
        let e = text("{{ sha256sum .x }}", &json!({"x": 1})).unwrap_err();
        assert!(e.to_string().contains("sha256sum"), "{e}");
    }

    #[test]
    fn semver_constraints_as_masterminds() {
        assert!(semver_compare("< v1.25-0", "v1.24.3").unwrap());
        assert!(!semver_compare("< v1.25-0", "v1.25.0").unwrap());
        assert!(semver_compare(">= 1.28, < 1.30", "v1.29.1").unwrap());
        assert!(semver_compare("< 1.20 || >= 1.29", "v1.29.0").unwrap());
        assert!(semver_compare("~1.29.0", "1.29.4").unwrap());
        assert!(!semver_compare("^1.29.0", "2.0.0").unwrap());
        assert!(semver_compare("< 1.25", "banana").is_err());
    }
}
