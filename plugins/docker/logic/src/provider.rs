//! DockerCluster, DockerMachine and the templates: DockerMachineTemplate, DockerClusterTemplate
//! (which ClusterClasses clone) and DockerMachinePoolTemplate (which they reference).

use crate::cloud_config::{Bootstrap, Progress, progress};
use crate::names::*;
use crate::runtime::{self, ContainerInfo, ContainerSpec, PortMapping};
use capw_sdk::*;

const GROUP: &str = "infrastructure.cluster.x-k8s.io";
#[cfg(not(feature = "v2"))]
const VERSION: &str = "0.1.0";
#[cfg(feature = "v2")]
const VERSION: &str = "0.2.0";

/// Labels only version 2 puts on new containers, so a hot reload is visible on the engine.
#[cfg(feature = "v2")]
const VERSION_LABELS: &[(&str, &str)] = &[("capw.dev/provider-version", VERSION)];
#[cfg(not(feature = "v2"))]
const VERSION_LABELS: &[(&str, &str)] = &[];

const INFRA_MACHINE_LABEL: &str = "capw.dev/docker-machine";
const FAILURE_DOMAIN_LABEL: &str = "capw.dev/failure-domain";
/// How often a provisioned machine or cluster is looked at again, to notice containers removed
/// or stopped behind capw's back.
const RESYNC_SECONDS: u32 = 15;

pub struct Docker;

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .chain(VERSION_LABELS)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Writes the control-plane containers' addresses into the load balancer's backends file, when
/// they changed. Either a DockerCluster or a control-plane DockerMachine may call it: each
/// writes the whole list, so the last writer is right.
fn sync_backends(cluster: &str, id: &str) -> Result<(), ProviderError> {
    let lb = load_balancer(cluster);
    let mut backends: Vec<String> =
        runtime::list(&[(CLUSTER_LABEL, id), (ROLE_LABEL, "control-plane")])?
            .into_iter()
            .filter(|c| c.running)
            .filter_map(|c| c.addresses.into_iter().next())
            .map(|ip| format!("{ip}:{API_PORT}"))
            .collect();
    backends.sort();
    // No load balancer yet (or any more): the DockerCluster writes the list when it makes one.
    let Some(out) = runtime::sh_if_exists(
        &lb,
        &format!(
            r#"[ "$(cat {LB_BACKENDS} 2>/dev/null)" = "$1" ] && exit 0
mkdir -p "$(dirname {LB_BACKENDS})"; printf '%s\n' "$1" > {LB_BACKENDS}.new && mv {LB_BACKENDS}.new {LB_BACKENDS}"#
        ),
        &[backends.join("\n")],
    )?
    else {
        return Ok(());
    };
    if out.exit_code != 0 {
        return Err(wait(
            format!(
                "writing the backends of load balancer {lb} failed: {}",
                out.stderr.trim()
            ),
            5,
        ));
    }
    Ok(())
}

fn host_port(info: &ContainerInfo, container_port: u16) -> u16 {
    info.ports
        .iter()
        .find(|p| p.container_port == container_port)
        .map(|p| p.host_port)
        .unwrap_or(0)
}

fn machine_pending(conditions: Vec<Condition>, requeue: u32) -> MachineStatus {
    let mut c = common(conditions, None);
    c.requeue_after_seconds = Some(requeue);
    MachineStatus {
        provisioned: false,
        provider_id: None,
        addresses: vec![],
        failure_domain: None,
        interruptible: false,
        common: c,
    }
}

fn not_ready(reason: &str, message: &str) -> Vec<Condition> {
    vec![condition("Ready", false, reason, message)]
}

