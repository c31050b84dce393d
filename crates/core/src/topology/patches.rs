//! The inline patch engine (upstream's `patches/engine.go` and `inline/json_patch_generator.go`):
//! a class's patches, in order, over the templates a topology uses. Each patch definition
//! selects items by apiVersion and kind and by what holds them (the Cluster's infrastructure or
//! control plane, the control plane's machine template, or a MachineDeployment class's
//! templates); `enabledIf` and the values come from the variables, with an item's own builtins
//! and overrides over the Cluster's.

use super::template::{self, TemplateError};
use capw_api::clusterclass::{ClusterClassPatch, JsonPatch, PatchSelector};
use serde_json::{Value, json};

/// What holds a template, as upstream's `HolderReference` field paths say it.
#[derive(Debug, Clone, PartialEq)]
pub enum Holder {
    /// `Cluster.spec.infrastructureRef`.
    InfrastructureCluster,
    /// `Cluster.spec.controlPlaneRef`.
    ControlPlane,
    /// The control plane's `spec.machineTemplate.spec.infrastructureRef`.
    ControlPlaneMachineInfrastructure,
    /// A MachineDeployment's bootstrap config template, of the named class.
    MachineDeploymentBootstrap(String),
    /// A MachineDeployment's infrastructure machine template, of the named class.
    MachineDeploymentInfrastructure(String),
}

/// One template the patches apply to.
#[derive(Debug, Clone)]
pub struct Item {
    pub holder: Holder,
    /// The template, with `apiVersion` and `kind`.
    pub object: Value,
    /// This item's own variables: its builtins and the topology's overrides.
    pub variables: Value,
}

/// Why the patches could not be applied; the message names the patch and the item.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PatchError {
    #[error("patch {patch:?} on {kind}: {message}")]
    Generate {
        patch: String,
        kind: String,
        message: String,
    },
    #[error("patch {patch:?} on {kind}: {source}")]
    Template {
        patch: String,
        kind: String,
        source: TemplateError,
    },
}

/// Applies `patches` in order to every item they select, each to the previous one's output.
/// `variables` are the Cluster's (with `builtin`); each patch sees those it defines or that
/// are builtin, as upstream's inline patches do.
pub fn apply(
    patches: &[ClusterClassPatch],
    variables: &Value,
    items: &mut [Item],
) -> Result<(), PatchError> {
    for patch in patches.iter().filter(|p| p.external.is_none()) {
        for item in items.iter_mut() {
            let ops = generate(patch, variables, item)?;
            if ops.is_empty() {
                continue;
            }
            let kind = kind_of(&item.object);
            let ops: json_patch::Patch =
                serde_json::from_value(Value::Array(ops)).map_err(|e| PatchError::Generate {
                    patch: patch.name.clone(),
                    kind: kind.clone(),
                    message: e.to_string(),
                })?;
            json_patch::patch(&mut item.object, &ops).map_err(|e| PatchError::Generate {
                patch: patch.name.clone(),
                kind,
                message: format!("failed to apply patch: {e}"),
            })?;
        }
    }
    Ok(())
}

/// The RFC 6902 operations `patch` makes for `item`: none when no definition selects it or
/// `enabledIf` does not render `true`.
pub fn generate(
    patch: &ClusterClassPatch,
    global: &Value,
    item: &Item,
) -> Result<Vec<Value>, PatchError> {
    let kind = kind_of(&item.object);
    let matching: Vec<_> = patch
        .definitions
        .iter()
        .filter(|d| matches(item, &d.selector))
        .collect();
    if matching.is_empty() {
        return Ok(vec![]);
    }
    let variables = merge(global, &item.variables);
    let in_template = |source| PatchError::Template {
        patch: patch.name.clone(),
        kind: kind.clone(),
        source,
    };
    if !template::enabled(patch.enabled_if.as_deref(), &variables).map_err(in_template)? {
        return Ok(vec![]);
    }
    let mut ops = vec![];
    for definition in matching {
        for p in &definition.json_patches {
            let mut op = json!({"op": p.op, "path": p.path});
            if p.op == "add" || p.op == "replace" {
                op["value"] = value(p, &variables).map_err(|e| match e {
                    ValueError::Template(t) => in_template(t),
                    ValueError::Other(message) => PatchError::Generate {
                        patch: patch.name.clone(),
                        kind: kind.clone(),
                        message,
                    },
                })?;
            }
            ops.push(op);
        }
    }
    Ok(ops)
}

