//! `capw manifests`: what `clusterctl init` would apply for capw, printed as YAML for
//! `kubectl apply -f -`: the CRDs, a namespace and ServiceAccount, the RBAC the host needs
//! (`capw_manager::rbac`), the plugins as ConfigMaps, and a Deployment of leader-elected
//! replicas.

use anyhow::Context as _;
use capw_manager::rbac::ACCOUNTS;
use serde_json::{Value, json};
use std::path::PathBuf;

/// The ServiceAccount, ClusterRole and Deployment are all named this.
pub const NAME: &str = capw_manager::rbac::HOST.name;
/// The Service in front of the replicas' admission webhooks.
pub const WEBHOOK_SERVICE: &str = "capw-webhook-service";

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The namespace the host runs in (its Lease and ServiceAccount live there).
    #[arg(long, default_value = "capw-system")]
    pub namespace: String,
    /// The image whose entrypoint is the `capw` binary.
    #[arg(long, default_value = "capw:latest")]
    pub image: String,
    /// Replicas of the host; one leads, the others stand by.
    #[arg(long, default_value_t = 2)]
    pub replicas: u32,
    /// A provider component to ship (repeatable): NAME.wasm, with NAME.yaml beside it when
    /// there is one, becomes the ConfigMap capw-plugin-NAME, mounted into the plugin directory.
    /// A ConfigMap holds at most 1 MiB, so larger components need a volume of their own.
    #[arg(long = "plugin")]
    pub plugins: Vec<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut out = String::new();
    for doc in documents(&args)? {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&doc)?);
    }
    print!("{out}");
    Ok(())
}

/// One ConfigMap per plugin: (its name, the object).
fn plugin_config_maps(args: &Args) -> anyhow::Result<Vec<(String, Value)>> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = vec![];
    for path in &args.plugins {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|_| path.extension().is_some_and(|e| e == "wasm"))
            .with_context(|| format!("--plugin {}: expected NAME.wasm", path.display()))?;
        let wasm = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let mut binary = serde_json::Map::new();
        binary.insert(format!("{name}.wasm"), json!(b64.encode(&wasm)));
        let mut data = serde_json::Map::new();
        let grants = path.with_extension("yaml");
        if grants.exists() {
            let text = std::fs::read_to_string(&grants)
                .with_context(|| format!("reading {}", grants.display()))?;
            data.insert(format!("{name}.yaml"), json!(text));
        }
        anyhow::ensure!(
            wasm.len() < 1024 * 1024,
            "--plugin {}: {} bytes is more than a ConfigMap holds (1 MiB); mount it from a volume instead",
            path.display(),
            wasm.len()
        );
        let cm = format!("capw-plugin-{name}");
        out.push((
            cm.clone(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": cm, "namespace": args.namespace},
                "binaryData": binary, "data": data}),
        ));
    }
    Ok(out)
}

fn documents(args: &Args) -> anyhow::Result<Vec<Value>> {
    let ns = args.namespace.as_str();
    let mut docs: Vec<Value> = capw_api::crds()
        .into_iter()
        .map(|(_, crd)| serde_json::to_value(crd))
        .collect::<Result<_, _>>()?;
    docs.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    // One ServiceAccount per identity, with its ClusterRole and, where it needs one, a Role in
    // the host's namespace; the host acts as the others (--component-identities).
    for account in ACCOUNTS {
        let name = account.name;
        let rules: Vec<Value> = account.cluster.iter().map(|r| r.to_json()).collect();
        let subject = json!([{"kind": "ServiceAccount", "name": name, "namespace": ns}]);
        docs.extend([
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": ns}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": name}, "rules": rules}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": subject}),
        ]);
        if !account.namespace.is_empty() {
            let rules: Vec<Value> = account.namespace.iter().map(|r| r.to_json()).collect();
            docs.extend([
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": name, "namespace": ns}, "rules": rules}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": name, "namespace": ns},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                    "subjects": subject}),
            ]);
        }
    }
    let maps = plugin_config_maps(args)?;
    let sources: Vec<Value> = maps
        .iter()
        .map(|(name, _)| json!({"configMap": {"name": name}}))
        .collect();
    docs.extend(maps.into_iter().map(|(_, cm)| cm));
    let labels = json!({"app.kubernetes.io/name": "capw", "control-plane": "controller-manager"});
    docs.push(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": WEBHOOK_SERVICE, "namespace": ns},
        "spec": {"selector": labels,
            "ports": [{"port": 443, "targetPort": 9443, "protocol": "TCP"}]},
    }));
    // The configurations name the Service; each replica writes the caBundle at start.
    let endpoint = capw_manager::webhooks::Endpoint::Service {
        namespace: ns.to_string(),
        name: WEBHOOK_SERVICE.to_string(),
        port: 443,
    };
    for mut config in capw_manager::webhooks::configurations(&endpoint, "") {
        if let Some(hooks) = config["webhooks"].as_array_mut() {
            for hook in hooks {
                if let Some(c) = hook["clientConfig"].as_object_mut() {
                    c.remove("caBundle");
                }
            }
        }
        docs.push(config);
    }
    docs.push(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": ns, "labels": labels},
        "spec": {
            "replicas": args.replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": NAME,
                    "terminationGracePeriodSeconds": 10,
                    "containers": [{
                        "name": "manager",
                        "image": args.image,
                        "args": [
                            "run",
                            "--plugins=/plugins",
                            "--cache-dir=/cache",
                            "--metrics=0.0.0.0:8080",
                            "--leader-elect=true",
                            "--leader-election-id=capw-controller-leader-election",
                            "--leader-elect-lease-duration=15s",
                            "--leader-elect-renew-deadline=10s",
                            "--leader-elect-retry-period=2s",
                            "--webhooks=0.0.0.0:9443",
                            format!("--webhook-service={ns}/{WEBHOOK_SERVICE}"),
                            "--component-identities".to_string(),
                        ],
                        "env": [
                            {"name": "CAPW_LOG_FORMAT", "value": "json"},
                            {"name": "RUST_LOG", "value": "info"},
                        ],
                        "ports": [
                            {"name": "metrics", "containerPort": 8080, "protocol": "TCP"},
                            {"name": "webhook-server", "containerPort": 9443, "protocol": "TCP"},
                        ],
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"},
                            "initialDelaySeconds": 15, "periodSeconds": 20},
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"},
                            "initialDelaySeconds": 5, "periodSeconds": 10},
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "256Mi"},
                            "limits": {"memory": "2Gi"},
                        },
                        "securityContext": {"allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [
                            {"name": "plugins", "mountPath": "/plugins", "readOnly": true},
                            {"name": "cache", "mountPath": "/cache"},
                        ],
                    }],
                    "volumes": [
                        {"name": "plugins", "projected": {"sources": sources}},
                        {"name": "cache", "emptyDir": {}},
                    ],
                },
            },
        },
    }));
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_that_is_not_wasm_is_named() {
        let args = Args {
            namespace: "capw-system".into(),
            image: "capw:latest".into(),
            replicas: 2,
            plugins: vec!["plugins.d/readme.txt".into()],
        };
        let e = documents(&args)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("--plugin plugins.d/readme.txt: expected NAME.wasm"),
            "{e}"
        );
    }
}
