// The provider's logic, kept apart from the export so the host's benchmark can build the same
// text natively (`include!`) to compare it with the component.

use capw_sdk::*;

const GROUP: &str = "infrastructure.cluster.x-k8s.io";
#[cfg(not(feature = "trap-on-demand"))]
const VERSION: &str = "0.1.0";
/// A test build: it traps on any InMemoryMachine whose `spec.simulateTrap` is true, so tests can
/// watch a trapping plugin version being contained.
#[cfg(feature = "trap-on-demand")]
const VERSION: &str = "0.1.1-trap";

pub struct InMemory;

/// "namespace/cluster" of the owning Cluster, or a wait until core sets the owner.
fn cluster_key(ctx: &Context, obj: &View) -> Result<String, ProviderError> {
    let cluster = ctx.cluster_view()?.ok_or_else(|| {
        wait(
            format!(
                "waiting for the Cluster controller to set an owner reference on {}",
                obj.name()
            ),
            5,
        )
    })?;
    Ok(format!("{}/{}", obj.namespace(), cluster.name()))
}

impl Provider for InMemory {
    fn metadata() -> Metadata {
        Metadata {
            name: "inmemory".into(),
            version: VERSION.into(),
            provider_type: ProviderType::Infrastructure,
            contract_version: "v1beta2".into(),
            kinds: vec![
                kind(GROUP, "InMemoryCluster"),
                kind(GROUP, "InMemoryMachine"),
                kind(GROUP, "InMemoryMachineTemplate"),
            ],
            crds: vec![
                crd(
                    GROUP,
                    "InMemoryCluster",
                    "inmemoryclusters",
                    &[
                        (
                            "Cluster",
                            "string",
                            ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
                        ),
                        (
                            "Provisioned",
                            "boolean",
                            ".status.initialization.provisioned",
                        ),
                        ("Endpoint", "string", ".spec.controlPlaneEndpoint.host"),
                    ],
                ),
                crd(
                    GROUP,
                    "InMemoryMachine",
                    "inmemorymachines",
                    &[
                        (
                            "Cluster",
                            "string",
                            ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",
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
                    "InMemoryMachineTemplate",
                    "inmemorymachinetemplates",
                    &[],
                ),
            ],
        }
    }

    fn reconcile_cluster(ctx: Context) -> Result<ClusterStatus, ProviderError> {
        let obj = ctx.view()?;
        let key = cluster_key(&ctx, &obj)?;
        let api = sim_cloud::ensure_api_server(&key)
            .map_err(|e| wait(format!("the simulated cloud failed: {e}"), 5))?;
        Ok(ClusterStatus {
            provisioned: true,
            control_plane_endpoint: Some(ApiEndpoint {
                host: api.host,
                port: api.port,
            }),
            failure_domains: obj.failure_domains(),
            common: common(vec![condition("Ready", true, "Provisioned", "")], None),
        })
    }

    fn delete_cluster(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        let obj = ctx.view()?;
        let key = match ctx.cluster_view()? {
            Some(c) => format!("{}/{}", obj.namespace(), c.name()),
            None => format!(
                "{}/{}",
                obj.namespace(),
                obj.str("/metadata/labels/cluster.x-k8s.io~1cluster-name")
            ),
        };
        let done = sim_cloud::delete_api_server(&key)
            .map_err(|e| wait(format!("the simulated cloud failed: {e}"), 5))?;
        Ok(DeleteStatus {
            done,
            common: common(vec![], None),
        })
    }

    // The trap-on-demand build exists to trap: the host's trap handling is tested with it.
    #[allow(clippy::panic)]
    fn reconcile_machine(ctx: Context) -> Result<MachineStatus, ProviderError> {
        let obj = ctx.view()?;
        if cfg!(feature = "trap-on-demand")
            && obj.get("/spec/simulateTrap") == Some(&Value::Bool(true))
        {
            panic!(
                "inmemory {VERSION}: spec.simulateTrap is set on {}",
                obj.name()
            );
        }
        let key = cluster_key(&ctx, &obj)?;
        let machine = ctx.machine_view()?.ok_or_else(|| {
            wait(
                format!(
                    "waiting for the Machine controller to set an owner reference on {}",
                    obj.name()
                ),
                5,
            )
        })?;
        let Some(data) = ctx.bootstrap_data.as_deref() else {
            let mut st = pending(vec![condition(
                "Ready",
                false,
                "WaitingForBootstrapData",
                "the bootstrap provider has not made the data yet",
            )]);
            // The Machine changing (its dataSecretName) calls again; this is only a fallback.
            st.common.requeue_after_seconds = Some(30);
            return Ok(st);
        };
        let vm =
            sim_cloud::ensure_vm(&key, machine.name(), data).map_err(ProviderError::Terminal)?;
        if !vm.running {
            let mut st = pending(vec![condition(
                "Ready",
                false,
                "VMBooting",
                &format!("VM {} is running its bootstrap data", vm.name),
            )]);
            st.common.requeue_after_seconds = Some(1);
            return Ok(st);
        }
        Ok(MachineStatus {
            provisioned: true,
            provider_id: Some(vm.provider_id),
            addresses: vm
                .addresses
                .into_iter()
                .map(|a| Address {
                    type_: "InternalIP".into(),
                    address: a,
                })
                .chain(std::iter::once(Address {
                    type_: "Hostname".into(),
                    address: machine.name().into(),
                }))
                .collect(),
            failure_domain: machine
                .get("/spec/failureDomain")
                .and_then(Value::as_str)
                .map(str::to_string),
            interruptible: false,
            common: common(vec![condition("Ready", true, "Provisioned", "")], None),
        })
    }

    fn delete_machine(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        let obj = ctx.view()?;
        let cluster = obj
            .str("/metadata/labels/cluster.x-k8s.io~1cluster-name")
            .to_string();
        let name = ctx
            .machine_view()?
            .map(|m| m.name().to_string())
            .unwrap_or_else(|| obj.name().to_string());
        let done = sim_cloud::delete_vm(&format!("{}/{cluster}", obj.namespace()), &name)
            .map_err(|e| wait(format!("the simulated cloud failed: {e}"), 5))?;
        Ok(DeleteStatus {
            done,
            common: common(vec![], None),
        })
    }
}

fn pending(conditions: Vec<Condition>) -> MachineStatus {
    MachineStatus {
        provisioned: false,
        provider_id: None,
        addresses: vec![],
        failure_domain: None,
        interruptible: false,
        common: common(conditions, None),
    }
}