/// Whether `selector` selects `item` (upstream's `matchesSelector`).
pub fn matches(item: &Item, selector: &PatchSelector) -> bool {
    let api_version = item.object["apiVersion"].as_str().unwrap_or_default();
    let kind = item.object["kind"].as_str().unwrap_or_default();
    if api_version != selector.api_version || kind != selector.kind {
        return false;
    }
    let m = &selector.match_resources;
    match &item.holder {
        Holder::InfrastructureCluster => m.infrastructure_cluster == Some(true),
        Holder::ControlPlane | Holder::ControlPlaneMachineInfrastructure => {
            m.control_plane == Some(true)
        }
        Holder::MachineDeploymentBootstrap(class)
        | Holder::MachineDeploymentInfrastructure(class) => m
            .machine_deployment_class
            .as_ref()
            .is_some_and(|c| c.names.iter().any(|n| class_matches(n, class))),
    }
}

/// `*`, `*suffix`, `prefix*`, or the exact class name.
fn class_matches(pattern: &str, class: &str) -> bool {
    pattern == "*"
        || pattern == class
        || pattern
            .strip_prefix('*')
            .is_some_and(|suffix| class.ends_with(suffix))
        || pattern
            .strip_suffix('*')
            .is_some_and(|prefix| class.starts_with(prefix))
}

enum ValueError {
    Template(TemplateError),
    Other(String),
}

/// A JSON patch's value: literal, from a variable, or from a template.
fn value(p: &JsonPatch, variables: &Value) -> Result<Value, ValueError> {
    let other = |m: &str| ValueError::Other(format!("failed to calculate value: {m}"));
    match (&p.value, &p.value_from) {
        (None, None) => Err(other("neither .value nor .valueFrom are set")),
        (Some(_), Some(_)) => Err(other("both .value and .valueFrom are set")),
        (Some(v), None) => Ok(v.clone()),
        (None, Some(from)) => match (&from.variable, &from.template) {
            (Some(v), None) => variable(variables, v).map_err(|m| other(&m)),
            (None, Some(t)) => template::render(t, variables).map_err(ValueError::Template),
            (None, None) => Err(other(
                ".valueFrom is set, but neither .valueFrom.variable nor .valueFrom.template are set",
            )),
            (Some(_), Some(_)) => Err(other(
                ".valueFrom is set, but both .valueFrom.variable and .valueFrom.template are set",
            )),
        },
    }
}

/// A variable, or a path into one: `name`, `name.field`, `name[0].field` (upstream's
/// `GetVariableValue`).
pub fn variable(variables: &Value, path: &str) -> Result<Value, String> {
    let mut current = variables;
    for (i, segment) in path.split('.').enumerate() {
        let (name, index) = match segment.split_once('[') {
            Some((name, rest)) => {
                let n = rest
                    .strip_suffix(']')
                    .and_then(|n| n.parse::<usize>().ok())
                    .ok_or_else(|| format!("variable {path:?} has invalid syntax: {segment:?}"))?;
                (name, Some(n))
            }
            None if segment.contains(']') => {
                return Err(format!("variable {path:?} has invalid syntax: {segment:?}"));
            }
            None => (segment, None),
        };
        current = current.get(name).ok_or_else(|| {
            if i == 0 {
                format!("variable {name:?} does not exist")
            } else {
                format!("variable {path:?} does not exist: failed to lookup segment {name:?}")
            }
        })?;
        if let Some(n) = index {
            current = current
                .as_array()
                .ok_or_else(|| format!("variable {path:?} is invalid: {name:?} is not an array"))?
                .get(n)
                .ok_or_else(|| {
                    format!("variable {path:?} is invalid: array does not have index {n}")
                })?;
        }
    }
    Ok(current.clone())
}

