//! The provider: metadata and the contract calls.

use crate::remediation::{self, Decision, Last, Patient, Policy};
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

/// Upstream's `<cluster>-kubeconfig`: user `<cluster>-admin` with the host's admin client
/// certificate (`kubernetes-admin`, O=`system:masters`, signed by the cluster CA).
fn kubeconfig(cluster: &str, server: &str, ca: &str, cert: &str, key: &str) -> String {
    let user = format!("{cluster}-admin");
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": base64(ca.as_bytes())}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": base64(cert.as_bytes()),
            "client-key-data": base64(key.as_bytes()),
        }}],
        "contexts": [{"name": format!("{user}@{cluster}"), "context": {"cluster": cluster, "user": user}}],
        "current-context": format!("{user}@{cluster}"),
    })
    .to_string()
}

/// The status of a Machine's condition of type `t`, when it has one.
fn condition_status<'a>(m: &'a Value, t: &str) -> Option<&'a str> {
    m.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == t))
        .and_then(|c| c["status"].as_str())
}

fn condition_true(m: &Value, t: &str) -> bool {
    condition_status(m, t) == Some("True")
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

/// Upstream's default `spec.machineNaming.template`.
const DEFAULT_NAMING: &str = "{{ .kubeadmControlPlane.name }}-{{ .random }}";
/// The characters of `{{ .random }}`, as upstream's (no vowels, no look-alikes).
const RANDOM_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// SplitMix64: spreads a seed (the clock and the control plane's uid) over five characters.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A new Machine's name from `spec.machineNaming.template` (`.kubeadmControlPlane.name`,
/// `.cluster.name` and `.random`, five characters), as upstream renders it: never one a
/// Machine of this control plane has, so a replacement never takes the name of the Machine it
/// replaces.
fn machine_name(
    obj: &View,
    cluster: &str,
    taken: &[&str],
    seed: u64,
) -> Result<String, ProviderError> {
    let template = obj
        .get("/spec/machineNaming/template")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_NAMING);
    let bad = |why: &str| {
        ProviderError::InvalidSpec(format!(
            "{}: spec.machineNaming.template {template:?}: {why}",
            obj.name()
        ))
    };
    if !template.contains(".random") {
        return Err(bad(
            "must contain {{ .random }}, so that names do not repeat",
        ));
    }
    let mut state = seed;
    for _ in 0..16 {
        state = mix(state);
        let random: String = (0..5)
            .map(|i| {
                let idx = (state >> (i * 12)) as usize % RANDOM_ALPHABET.len();
                char::from(RANDOM_ALPHABET[idx])
            })
            .collect();
        let mut out = String::new();
        let mut rest = template;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let end = rest[start..]
                .find("}}")
                .ok_or_else(|| bad("a {{ is not closed"))?;
            match rest[start + 2..start + end].trim() {
                ".kubeadmControlPlane.name" => out.push_str(obj.name()),
                ".cluster.name" => out.push_str(cluster),
                ".random" => out.push_str(&random),
                other => {
                    return Err(bad(&format!(
                        "{{{{ {other} }}}} is not one of .kubeadmControlPlane.name, .cluster.name, .random"
                    )));
                }
            }
            rest = &rest[start + end + 2..];
        }
        out.push_str(rest);
        let valid = !out.is_empty()
            && out.len() <= 63
            && out
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && out.starts_with(|c: char| c.is_ascii_alphanumeric())
            && out.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !valid {
            return Err(bad(&format!(
                "renders {out:?}, which is not a Machine name (lowercase letters, digits, '-' and '.', at most 63 characters)"
            )));
        }
        if !taken.contains(&out.as_str()) {
            return Ok(out);
        }
    }
    Err(bad("every name it rendered is taken"))
}

/// RFC 3339 as the API server writes it, in seconds since the epoch.
fn seconds(rfc3339: &str) -> Option<i64> {
    rfc3339
        .parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_second())
}

