//! The provider: metadata and the contract calls.

use crate::rollout::{Desired, Member, Step, next_step, outdated};
use capw_kubeadm::schema;
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
            // int32, as upstream's field; oddness is the API server's check (the CRD's rule).
            .filter(|n| (1..=2_147_483_647).contains(n))
            .map(|n| n as u32)
            .ok_or_else(|| {
                ProviderError::InvalidSpec(format!(
                    "{}: spec.replicas must be a positive integer",
                    obj.name()
                ))
            }),
    }
}

/// `spec.rollout.strategy.rollingUpdate.maxSurge`: 0 or 1 (default 1), and 0 only with at
/// least 3 replicas, as upstream's webhook allows.
fn max_surge(obj: &View, replicas: u32) -> Result<u32, ProviderError> {
    let field = "/spec/rollout/strategy/rollingUpdate/maxSurge";
    let surge = match obj.get(field) {
        None => 1,
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .filter(|n| *n <= 1)
            .ok_or_else(|| {
                ProviderError::InvalidSpec(format!(
                    "{}: spec.rollout.strategy.rollingUpdate.maxSurge must be 0 or 1",
                    obj.name()
                ))
            })? as u32,
    };
    if surge == 0 && replicas < 3 {
        return Err(ProviderError::InvalidSpec(format!(
            "{}: spec.rollout.strategy.rollingUpdate.maxSurge 0 needs spec.replicas of at least 3 (a control plane of {replicas} would lose quorum); set maxSurge to 1",
            obj.name()
        )));
    }
    Ok(surge)
}

fn member(m: &Value) -> Member {
    let text = |p: &str| m.pointer(p).and_then(Value::as_str).map(str::to_string);
    Member {
        name: text("/metadata/name").unwrap_or_default(),
        created: text("/metadata/creationTimestamp").unwrap_or_default(),
        version: text("/spec/version"),
        template: text("/metadata/annotations/cluster.x-k8s.io~1cloned-from-name"),
        failure_domain: text("/spec/failureDomain").filter(|f| !f.is_empty()),
        has_node: m.pointer("/status/nodeRef/name").is_some(),
        deleting: m.pointer("/metadata/deletionTimestamp").is_some(),
    }
}