/// The item's variables over the Cluster's; `builtin` is merged key by key.
fn merge(global: &Value, local: &Value) -> Value {
    let mut out = global.clone();
    if let (Some(out), Some(local)) = (out.as_object_mut(), local.as_object()) {
        for (k, v) in local {
            match (out.get_mut(k), v) {
                (Some(Value::Object(have)), Value::Object(add)) if k == "builtin" => {
                    for (bk, bv) in add {
                        have.insert(bk.clone(), bv.clone());
                    }
                }
                _ => {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
    }
    out
}

fn kind_of(o: &Value) -> String {
    o["kind"].as_str().unwrap_or("object").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use capw_api::clusterclass::ClusterClass;

    fn selector(v: Value) -> PatchSelector {
        serde_json::from_value(v).unwrap()
    }

    fn item(holder: Holder, kind: &str) -> Item {
        Item {
            holder,
            object: json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": kind, "spec": {"template": {"spec": {}}}}),
            variables: json!({}),
        }
    }

    /// Upstream's `TestMatchesSelector` rows.
    #[test]
    fn matches_selector() {
        let s = |m: Value| {
            selector(
                json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerMachineTemplate", "matchResources": m}),
            )
        };
        let md = |class: &str| {
            item(
                Holder::MachineDeploymentInfrastructure(class.into()),
                "DockerMachineTemplate",
            )
        };
        let names = |n: Value| s(json!({"machineDeploymentClass": {"names": n}}));
        assert!(matches(&md("classA"), &names(json!(["classA"]))));
        assert!(!matches(&md("classA"), &names(json!(["classB"]))));
        assert!(matches(&md("classA"), &names(json!(["*"]))));
        assert!(matches(&md("a-class"), &names(json!(["*-class"]))));
        assert!(matches(&md("class-a"), &names(json!(["class-*"]))));
        assert!(!matches(&md("class-a"), &names(json!(["*-b"]))));
        // Wrong kind or apiVersion.
        let other = item(
            Holder::MachineDeploymentInfrastructure("classA".into()),
            "DockerClusterTemplate",
        );
        assert!(!matches(&other, &names(json!(["*"]))));
        // The control plane's machine template is selected by controlPlane: true.
        let cpm = item(
            Holder::ControlPlaneMachineInfrastructure,
            "DockerMachineTemplate",
        );
        assert!(matches(&cpm, &s(json!({"controlPlane": true}))));
        assert!(!matches(&cpm, &s(json!({"infrastructureCluster": true}))));
        assert!(!matches(&md("classA"), &s(json!({"controlPlane": true}))));
    }

    /// Upstream's `GetVariableValue` rows: nested paths, array indexes, and the errors.
    #[test]
    fn variable_paths() {
        let vars = json!({"a": {"b": [{"c": 1}, {"c": 2}]}, "s": "x"});
        assert_eq!(variable(&vars, "s").unwrap(), json!("x"));
        assert_eq!(variable(&vars, "a.b[1].c").unwrap(), json!(2));
        assert_eq!(variable(&vars, "a.b[0]").unwrap(), json!({"c": 1}));
        assert_eq!(
            variable(&vars, "nope").unwrap_err(),
            "variable \"nope\" does not exist"
        );
        assert!(
            variable(&vars, "a.b[5]")
                .unwrap_err()
                .contains("array does not have index 5")
        );
        assert!(
            variable(&vars, "a.x")
                .unwrap_err()
                .contains("failed to lookup segment \"x\"")
        );
        assert!(
            variable(&vars, "a.b]")
                .unwrap_err()
                .contains("invalid syntax")
        );
    }

    /// Upstream's quick-start class, applied to its own templates for a control plane at
    /// v1.24.3 and a default-worker MachineDeployment at v1.28.13: the patched fields appear
    /// where the class says, rendered from the variables.
    #[test]
    fn the_quick_start_patches_render_as_upstream() {
        let docs: Vec<Value> = serde_yaml::Deserializer::from_str(include_str!(
            "../../../../host/tests/data/clusterclass-quick-start.yaml"
        ))
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
        let class: ClusterClass = serde_json::from_value(
            docs.iter()
                .find(|d| d["kind"] == "ClusterClass")
                .unwrap()
                .clone(),
        )
        .unwrap();
        let template = |kind: &str, name: &str| {
            docs.iter()
                .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
                .unwrap()
                .clone()
        };
        let global = json!({
            "imageRepository": "",
            "etcdImageTag": "",
            "coreDNSImageTag": "",
            "podSecurityStandard": {"enabled": true, "enforce": "baseline", "audit": "restricted", "warn": "restricted"},
            "builtin": {"cluster": {"name": "c1", "namespace": "default"}},
        });
        let cp_vars = json!({"builtin": {"controlPlane": {"version": "v1.24.3", "name": "c1-x"}}});
        let mut items = vec![
            Item {
                holder: Holder::ControlPlane,
                object: template("KubeadmControlPlaneTemplate", "quick-start-control-plane"),
                variables: cp_vars.clone(),
            },
            Item {
                holder: Holder::ControlPlaneMachineInfrastructure,
                object: template("DockerMachineTemplate", "quick-start-control-plane"),
                variables: cp_vars,
            },
            Item {
                holder: Holder::MachineDeploymentInfrastructure("default-worker".into()),
                object: template(
                    "DockerMachineTemplate",
                    "quick-start-default-worker-machinetemplate",
                ),
                variables: json!({"builtin": {"machineDeployment": {"version": "v1.28.13", "class": "default-worker", "topologyName": "md-0"}}}),
            },
        ];
        apply(&class.spec.patches, &global, &mut items).unwrap();
        assert_eq!(
            items[1].object["spec"]["template"]["spec"]["customImage"],
            "kindest/node:v1.24.3"
        );
        assert_eq!(
            items[2].object["spec"]["template"]["spec"]["customImage"],
            "kindest/node:v1.28.13"
        );
        let kcp = &items[0].object["spec"]["template"]["spec"]["kubeadmConfigSpec"];
        assert_eq!(
            kcp["clusterConfiguration"]["apiServer"]["extraArgs"],
            json!([{"name": "admission-control-config-file", "value": "/etc/kubernetes/kube-apiserver-admission-pss.yaml"}])
        );
        let file = &kcp["files"][0];
        assert_eq!(
            file["path"],
            "/etc/kubernetes/kube-apiserver-admission-pss.yaml"
        );
        let content = file["content"].as_str().unwrap();
        // Below v1.25 the class picks the v1beta1 PodSecurity configuration.
        assert!(
            content.contains("apiVersion: pod-security.admission.config.k8s.io/v1beta1"),
            "{content}"
        );
        assert!(content.contains("enforce: \"baseline\""), "{content}");
        // The empty image variables leave their patches off.
        assert!(kcp["clusterConfiguration"].get("imageRepository").is_none());
    }

    /// A patch whose template calls a function capw does not have names the patch, the kind and
    /// the function.
    #[test]
    fn an_unknown_function_names_the_patch() {
        let patch: ClusterClassPatch = serde_json::from_value(json!({
            "name": "hashed",
            "definitions": [{
                "selector": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerClusterTemplate", "matchResources": {"infrastructureCluster": true}},
                "jsonPatches": [{"op": "add", "path": "/spec/template/spec/x", "valueFrom": {"template": "{{ sha256sum .v }}"}}],
            }],
        }))
        .unwrap();
        let mut items = vec![item(Holder::InfrastructureCluster, "DockerClusterTemplate")];
        let e = apply(&[patch], &json!({"v": 1}), &mut items)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("patch \"hashed\" on DockerClusterTemplate:") && e.contains("sha256sum"),
            "{e}"
        );
    }
}
