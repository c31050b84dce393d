//! The OpenAPI schemas the bundled providers serve KubeadmConfig, KubeadmConfigTemplate,
//! KubeadmControlPlane and KubeadmControlPlaneTemplate with (`controlplane.cluster.x-k8s.io`
//! and `bootstrap.cluster.x-k8s.io`, v1beta2).
//!
//! Every object keeps every upstream field: each level preserves unknown fields, so a manifest
//! written for upstream's CRDs is stored as written. What is declared is what the API server
//! must default or check at admission, as upstream's webhooks and CEL rules do: the
//! `rollout.strategy` defaults, odd replicas with stacked etcd, one minor version per upgrade,
//! the frozen `controlPlaneEndpoint`/`certificatesDir`, and the v1beta2 shapes users most often
//! get wrong coming from v1beta1 (`extraArgs` and `kubeletExtraArgs` are `{name, value}`
//! lists, not maps). Messages follow upstream's webhook wording where it has one.

use serde_json::{Value, json};

/// A version upstream's webhook accepts: semver with the leading `v`. `[.]`, not a backslash
/// escape: the pattern sits in a CEL string literal, where `\.` is no escape.
const VERSION_PATTERN: &str =
    "^v(0|[1-9][0-9]*)[.](0|[1-9][0-9]*)[.](0|[1-9][0-9]*)([-+][0-9A-Za-z.+-]*)?$";

fn open() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

fn open_with(properties: Value) -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": properties})
}

fn strings(max_len: u32, max_items: u32) -> Value {
    json!({"type": "array", "maxItems": max_items, "x-kubernetes-list-type": "atomic",
        "items": {"type": "string", "maxLength": max_len}})
}

/// `extraArgs`/`kubeletExtraArgs`: v1beta2's `[]Arg`, unique by name.
fn args(field: &str) -> Value {
    json!({
        "type": "array", "maxItems": 100,
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name", "value"],
        "items": {"type": "object", "required": ["name", "value"], "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 256},
            "value": {"type": "string", "maxLength": 1024},
        }},
        "x-kubernetes-validations": [{
            "rule": "self.all(x, self.exists_one(y, x.name == y.name))",
            "message": format!("{field} name must be unique"),
        }],
    })
}

fn component() -> Value {
    open_with(json!({"extraArgs": args("extraArgs")}))
}

fn node_registration() -> Value {
    open_with(json!({
        "name": {"type": "string", "maxLength": 253},
        "kubeletExtraArgs": args("kubeletExtraArgs"),
        "taints": {"type": "array", "maxItems": 100, "x-kubernetes-list-type": "atomic", "items": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": true, "required": ["key", "effect"],
            "properties": {
                "key": {"type": "string", "minLength": 1},
                "value": {"type": "string"},
                "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
            }
        }},
    }))
}

fn file() -> Value {
    json!({
        "type": "object", "required": ["path"],
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 512},
            "owner": {"type": "string", "maxLength": 256},
            "permissions": {"type": "string", "maxLength": 16},
            "encoding": {"type": "string", "enum": ["base64", "gzip", "gzip+base64"]},
            "append": {"type": "boolean"},
            "content": {"type": "string", "maxLength": 10240},
            "contentFrom": {"type": "object", "required": ["secret"], "properties": {
                "secret": {"type": "object", "required": ["name", "key"], "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 253},
                    "key": {"type": "string", "minLength": 1, "maxLength": 256},
                }},
            }},
            "contentFormat": {"type": "string", "enum": ["Raw", "Template"]},
        },
        "x-kubernetes-validations": [{
            "rule": "!(has(self.content) && has(self.contentFrom))",
            "message": "only one of content or contentFrom may be specified in a single file",
        }],
    })
}

/// `ClusterConfiguration` as v1beta2's KubeadmConfigSpec holds it.
fn cluster_configuration() -> Value {
    open_with(json!({
        "apiServer": open_with(json!({
            "certSANs": strings(253, 100),
            "extraArgs": args("extraArgs"),
        })),
        "controllerManager": component(),
        "scheduler": component(),
        "etcd": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"local": open(), "external": open()},
            "x-kubernetes-validations": [{
                "rule": "!(has(self.local) && has(self.external))",
                "message": "local and external etcd are mutually exclusive: set one of etcd.local and etcd.external",
            }],
        },
        "controlPlaneEndpoint": {"type": "string", "maxLength": 512},
        "certificatesDir": {"type": "string", "maxLength": 512},
        "caCertificateValidityPeriodDays": {"type": "integer", "format": "int32", "minimum": 1},
        "certificateValidityPeriodDays": {"type": "integer", "format": "int32", "minimum": 1},
        "encryptionAlgorithm": {"type": "string",
            "enum": ["ECDSA-P256", "ECDSA-P384", "RSA-2048", "RSA-3072", "RSA-4096"]},
    }))
}

/// `KubeadmConfigSpec`, as KubeadmConfig's `spec`, a template's `spec.template.spec` and a
/// KubeadmControlPlane's `spec.kubeadmConfigSpec` hold it.
pub fn kubeadm_config_spec() -> Value {
    kubeadm_config_spec_with(cluster_configuration())
}