impl Provider for ControlPlane {
    fn metadata() -> Metadata {
        let cond = |t: &str| format!(".status.conditions[?(@.type==\"{t}\")].status");
        // Upstream's columns, in upstream's order: "Available" twice (the condition, then
        // the count) and Age before Version.
        let columns = vec![
            column(
                "Cluster",
                "string",
                ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
                0,
            ),
            column("Available", "string", &cond("Available"), 0),
            column("Desired", "integer", ".spec.replicas", 0),
            column("Current", "integer", ".status.replicas", 0),
            column("Ready", "integer", ".status.readyReplicas", 0),
            column("Available", "integer", ".status.availableReplicas", 0),
            column("Up-to-date", "integer", ".status.upToDateReplicas", 0),
            column("Paused", "string", &cond("Paused"), 10),
            column(
                "Initialized",
                "boolean",
                ".status.initialization.controlPlaneInitialized",
                0,
            ),
            column("Age", "date", ".metadata.creationTimestamp", 0),
            column("Version", "string", ".spec.version", 0),
        ];
        Metadata {
            name: "control-plane".into(),
            version: VERSION.into(),
            provider_type: ProviderType::ControlPlane,
            contract_version: "v1beta2".into(),
            kinds: vec![
                kind(
                    GROUP,
                    "KubeadmControlPlane",
                    // Its Machines get a KubeadmConfig with the spec of spec.kubeadmConfigSpec.
                    KindRole::ControlPlane(ControlPlaneMachines {
                        bootstrap_config: KindRef {
                            group: "bootstrap.cluster.x-k8s.io".into(),
                            kind: "KubeadmConfig".into(),
                        },
                        spec_field: "kubeadmConfigSpec".into(),
                    }),
                ),
                kind(
                    GROUP,
                    "KubeadmControlPlaneTemplate",
                    KindRole::ControlPlaneTemplate("KubeadmControlPlane".into()),
                ),
            ],
            crds: vec![
                CrdDef {
                    short_names: vec!["kcp".into()],
                    columns,
                    spec: schema::kubeadm_control_plane_spec(),
                    scale: Some((
                        ".spec.replicas".into(),
                        ".status.replicas".into(),
                        ".status.selector".into(),
                    )),
                    ..CrdDef::new(GROUP, "KubeadmControlPlane", "kubeadmcontrolplanes")
                }
                .render(),
                CrdDef {
                    columns: vec![
                        column(
                            "ClusterClass",
                            "string",
                            ".metadata.ownerReferences[?(@.kind==\"ClusterClass\")].name",
                            0,
                        ),
                        column("Age", "date", ".metadata.creationTimestamp", 0),
                    ],
                    spec: schema::kubeadm_control_plane_template_spec(),
                    status: false,
                    ..CrdDef::new(
                        GROUP,
                        "KubeadmControlPlaneTemplate",
                        "kubeadmcontrolplanetemplates",
                    )
                }
                .render(),
            ],
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

        let desired_state = Desired {
            replicas: desired,
            version: obj
                .get("/spec/version")
                .and_then(Value::as_str)
                .map(str::to_string),
            template: obj
                .str("/spec/machineTemplate/spec/infrastructureRef/name")
                .to_string(),
            max_surge: max_surge(&obj, desired)?,
        };
        let members: Vec<Member> = machines.iter().map(member).collect();
        let domains: Vec<String> = cluster
            .get("/status/failureDomains")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter(|fd| fd["controlPlane"] != false)
                    .filter_map(|fd| fd["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let count = live.len() as u32;
        let up_to_date = members
            .iter()
            .filter(|m| !m.deleting && !outdated(&desired_state, m))
            .count() as u32;
        let mut to_create = vec![];
        let mut to_delete = vec![];
        match next_step(&desired_state, &members, &domains) {
            Step::Create(failure_domain) => {
                let taken: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
                let name = (0..)
                    .map(|i| format!("{}-{i}", obj.name()))
                    .find(|n| !taken.contains(&n.as_str()))
                    .unwrap_or_default();
                to_create.push(MachineRequest {
                    name,
                    version: desired_state.version.clone(),
                    failure_domain,
                });
            }
            Step::Delete(name) => to_delete.push(name),
            Step::WaitForHealthy | Step::Steady => {}
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
        let stale = count - up_to_date;
        conditions.push(condition(
            "RollingOut",
            stale > 0,
            if stale > 0 {
                "RollingOut"
            } else {
                "NotRollingOut"
            },
            &if stale > 0 {
                format!("rolling out {stale} not up-to-date replicas")
            } else {
                String::new()
            },
        ));
        conditions.push(condition(
            "MachinesUpToDate",
            stale == 0,
            if stale == 0 {
                "UpToDate"
            } else {
                "NotUpToDate"
            },
            &if stale > 0 {
                format!("{stale} of {count} Machines are not up to date")
            } else {
                String::new()
            },
        ));
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
        if count != desired || with_node < count || stale > 0 {
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
                up_to_date,
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
    use super::*;
    use capw_sdk::testing::{ContextBuilder, condition_of, context};

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(super::base64(b""), "");
        assert_eq!(super::base64(b"f"), "Zg==");
        assert_eq!(super::base64(b"fo"), "Zm8=");
        assert_eq!(super::base64(b"foo"), "Zm9v");
        assert_eq!(super::base64(b"foobar"), "Zm9vYmFy");
    }

    fn cp(replicas: Value) -> Value {
        let mut spec = json!({"machineTemplate": {"spec": {"infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "InMemoryMachineTemplate", "name": "t"}}},
            "version": "v1.33.0"});
        if !replicas.is_null() {
            spec["replicas"] = replicas;
        }
        json!({"metadata": {"name": "cp", "namespace": "ns"}, "spec": spec})
    }

    fn cluster(failure_domains: &[&str]) -> Value {
        let fds: Vec<Value> = failure_domains
            .iter()
            .map(|n| json!({"name": n, "controlPlane": true}))
            .collect();
        json!({"metadata": {"name": "c", "namespace": "ns"},
            "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443}},
            "status": {"failureDomains": fds}})
    }

    fn machine(name: &str, node: bool) -> Value {
        let mut m = json!({"metadata": {"name": name}, "spec": {"version": "v1.33.0"}});
        if node {
            m["status"] = json!({"nodeRef": {"name": name}});
        }
        m
    }

    /// Scaling as KCP does it: one Machine at a time, each waiting for the previous one's Node,
    /// the oldest deleted first, spread over control-plane failure domains.
    #[test]
    fn scaling_table() {
        struct Case {
            name: &'static str,
            replicas: Value,
            owned: &'static [(&'static str, bool)],
            fds: &'static [&'static str],
            create: &'static [(&'static str, Option<&'static str>)],
            delete: &'static [&'static str],
            initialized: bool,
            scaling_up: &'static str,
        }
        let cases = [
            Case {
                name: "first machine",
                replicas: json!(3),
                owned: &[],
                fds: &[],
                create: &[("cp-0", None)],
                delete: &[],
                initialized: false,
                scaling_up: "True",
            },
            Case {
                name: "replicas default to 1",
                replicas: Value::Null,
                owned: &[],
                fds: &[],
                create: &[("cp-0", None)],
                delete: &[],
                initialized: false,
                scaling_up: "True",
            },
            Case {
                name: "the next waits for the first Node",
                replicas: json!(3),
                owned: &[("cp-0", false)],
                fds: &[],
                create: &[],
                delete: &[],
                initialized: false,
                scaling_up: "True",
            },
            Case {
                name: "the second once the first has its Node",
                replicas: json!(3),
                owned: &[("cp-0", true)],
                fds: &[],
                create: &[("cp-1", None)],
                delete: &[],
                initialized: true,
                scaling_up: "True",
            },
            Case {
                name: "a free name is reused",
                replicas: json!(3),
                owned: &[("cp-1", true)],
                fds: &[],
                create: &[("cp-0", None)],
                delete: &[],
                initialized: true,
                scaling_up: "True",
            },
            Case {
                name: "spread over failure domains",
                replicas: json!(3),
                owned: &[("cp-0", true)],
                fds: &["a", "b"],
                create: &[("cp-1", Some("b"))],
                delete: &[],
                initialized: true,
                scaling_up: "True",
            },
            Case {
                name: "steady",
                replicas: json!(1),
                owned: &[("cp-0", true)],
                fds: &[],
                create: &[],
                delete: &[],
                initialized: true,
                scaling_up: "False",
            },
            Case {
                name: "scale down deletes the oldest",
                replicas: json!(1),
                owned: &[("cp-0", true), ("cp-1", true)],
                fds: &[],
                create: &[],
                delete: &["cp-0"],
                initialized: true,
                scaling_up: "False",
            },
        ];
        for c in cases {
            let owned = c
                .owned
                .iter()
                .enumerate()
                .map(|(i, (n, node))| {
                    let mut m = machine(n, *node);
                    if !c.fds.is_empty() {
                        m["spec"]["failureDomain"] = json!(c.fds[i % c.fds.len()]);
                    }
                    m
                })
                .collect();
            let ctx = context(cp(c.replicas.clone()))
                .cluster(cluster(c.fds))
                .owned(owned);
            let st = ControlPlane::reconcile_control_plane(ctx)
                .unwrap_or_else(|e| panic!("{}: {e:?}", c.name));
            let created: Vec<(&str, Option<&str>)> = st
                .machines_to_create
                .iter()
                .map(|r| (r.name.as_str(), r.failure_domain.as_deref()))
                .collect();
            assert_eq!(created, c.create, "{}: machines to create", c.name);
            assert!(
                st.machines_to_create
                    .iter()
                    .all(|r| r.version.as_deref() == Some("v1.33.0")),
                "{}: requests carry spec.version",
                c.name
            );
            assert_eq!(
                st.machines_to_delete, c.delete,
                "{}: machines to delete",
                c.name
            );
            assert_eq!(st.initialized, c.initialized, "{}: initialized", c.name);
            assert_eq!(
                condition_of(&st.common.conditions, "ScalingUp").map(|c| c.0),
                Some(c.scaling_up.to_string()),
                "{}: ScalingUp",
                c.name
            );
        }
    }

    /// A new version rolls: the spec's version is not what the Machines run, so none is up to
    /// date, the roll is reported, and the first step surges.
    #[test]
    fn a_version_change_rolls_and_says_so() {
        let mut obj = cp(json!(3));
        obj["spec"]["version"] = json!("v1.34.0");
        let owned = (0..3).map(|i| machine(&format!("cp-{i}"), true)).collect();
        let st = ControlPlane::reconcile_control_plane(
            context(obj.clone()).cluster(cluster(&[])).owned(owned),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(st.replicas.up_to_date, 0);
        assert_eq!(st.machines_to_create.len(), 1);
        assert_eq!(st.machines_to_create[0].version.as_deref(), Some("v1.34.0"));
        assert_eq!(
            condition_of(&st.common.conditions, "RollingOut"),
            Some(("True".into(), "RollingOut".into()))
        );
        assert_eq!(
            condition_of(&st.common.conditions, "MachinesUpToDate"),
            Some(("False".into(), "NotUpToDate".into()))
        );
        // With maxSurge 0 the first step deletes the oldest instead.
        obj["spec"]["rollout"] = json!({"strategy": {"rollingUpdate": {"maxSurge": 0}}});
        let owned = (0..3).map(|i| machine(&format!("cp-{i}"), true)).collect();
        let st =
            ControlPlane::reconcile_control_plane(context(obj).cluster(cluster(&[])).owned(owned))
                .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(st.machines_to_create.is_empty());
        assert_eq!(st.machines_to_delete, vec!["cp-0".to_string()]);
    }

    #[test]
    fn invalid_specs_name_the_field() {
        for (replicas, surge) in [(json!(3), json!(2)), (json!(1), json!(0))] {
            let mut obj = cp(replicas);
            obj["spec"]["rollout"] = json!({"strategy": {"rollingUpdate": {"maxSurge": surge}}});
            match ControlPlane::reconcile_control_plane(context(obj).cluster(cluster(&[]))) {
                Err(ProviderError::InvalidSpec(m)) => {
                    assert!(
                        m.contains("spec.rollout.strategy.rollingUpdate.maxSurge"),
                        "{m}"
                    )
                }
                other => panic!("{other:?}"),
            }
        }
        for (replicas, field) in [
            (json!(0), "spec.replicas"),
            (json!(-1), "spec.replicas"),
            (json!("3"), "spec.replicas"),
        ] {
            let ctx = context(cp(replicas)).cluster(cluster(&[]));
            match ControlPlane::reconcile_control_plane(ctx) {
                Err(ProviderError::InvalidSpec(m)) => assert!(m.contains(field), "{m}"),
                other => panic!("{other:?}"),
            }
        }
        let mut obj = cp(json!(1));
        obj["spec"]["machineTemplate"] = json!({});
        match ControlPlane::reconcile_control_plane(context(obj).cluster(cluster(&[]))) {
            Err(ProviderError::InvalidSpec(m)) => {
                assert!(
                    m.contains("spec.machineTemplate.spec.infrastructureRef"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn waits_for_its_cluster_and_renders_the_kubeconfig_once_it_has_everything() {
        assert!(matches!(
            ControlPlane::reconcile_control_plane(context(cp(json!(1)))),
            Err(ProviderError::Transient(_))
        ));
        let bare = context(cp(json!(1))).cluster(cluster(&[]));
        assert_eq!(
            ControlPlane::reconcile_control_plane(bare)
                .map(|s| s.kubeconfig)
                .ok(),
            Some(None)
        );
        let full = context(cp(json!(1)))
            .cluster(cluster(&[]))
            .secret("ca.crt", "CA")
            .secret("token", "T");
        let kc = ControlPlane::reconcile_control_plane(full)
            .ok()
            .and_then(|s| s.kubeconfig)
            .map(|k| serde_json::from_str::<Value>(&k).unwrap_or_default());
        let kc = kc.unwrap_or_default();
        assert_eq!(
            kc.pointer("/clusters/0/cluster/server"),
            Some(&json!("https://127.0.0.1:6443"))
        );
        assert_eq!(
            kc.pointer("/clusters/0/cluster/certificate-authority-data"),
            Some(&json!("Q0E="))
        );
        assert_eq!(kc.pointer("/users/0/user/token"), Some(&json!("T")));
    }

    #[test]
    fn metadata_declares_the_bootstrap_config_of_its_machines() {
        let m = ControlPlane::metadata();
        assert_eq!(m.kinds.len(), m.crds.len());
        match &m.kinds[0].role {
            KindRole::ControlPlane(cpm) => {
                assert_eq!(cpm.bootstrap_config.kind, "KubeadmConfig");
                assert_eq!(cpm.spec_field, "kubeadmConfigSpec");
            }
            other => panic!("{other:?}"),
        }
    }
}