impl Provider for Docker {
    fn metadata() -> Metadata {
        let cluster_col = (
            "Cluster",
            "string",
            ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
        );
        Metadata {
            name: "docker".into(),
            version: VERSION.into(),
            provider_type: ProviderType::Infrastructure,
            contract_version: "v1beta2".into(),
            kinds: vec![
                kind(GROUP, "DockerCluster", KindRole::InfrastructureCluster),
                kind(GROUP, "DockerMachine", KindRole::InfrastructureMachine),
                kind(
                    GROUP,
                    "DockerMachineTemplate",
                    KindRole::InfrastructureMachineTemplate("DockerMachine".into()),
                ),
                kind(
                    GROUP,
                    "DockerClusterTemplate",
                    KindRole::InfrastructureClusterTemplate("DockerCluster".into()),
                ),
                kind(
                    GROUP,
                    "DockerMachinePoolTemplate",
                    KindRole::InfrastructureMachinePoolTemplate("DockerMachinePool".into()),
                ),
            ],
            crds: vec![
                crd(
                    GROUP,
                    "DockerCluster",
                    "dockerclusters",
                    &[
                        cluster_col,
                        (
                            "Provisioned",
                            "boolean",
                            ".status.initialization.provisioned",
                        ),
                        ("Host", "string", ".spec.controlPlaneEndpoint.host"),
                        ("Port", "integer", ".spec.controlPlaneEndpoint.port"),
                    ],
                ),
                crd(
                    GROUP,
                    "DockerMachine",
                    "dockermachines",
                    &[
                        cluster_col,
                        (
                            "Machine",
                            "string",
                            ".metadata.ownerReferences[?(@.kind==\"Machine\")].name",
                        ),
                        (
                            "Provisioned",
                            "boolean",
                            ".status.initialization.provisioned",
                        ),
                        ("ProviderID", "string", ".spec.providerID"),
                    ],
                ),
                crd(
                    GROUP,
                    "DockerMachineTemplate",
                    "dockermachinetemplates",
                    &[],
                ),
                crd(
                    GROUP,
                    "DockerClusterTemplate",
                    "dockerclustertemplates",
                    &[],
                ),
                crd(
                    GROUP,
                    "DockerMachinePoolTemplate",
                    "dockermachinepooltemplates",
                    &[],
                ),
            ],
        }
    }