fn patient(m: &Value) -> Patient {
    Patient {
        name: m
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        created: m
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(seconds)
            .unwrap_or_default(),
        has_node: m.pointer("/status/nodeRef/name").is_some(),
        deleting: m.pointer("/metadata/deletionTimestamp").is_some(),
        unhealthy: condition_status(m, "HealthCheckSucceeded") == Some("False")
            && condition_status(m, "OwnerRemediated") == Some("False"),
        annotated: m
            .pointer("/metadata/annotations/cluster.x-k8s.io~1remediate-machine")
            .is_some(),
    }
}

/// `spec.remediation`, with upstream's defaults for what is unset.
fn policy(obj: &View) -> Policy {
    let int = |f: &str| {
        obj.get(&format!("/spec/remediation/{f}"))
            .and_then(Value::as_i64)
    };
    let d = Policy::default();
    Policy {
        max_retry: int("maxRetry").and_then(|n| u32::try_from(n).ok()),
        retry_period_seconds: int("retryPeriodSeconds").unwrap_or(d.retry_period_seconds),
        min_healthy_period_seconds: int("minHealthyPeriodSeconds")
            .unwrap_or(d.min_healthy_period_seconds),
    }
}

/// `status.lastRemediation`.
fn last_remediation(obj: &View) -> Option<Last> {
    let l = obj.get("/status/lastRemediation")?;
    Some(Last {
        machine: l.get("machine")?.as_str()?.to_string(),
        time: seconds(l.get("time")?.as_str()?)?,
        retry_count: l
            .get("retryCount")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
    })
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
        let cluster = ctx.owning_cluster(&obj)?;
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

        let now = jiff::Timestamp::now();
        let rollout_after = obj
            .get("/spec/rollout/after")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
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
            rollout_after: rollout_after
                .filter(|after| *after <= now)
                .map(|after| after.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
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
        // Remediation first, then rollout and scaling; one Machine action per call.
        let patients: Vec<Patient> = machines.iter().map(patient).collect();
        let last = last_remediation(&obj);
        let decision = remediation::decide(
            &patients,
            desired as usize,
            initialized,
            last.as_ref(),
            &policy(&obj),
            now.as_second(),
        );
        let mut status_patch = None;
        let mut retry_after = None;
        let remediating = match &decision {
            Decision::Nothing => condition("Remediating", false, "NotRemediating", ""),
            Decision::Remediate {
                machine,
                retry_count,
            } => {
                to_delete.push(machine.clone());
                status_patch = Some(json!({"lastRemediation": {
                    "machine": machine,
                    "time": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                    "retryCount": retry_count,
                }}));
                condition(
                    "Remediating",
                    true,
                    "Remediating",
                    &format!(
                        "Machine {machine} is being deleted to be replaced (retry {retry_count})"
                    ),
                )
            }
            Decision::Deferred {
                machine,
                message,
                after,
            } => {
                retry_after = u32::try_from(*after).ok();
                condition(
                    "Remediating",
                    true,
                    "RemediationDeferred",
                    &format!("Machine {machine}: {message}"),
                )
            }
            Decision::Refused { machine, message } => condition(
                "Remediating",
                true,
                "CannotBeRemediated",
                &format!("Machine {machine}: {message}"),
            ),
        };
        // Upstream's TopologyVersionMismatch preflight: in a managed topology, the version the
        // Cluster asks for reaches this object in the same write as its rotated machine
        // template; scaling on the old version in between would roll twice.
        let topology_version = cluster.str("/spec/topology/version");
        let topology_pending = !topology_version.is_empty()
            && desired_state.version.as_deref() != Some(topology_version);
        let step = if to_delete.is_empty() && !topology_pending {
            next_step(&desired_state, &members, &domains)
        } else {
            Step::WaitForHealthy
        };
        match step {
            Step::Create(failure_domain) => {
                let taken: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
                let seed = now.as_nanosecond() as u64 ^ fnv(obj.str("/metadata/uid"));
                let name = machine_name(&obj, cluster.name(), &taken, seed)?;
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
        let kubeconfig = match (
            ctx.secret("ca.crt"),
            ctx.secret("admin.crt"),
            ctx.secret("admin.key"),
        ) {
            (Some(ca), Some(cert), Some(key)) if !host.is_empty() && port != 0 => Some(kubeconfig(
                cluster.name(),
                &format!("https://{host}:{port}"),
                ca,
                cert,
                key,
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
        conditions.push(remediating);
        // status.selector and status.version are contract fields: the host sets them.
        let mut c = common(conditions, status_patch);
        // Changes of the control plane's Machines call again; this is only a fallback.
        if count != desired || with_node < count || stale > 0 {
            c.requeue_after_seconds = Some(15);
        }
        // Nothing else calls when a future rollout.after passes.
        let until_rollout = rollout_after
            .filter(|after| *after > now)
            .and_then(|after| u32::try_from(after.as_second() - now.as_second()).ok());
        for after in [retry_after, until_rollout].into_iter().flatten() {
            c.requeue_after_seconds = Some(
                c.requeue_after_seconds
                    .map_or(after, |r| r.min(after))
                    .max(1),
            );
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

    #[test]
    fn a_topology_version_not_yet_propagated_holds_scaling() {
        let mut c = cluster(&[]);
        c["spec"]["topology"] = json!({"version": "v1.34.0"});
        let st = ControlPlane::reconcile_control_plane(context(cp(json!(3))).cluster(c.clone()))
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(
            st.machines_to_create.is_empty(),
            "{:?}",
            st.machines_to_create
        );
        c["spec"]["topology"] = json!({"version": "v1.33.0"});
        let st = ControlPlane::reconcile_control_plane(context(cp(json!(3))).cluster(c))
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(st.machines_to_create.len(), 1);
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
            // Names end in five random characters: compare the failure domains, and the shape.
            let created: Vec<Option<&str>> = st
                .machines_to_create
                .iter()
                .map(|r| r.failure_domain.as_deref())
                .collect();
            let want: Vec<Option<&str>> = c.create.iter().map(|(_, fd)| *fd).collect();
            assert_eq!(created, want, "{}: machines to create", c.name);
            for r in &st.machines_to_create {
                let suffix = r.name.strip_prefix("cp-").unwrap_or_default();
                assert!(
                    suffix.len() == 5 && suffix.bytes().all(|b| RANDOM_ALPHABET.contains(&b)),
                    "{}: {}",
                    c.name,
                    r.name
                );
            }
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
            .secret("admin.crt", "CERT")
            .secret("admin.key", "KEY")
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
        // A client certificate, as upstream's; never the node agents' token.
        assert_eq!(
            kc.pointer("/users/0/user"),
            Some(&json!({"client-certificate-data": "Q0VSVA==", "client-key-data": "S0VZ"}))
        );
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

    #[test]
    fn machine_names_follow_the_naming_template_and_never_repeat() {
        let with = |template: Value| {
            let mut o = cp(json!(3));
            if !template.is_null() {
                o["spec"]["machineNaming"] = json!({"template": template});
            }
            View::parse(&o.to_string()).unwrap_or_else(|e| panic!("{e:?}"))
        };
        let name = |obj: &View, taken: &[&str], seed| machine_name(obj, "demo", taken, seed);
        let default = with(Value::Null);
        let a = name(&default, &[], 1).unwrap_or_default();
        assert!(a.starts_with("cp-") && a.len() == 8, "{a}");
        // A taken name is never handed out again, whatever the seed gives.
        let b = name(&default, &[a.as_str()], 1).unwrap_or_default();
        assert!(b != a && b.starts_with("cp-"), "{a} {b}");
        let custom = with(json!("{{ .cluster.name }}-cp-{{.random}}"));
        let c = name(&custom, &[], 7).unwrap_or_default();
        assert!(c.starts_with("demo-cp-") && c.len() == 13, "{c}");
        for (template, says) in [
            (
                json!("{{ .kubeadmControlPlane.name }}"),
                "must contain {{ .random }}",
            ),
            (json!("{{ .machine.name }}-{{ .random }}"), ".machine.name"),
            (json!("UPPER-{{ .random }}"), "not a Machine name"),
        ] {
            match name(&with(template.clone()), &[], 1) {
                Err(ProviderError::InvalidSpec(m)) => {
                    assert!(
                        m.contains("spec.machineNaming.template") && m.contains(says),
                        "{m}"
                    )
                }
                other => panic!("{template}: {other:?}"),
            }
        }
    }
}
