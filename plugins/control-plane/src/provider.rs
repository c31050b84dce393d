// The provider's logic, kept apart from the export so the host's benchmark can build the same
// text natively (`include!`) to compare it with the component.

use capw_sdk::*;

const GROUP: &str = "controlplane.cluster.x-k8s.io";
const VERSION: &str = "0.1.0";

pub struct ControlPlane;

fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn kubeconfig(cluster: &str, server: &str, ca: &str, token: &str) -> String {
    let user = format!("{cluster}-admin");
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": base64(ca.as_bytes())}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": format!("{user}@{cluster}"), "context": {"cluster": cluster, "user": user}}],
        "current-context": format!("{user}@{cluster}"),
    })
    .to_string()
}

fn condition_true(m: &Value, t: &str) -> bool {
    m.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
}

fn replicas(obj: &View) -> Result<u32, ProviderError> {
    match obj.get("/spec/replicas") {
        None => Ok(1),
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=7).contains(n))
            .map(|n| n as u32)
            .ok_or_else(|| {
                ProviderError::InvalidSpec(format!(
                    "{}: spec.replicas must be an integer from 1 to 7",
                    obj.name()
                ))
            }),
    }
}

impl Provider for ControlPlane {
    fn metadata() -> Metadata {
        Metadata {
            name: "control-plane".into(),
            version: VERSION.into(),
            provider_type: ProviderType::ControlPlane,
            contract_version: "v1beta2".into(),
            kinds: vec![kind(GROUP, "CapwControlPlane")],
            crds: vec![crd(
                GROUP,
                "CapwControlPlane",
                "capwcontrolplanes",
                &[
                    (
                        "Cluster",
                        "string",
                        ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
                    ),
                    (
                        "Initialized",
                        "boolean",
                        ".status.initialization.controlPlaneInitialized",
                    ),
                    ("Desired", "integer", ".spec.replicas"),
                    ("Replicas", "integer", ".status.replicas"),
                    ("Available", "integer", ".status.availableReplicas"),
                    ("Version", "string", ".spec.version"),
                ],
            )],
        }
    }

    fn reconcile_control_plane(ctx: Context) -> Result<ControlPlaneStatus, ProviderError> {
        let obj = ctx.view()?;
        let cluster = ctx.cluster_view()?.ok_or_else(|| {
            wait(
                format!(
                    "waiting for the Cluster controller to set an owner reference on {}",
                    obj.name()
                ),
                5,
            )
        })?;
        let desired = replicas(&obj)?;
        if obj
            .str("/spec/machineTemplate/spec/infrastructureRef/kind")
            .is_empty()
        {
            return Err(ProviderError::InvalidSpec(format!(
                "{}: spec.machineTemplate.spec.infrastructureRef must name an infrastructure machine template",
                obj.name()
            )));
        }
        let machines: Vec<Value> = ctx
            .owned_machines
            .iter()
            .filter_map(|m| serde_json::from_str(m).ok())
            .collect();
        let live: Vec<&Value> = machines
            .iter()
            .filter(|m| m.pointer("/metadata/deletionTimestamp").is_none())
            .collect();
        let with_node = live
            .iter()
            .filter(|m| m.pointer("/status/nodeRef/name").is_some())
            .count() as u32;
        let ready = live.iter().filter(|m| condition_true(m, "Ready")).count() as u32;
        let was_initialized = obj
            .get("/status/initialization/controlPlaneInitialized")
            .and_then(Value::as_bool)
            == Some(true);
        let initialized = was_initialized || with_node > 0;
        let available = initialized && with_node > 0;

        let count = live.len() as u32;
        let mut to_create = vec![];
        let mut to_delete = vec![];
        // One machine at a time: the first must be initialized before others join, and each
        // join waits for the previous machine to get its Node.
        if count < desired && with_node == count {
            let taken: Vec<&str> = machines
                .iter()
                .filter_map(|m| m.pointer("/metadata/name").and_then(Value::as_str))
                .collect();
            let name = (0..)
                .map(|i| format!("{}-{i}", obj.name()))
                .find(|n| !taken.contains(&n.as_str()))
                .unwrap_or_default();
            let fds: Vec<&str> = cluster
                .get("/status/failureDomains")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter(|fd| fd["controlPlane"] != false)
                        .filter_map(|fd| fd["name"].as_str())
                        .collect()
                })
                .unwrap_or_default();
            to_create.push(MachineRequest {
                name,
                version: obj
                    .get("/spec/version")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                failure_domain: (!fds.is_empty())
                    .then(|| fds[count as usize % fds.len()].to_string()),
            });
        } else if count > desired {
            let mut names: Vec<&str> = live
                .iter()
                .filter_map(|m| m.pointer("/metadata/name").and_then(Value::as_str))
                .collect();
            names.sort();
            if let Some(newest) = names.last() {
                to_delete.push(newest.to_string());
            }
        }

        let host = cluster.str("/spec/controlPlaneEndpoint/host");
        let port = cluster
            .get("/spec/controlPlaneEndpoint/port")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let kubeconfig = match (ctx.secret("ca.crt"), ctx.secret("token")) {
            (Some(ca), Some(token)) if !host.is_empty() && port != 0 => Some(kubeconfig(
                cluster.name(),
                &format!("https://{host}:{port}"),
                ca,
                token,
            )),
            _ => None,
        };
        let mut conditions = vec![
            condition(
                "Available",
                available,
                if available {
                    "Available"
                } else {
                    "NotAvailable"
                },
                "",
            ),
            condition(
                "ScalingUp",
                count < desired,
                if count < desired {
                    "ScalingUp"
                } else {
                    "NotScalingUp"
                },
                &if count < desired {
                    format!("scaling up from {count} to {desired} replicas")
                } else {
                    String::new()
                },
            ),
        ];
        if !initialized {
            conditions.push(condition(
                "Initialized",
                false,
                "WaitingForFirstNode",
                "waiting for the first control-plane Machine to get a Node",
            ));
        } else {
            conditions.push(condition("Initialized", true, "Initialized", ""));
        }
        // status.selector and status.version are contract fields: the host sets them.
        let mut c = common(conditions, None);
        // Changes of the control plane's Machines call again; this is only a fallback.
        if count != desired || with_node < count {
            c.requeue_after_seconds = Some(15);
        }
        Ok(ControlPlaneStatus {
            initialized,
            available,
            endpoint: None,
            replicas: ReplicaCounts {
                desired,
                ready,
                available: with_node,
                up_to_date: count,
            },
            kubeconfig,
            machines_to_create: to_create,
            machines_to_delete: to_delete,
            common: c,
        })
    }

    fn delete_control_plane(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        // The host deletes the control-plane Machines first; done once they are gone.
        let done = ctx.owned_machines.is_empty();
        let mut c = common(vec![], None);
        if !done {
            c.requeue_after_seconds = Some(2);
        }
        Ok(DeleteStatus { done, common: c })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(super::base64(b""), "");
        assert_eq!(super::base64(b"f"), "Zg==");
        assert_eq!(super::base64(b"fo"), "Zm8=");
        assert_eq!(super::base64(b"foo"), "Zm9v");
        assert_eq!(super::base64(b"foobar"), "Zm9vYmFy");
    }
}