    fn reconcile_cluster(ctx: Context) -> Result<ClusterStatus, ProviderError> {
        let obj = ctx.view()?;
        let cluster = ctx.owning_cluster(&obj)?;
        let (name, id) = (cluster.name(), cluster_id(obj.namespace(), cluster.name()));
        runtime::ensure_network(&network(name))?;
        // Once reported, the endpoint must not move: a recreated load balancer asks for the
        // same port. The Cluster keeps the endpoint it first copied, so its port counts too,
        // even before this object's own spec carries it.
        let endpoint_port = |v: &View| match v.str("/spec/controlPlaneEndpoint/host") {
            "127.0.0.1" => v
                .get("/spec/controlPlaneEndpoint/port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(0),
            _ => 0,
        };
        let port_before = match endpoint_port(&obj) {
            0 => endpoint_port(&cluster),
            p => p,
        };
        let lb = load_balancer(name);
        let spec = ContainerSpec {
            name: lb.clone(),
            image: DEFAULT_IMAGE.into(),
            command: [
                "capw",
                "lb",
                "--listen",
                "0.0.0.0:6443",
                "--backends-file",
                LB_BACKENDS,
            ]
            .map(String::from)
            .to_vec(),
            env: vec![],
            labels: labels(&[(CLUSTER_LABEL, &id), (ROLE_LABEL, "loadbalancer")]),
            network: Some(network(name)),
            ports: vec![PortMapping {
                container_port: API_PORT,
                host_port: port_before,
            }],
            privileged: false,
        };
        let (info, _) = runtime::ensure_running(&spec)?;
        let port = host_port(&info, API_PORT);
        if port == 0 || (port_before != 0 && port != port_before) {
            // A restarted engine may publish a stopped container on another port.
            runtime::remove(&lb)?;
            return Err(wait(
                format!(
                    "load balancer {lb} came back on port {port}, not {port_before}; recreating it"
                ),
                1,
            ));
        }
        sync_backends(name, &id)?;
        let mut c = common(
            vec![
                condition("Ready", true, "Provisioned", ""),
                condition(
                    "LoadBalancerAvailable",
                    true,
                    "Available",
                    &format!("{lb} on 127.0.0.1:{port}"),
                ),
            ],
            None,
        );
        c.requeue_after_seconds = Some(RESYNC_SECONDS);
        Ok(ClusterStatus {
            provisioned: true,
            control_plane_endpoint: Some(ApiEndpoint {
                host: "127.0.0.1".into(),
                port,
            }),
            failure_domains: obj.failure_domains(),
            common: c,
        })
    }

    fn delete_cluster(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        let obj = ctx.view()?;
        let name = ctx.cluster_name(&obj)?;
        let id = cluster_id(obj.namespace(), &name);
        // Machines went first, in contract order; anything still labelled with the cluster
        // would be an orphan, so it goes too.
        let mut gone = true;
        for c in runtime::list(&[(CLUSTER_LABEL, &id)])? {
            gone &= runtime::remove(&c.name)?;
        }
        if !gone || !runtime::remove_network(&network(&name))? {
            return Err(wait(
                format!("waiting for the containers of cluster {name} to be removed"),
                2,
            ));
        }
        Ok(deleted())
    }

    fn reconcile_machine(ctx: Context) -> Result<MachineStatus, ProviderError> {
        let obj = ctx.view()?;
        let cluster = ctx.owning_cluster(&obj)?;
        let machine = ctx.machine_view()?.ok_or_else(|| {
            wait(
                format!(
                    "waiting for the Machine controller to set an owner reference on {}",
                    obj.name()
                ),
                5,
            )
        })?;
        let (name, id) = (cluster.name(), cluster_id(obj.namespace(), cluster.name()));
        if cluster
            .get("/status/initialization/infrastructureProvisioned")
            .and_then(Value::as_bool)
            != Some(true)
        {
            return Ok(machine_pending(
                not_ready(
                    "WaitingForClusterInfrastructure",
                    "the DockerCluster is not provisioned yet",
                ),
                30,
            ));
        }
        let endpoint_port = cluster
            .get("/spec/controlPlaneEndpoint/port")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let Some(data) = ctx.bootstrap_data.as_deref() else {
            // The Machine changing (its dataSecretName) calls again; this is only a fallback.
            return Ok(machine_pending(
                not_ready(
                    "WaitingForBootstrapData",
                    "the bootstrap provider has not made the data yet",
                ),
                30,
            ));
        };
        let bootstrap = Bootstrap::parse(data)?;
        let control_plane = machine
            .get("/metadata/labels/cluster.x-k8s.io~1control-plane")
            .is_some();
        let role = if control_plane {
            "control-plane"
        } else {
            "worker"
        };
        // A machine keeps the container its provider ID names: a hot reload that changed the
        // naming rule must find it again, not make a second one.
        let container = match obj.str("/spec/providerID").strip_prefix("docker:////") {
            Some(made) if !made.is_empty() => made.to_string(),
            _ => machine_container(name, machine.name()),
        };
        let (image, version) =
            node_image(obj.str("/spec/customImage"), machine.str("/spec/version"));
        let failure_domain = machine.str("/spec/failureDomain");
        let spec = ContainerSpec {
            name: container.clone(),
            image: image.into(),
            command: vec![],
            // The node presents the Machine's version, as a `kindest/node:<version>` image
            // carries it: kubeadm on the node reads it.
            env: match version.as_str() {
                "" => vec![],
                v => vec![("CAPW_KUBERNETES_VERSION".to_string(), v.to_string())],
            },
            labels: labels(&[
                (CLUSTER_LABEL, &id),
                (ROLE_LABEL, role),
                (MACHINE_LABEL, machine.name()),
                (INFRA_MACHINE_LABEL, obj.name()),
                (FAILURE_DOMAIN_LABEL, failure_domain),
            ]),
            network: Some(network(name)),
            ports: vec![],
            privileged: false,
        };
        let (info, created) = runtime::ensure_running(&spec)?;
        let recreated = created
            && obj
                .get("/status/initialization/provisioned")
                .and_then(Value::as_bool)
                == Some(true);
        if control_plane {
            sync_backends(name, &id)?;
        }
        // The endpoint is 127.0.0.1:PORT on the host; a forwarder makes it the same inside.
        // It names the load balancer, which the engine's DNS resolves on the cluster network
        // even after a restarted engine gave it another address.
        let prelude = format!(
            "nohup capw lb --listen 127.0.0.1:{endpoint_port} --backend {}:{API_PORT} --backends-file /run/capw/none >/var/log/capw-endpoint.log 2>&1 &",
            load_balancer(name)
        );
        let provider_id = provider_id(&container);
        let (script, args) = bootstrap.script(&provider_id, &prelude);
        let out = runtime::sh(&container, &script, &args)?;
        let Some(step) = (out.exit_code == 0)
            .then(|| progress(&out.stdout))
            .flatten()
        else {
            return Err(wait(
                format!(
                    "running the bootstrap data in {container} failed (exit {}): {}",
                    out.exit_code,
                    out.stderr.trim()
                ),
                5,
            ));
        };
        let container_ok = if recreated {
            condition(
                "ContainerProvisioned",
                false,
                "ContainerRecreated",
                &format!("container {container} was gone; it was created again"),
            )
        } else {
            condition("ContainerProvisioned", true, "Provisioned", "")
        };
        match step {
            Progress::Done => {}
            Progress::Failed(log) => {
                let msg = format!(
                    "a bootstrap command failed in {container}; the end of /var/log/capw-bootstrap.log: {log}"
                );
                return Ok(machine_pending(
                    vec![
                        condition("Ready", false, "BootstrapFailed", &msg),
                        container_ok,
                        condition("BootstrapCompleted", false, "BootstrapFailed", &msg),
                    ],
                    60,
                ));
            }
            Progress::Started | Progress::Running => {
                let msg = format!("container {container} is running its bootstrap data");
                let reason = if recreated {
                    "ContainerRecreated"
                } else {
                    "Bootstrapping"
                };
                return Ok(machine_pending(
                    vec![
                        condition("Ready", false, reason, &msg),
                        container_ok,
                        condition("BootstrapCompleted", false, "Bootstrapping", &msg),
                    ],
                    1,
                ));
            }
        }
        let mut addresses: Vec<Address> = info
            .addresses
            .into_iter()
            .map(|a| Address {
                type_: "InternalIP".into(),
                address: a,
            })
            .collect();
        addresses.push(Address {
            type_: "Hostname".into(),
            address: container.clone(),
        });
        // A machine whose container had to be made again says so for one round, even when its
        // bootstrap finished at once, so the Machine shows what happened.
        let ready = if recreated {
            let msg =
                format!("container {container} was gone; it was created again and bootstrapped");
            condition("Ready", false, "ContainerRecreated", &msg)
        } else {
            condition("Ready", true, "Provisioned", "")
        };
        let mut c = common(
            vec![
                ready,
                container_ok,
                condition("BootstrapCompleted", true, "Completed", ""),
            ],
            None,
        );
        c.requeue_after_seconds = Some(if recreated { 2 } else { RESYNC_SECONDS });
        Ok(MachineStatus {
            provisioned: true,
            provider_id: Some(provider_id),
            addresses,
            failure_domain: (!failure_domain.is_empty()).then(|| failure_domain.to_string()),
            interruptible: false,
            common: c,
        })
    }

    fn delete_machine(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        let obj = ctx.view()?;
        let name = ctx.cluster_name(&obj)?;
        let id = cluster_id(obj.namespace(), &name);
        // Found by label, not by name: the Machine may already be gone.
        let mine = runtime::list(&[(CLUSTER_LABEL, &id), (INFRA_MACHINE_LABEL, obj.name())])?;
        let control_plane = mine.iter().any(|c| {
            c.labels
                .iter()
                .any(|(k, v)| k == ROLE_LABEL && v == "control-plane")
        });
        let mut gone = true;
        for c in &mine {
            gone &= runtime::remove(&c.name)?;
        }
        if control_plane {
            sync_backends(&name, &id)?;
        }
        Ok(DeleteStatus {
            done: gone,
            common: common(vec![], None),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_declares_roles_and_one_crd_per_kind() {
        let m = Docker::metadata();
        assert_eq!(m.kinds.len(), m.crds.len());
        let roles: Vec<(&str, &KindRole)> =
            m.kinds.iter().map(|k| (k.kind.as_str(), &k.role)).collect();
        assert!(matches!(
            roles[0],
            ("DockerCluster", KindRole::InfrastructureCluster)
        ));
        assert!(matches!(
            roles[1],
            ("DockerMachine", KindRole::InfrastructureMachine)
        ));
        assert!(
            matches!(roles[2], ("DockerMachineTemplate", KindRole::InfrastructureMachineTemplate(of)) if of == "DockerMachine")
        );
        assert!(
            matches!(roles[3], ("DockerClusterTemplate", KindRole::InfrastructureClusterTemplate(of)) if of == "DockerCluster")
        );
        assert!(
            matches!(roles[4], ("DockerMachinePoolTemplate", KindRole::InfrastructureMachinePoolTemplate(of)) if of == "DockerMachinePool")
        );
    }

    #[test]
    fn without_an_engine_a_cluster_waits_and_says_why() {
        // A native build has no container runtime installed: the call must ask again, not fail.
        let ctx = capw_sdk::testing::context(json!({"metadata": {"name": "c", "namespace": "ns",
            "labels": {"cluster.x-k8s.io/cluster-name": "c"}}, "spec": {}}));
        let ctx =
            capw_sdk::testing::ContextBuilder::cluster(ctx, json!({"metadata": {"name": "c"}}));
        match Docker::reconcile_cluster(ctx) {
            Err(ProviderError::Transient(r)) => {
                assert!(r.message.contains("Docker engine"), "{}", r.message)
            }
            other => panic!("{other:?}"),
        }
    }
}