fn kubeadm_config_spec_with(cluster_configuration: Value) -> Value {
    open_with(json!({
        "clusterConfiguration": cluster_configuration,
        "initConfiguration": open_with(json!({"nodeRegistration": node_registration()})),
        "joinConfiguration": open_with(json!({
            "nodeRegistration": node_registration(),
            "controlPlane": open(),
            "discovery": open(),
        })),
        "files": {
            "type": "array", "maxItems": 200, "x-kubernetes-list-type": "atomic", "items": file(),
            "x-kubernetes-validations": [{
                "rule": "self.all(x, self.exists_one(y, x.path == y.path))",
                "message": "files path must be unique: each path may be written once",
            }],
        },
        "bootCommands": strings(10240, 1000),
        "preKubeadmCommands": strings(10240, 1000),
        "postKubeadmCommands": strings(10240, 1000),
        "users": {"type": "array", "maxItems": 100, "x-kubernetes-list-type": "atomic", "items": open()},
        "ntp": open(),
        "diskSetup": open(),
        "mounts": {"type": "array", "maxItems": 100, "x-kubernetes-list-type": "atomic",
            "items": {"type": "array", "maxItems": 100, "x-kubernetes-list-type": "atomic",
                "items": {"type": "string", "maxLength": 512}}},
        "format": {"type": "string", "enum": ["cloud-config", "ignition"]},
        "verbosity": {"type": "integer", "format": "int32"},
        "ignition": open(),
    }))
}

/// The fields of a control plane's `kubeadmConfigSpec` that upstream's webhook freezes, as a
/// transition rule on `clusterConfiguration`.
fn frozen_cluster_configuration() -> Value {
    let same = |f: &str| {
        format!(
            "(has(self.{f}) == has(oldSelf.{f}) && (!has(self.{f}) || self.{f} == oldSelf.{f}))"
        )
    };
    let rule = [
        "controlPlaneEndpoint",
        "certificatesDir",
        "caCertificateValidityPeriodDays",
    ]
    .map(same)
    .join(" && ");
    let mut cc = cluster_configuration();
    cc["x-kubernetes-validations"] = json!([
        {"rule": rule,
         "message": "controlPlaneEndpoint, certificatesDir and caCertificateValidityPeriodDays are immutable: create a new KubeadmControlPlane to change them"},
        {"rule": "!has(self.etcd) || !has(oldSelf.etcd) || (has(self.etcd.external) == has(oldSelf.etcd.external))",
         "message": "etcd cannot switch between local and external"},
    ]);
    cc
}

fn machine_template(with_infrastructure: bool) -> Value {
    let mut spec = open_with(json!({
        "readinessGates": {"type": "array", "maxItems": 32, "x-kubernetes-list-type": "atomic", "items": open()},
        "deletion": open_with(json!({
            "nodeDrainTimeoutSeconds": {"type": "integer", "format": "int32", "minimum": 0},
            "nodeVolumeDetachTimeoutSeconds": {"type": "integer", "format": "int32", "minimum": 0},
            "nodeDeletionTimeoutSeconds": {"type": "integer", "format": "int32", "minimum": 0},
        })),
        "taints": {"type": "array", "maxItems": 64, "x-kubernetes-list-type": "atomic", "items": open()},
    }));
    if with_infrastructure {
        spec["required"] = json!(["infrastructureRef"]);
        spec["properties"]["infrastructureRef"] = json!({
            "type": "object", "required": ["apiGroup", "kind", "name"],
            "properties": {
                "apiGroup": {"type": "string", "minLength": 1, "maxLength": 253},
                "kind": {"type": "string", "minLength": 1, "maxLength": 63},
                "name": {"type": "string", "minLength": 1, "maxLength": 253},
            },
        });
    }
    json!({
        "type": "object", "x-kubernetes-preserve-unknown-fields": true,
        "required": if with_infrastructure { json!(["spec"]) } else { json!([]) },
        "properties": {
            "metadata": {"type": "object", "properties": {
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            }},
            "spec": spec,
        },
    })
}

/// `rollout`: upstream's defaulter always sets `strategy.type: RollingUpdate` and
/// `maxSurge: 1`; the defaults here give the same object.
fn rollout() -> Value {
    json!({
        "type": "object", "x-kubernetes-preserve-unknown-fields": true, "default": {},
        "properties": {
            "after": {"type": "string", "format": "date-time"},
            "before": open_with(json!({
                "certificatesExpiryDays": {"type": "integer", "format": "int32", "minimum": 7},
            })),
            "strategy": {
                "type": "object", "default": {},
                "properties": {
                    "type": {"type": "string", "enum": ["RollingUpdate"], "default": "RollingUpdate"},
                    "rollingUpdate": {
                        "type": "object", "default": {},
                        "properties": {"maxSurge": {"x-kubernetes-int-or-string": true, "default": 1}},
                    },
                },
            },
        },
    })
}

fn remediation() -> Value {
    open_with(json!({
        "maxRetry": {"type": "integer", "format": "int32"},
        "retryPeriodSeconds": {"type": "integer", "format": "int32", "minimum": 0},
        "minHealthyPeriodSeconds": {"type": "integer", "format": "int32", "minimum": 0},
    }))
}

/// The upgrade rule of upstream's `validateVersion`: the same major version, and at most one
/// minor version up at a time.
fn version() -> Value {
    let minor = |s: &str| format!("int({s}.split('.')[1])");
    let major = |s: &str| format!("int({s}.split('.')[0].substring(1))");
    json!({
        "type": "string", "minLength": 2, "maxLength": 256,
        "x-kubernetes-validations": [
            {"rule": format!("self.matches('{VERSION_PATTERN}')"),
             "message": "must be a Kubernetes version with its leading v, such as v1.29.10"},
            {"rule": format!(
                "!self.matches('{VERSION_PATTERN}') || !oldSelf.matches('{VERSION_PATTERN}') || ({} == {} && {} <= {} + 1)",
                major("self"), major("oldSelf"), minor("self"), minor("oldSelf")),
             "messageExpression": "'cannot update Kubernetes version from ' + oldSelf + ' to ' + self + ': upgrade one minor version at a time'"},
        ],
    })
}

/// KubeadmControlPlane's `spec`.
pub fn kubeadm_control_plane_spec() -> Value {
    let kcs = kubeadm_config_spec_with(frozen_cluster_configuration());
    json!({
        "type": "object", "x-kubernetes-preserve-unknown-fields": true,
        "required": ["version", "machineTemplate"],
        "properties": {
            "replicas": {"type": "integer", "format": "int32", "minimum": 1, "default": 1},
            "version": version(),
            "machineTemplate": machine_template(true),
            "kubeadmConfigSpec": kcs,
            "rollout": rollout(),
            "remediation": remediation(),
            "machineNaming": open_with(json!({"template": {"type": "string", "minLength": 1, "maxLength": 256}})),
        },
        "x-kubernetes-validations": [
            {"rule": "self.replicas % 2 == 1 || self.?kubeadmConfigSpec.?clusterConfiguration.?etcd.?external.hasValue()",
             "fieldPath": ".replicas",
             "message": "cannot be an even number when etcd is stacked: use an odd number of replicas, or external etcd"},
            {"rule": "!(self.rollout.strategy.rollingUpdate.maxSurge == 0 && self.replicas < 3)",
             "fieldPath": ".rollout.strategy.rollingUpdate.maxSurge",
             "message": "maxSurge 0 needs at least 3 replicas: a control plane that scales in first would lose etcd quorum; set maxSurge to 1"},
            {"rule": "self.rollout.strategy.rollingUpdate.maxSurge == 0 || self.rollout.strategy.rollingUpdate.maxSurge == 1",
             "fieldPath": ".rollout.strategy.rollingUpdate.maxSurge",
             "message": "value must be 1 or 0"},
        ],
    })
}

/// KubeadmControlPlaneTemplate's `spec`: a KubeadmControlPlane spec without `replicas`,
/// `version` or the infrastructure reference, which a ClusterClass topology supplies.
pub fn kubeadm_control_plane_template_spec() -> Value {
    let inner = json!({
        "type": "object", "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "machineTemplate": machine_template(false),
            "kubeadmConfigSpec": kubeadm_config_spec(),
            "rollout": rollout(),
            "remediation": remediation(),
            "machineNaming": open(),
        },
    });
    template_of(inner)
}

/// KubeadmConfigTemplate's `spec`.
pub fn kubeadm_config_template_spec() -> Value {
    template_of(kubeadm_config_spec())
}

fn template_of(spec: Value) -> Value {
    json!({
        "type": "object", "required": ["template"],
        "properties": {"template": {
            "type": "object",
            "properties": {
                "metadata": {"type": "object", "properties": {
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                }},
                "spec": spec,
            },
        }},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every array has items and every declared node a type: the API server refuses a CRD
    /// whose schema is not structural.
    fn structural(s: &Value, path: &str) {
        let free = s.get("x-kubernetes-int-or-string") == Some(&json!(true));
        assert!(free || s.get("type").is_some(), "{path} has no type");
        if s["type"] == "array" {
            assert!(s.get("items").is_some(), "{path} has no items");
            structural(&s["items"], &format!("{path}[]"));
        }
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            for (k, p) in props {
                structural(p, &format!("{path}.{k}"));
            }
        }
    }

    #[test]
    fn schemas_are_structural() {
        for (name, s) in [
            ("KubeadmConfig", kubeadm_config_spec()),
            ("KubeadmConfigTemplate", kubeadm_config_template_spec()),
            ("KubeadmControlPlane", kubeadm_control_plane_spec()),
            (
                "KubeadmControlPlaneTemplate",
                kubeadm_control_plane_template_spec(),
            ),
        ] {
            structural(&s, name);
        }
    }
}
