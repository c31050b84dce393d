//! The provider: metadata and the contract calls.

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
    let cluster = ctx.owning_cluster(obj)?;
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
                kind(GROUP, "InMemoryCluster", KindRole::InfrastructureCluster),
                kind(GROUP, "InMemoryMachine", KindRole::InfrastructureMachine),
                kind(
                    GROUP,
                    "InMemoryMachineTemplate",
                    KindRole::InfrastructureMachineTemplate("InMemoryMachine".into()),
                ),
                kind(
                    GROUP,
                    "InMemoryClusterTemplate",
                    KindRole::InfrastructureClusterTemplate("InMemoryCluster".into()),
                ),
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
                crd(
                    GROUP,
                    "InMemoryClusterTemplate",
                    "inmemoryclustertemplates",
                    &[],
                ),
            ],
        }
    }

    fn reconcile_cluster(ctx: Context) -> Result<ClusterStatus, ProviderError> {
        let obj = ctx.view()?;
        let key = cluster_key(&ctx, &obj)?;
        // An endpoint already handed out stays: the cloud may be a new host's (see the WIT).
        let recorded = obj
            .get("/spec/controlPlaneEndpoint/port")
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0);
        let api = match recorded {
            Some(port) => sim_cloud::ensure_api_server_at(&key, port),
            None => sim_cloud::ensure_api_server(&key),
        }
        .map_err(cloud_failed)?;
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
        let done = sim_cloud::delete_api_server(&key).map_err(cloud_failed)?;
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
        // The image presents the Machine's version, as a `kindest/node:<version>` image does.
        let image = sim_cloud::VmImage {
            kubernetes_version: machine.str("/spec/version").to_string(),
        };
        let vm = sim_cloud::ensure_vm_from_image(&key, machine.name(), &image, data)
            .map_err(cloud_failed)?;
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
            .map_err(cloud_failed)?;
        Ok(DeleteStatus {
            done,
            common: common(vec![], None),
        })
    }
}

/// A request the cloud refuses is terminal until the spec changes; a cloud that cannot serve
/// now is asked again.
fn cloud_failed(e: sim_cloud::SimCloudError) -> ProviderError {
    match e {
        sim_cloud::SimCloudError::Invalid(m) => ProviderError::Terminal(m),
        sim_cloud::SimCloudError::Unavailable(m) => {
            wait(format!("the simulated cloud failed: {m}"), 5)
        }
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

// The tests answer the host calls natively (`capw_sdk::host::install`), which a component cannot.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use capw_sdk::host::{Native, install};
    use capw_sdk::sim_cloud::{ApiServer, SimCloudError, Vm};
    use capw_sdk::testing::{ContextBuilder, condition_of, context};
    use std::sync::Arc;

    /// A cloud whose VMs are running unless their name says "booting", and which refuses the
    /// cluster "ns/refused" as invalid and "ns/full" as unavailable.
    struct FakeCloud;

    impl FakeCloud {
        fn check(cluster: &str) -> Result<(), SimCloudError> {
            match cluster {
                "ns/refused" => Err(SimCloudError::Invalid("refused".into())),
                "ns/full" => Err(SimCloudError::Unavailable("no free port".into())),
                _ => Ok(()),
            }
        }
    }

    impl Native for FakeCloud {
        fn ensure_vm(&self, cluster: &str, name: &str, _data: &str) -> Result<Vm, SimCloudError> {
            Self::check(cluster)?;
            Ok(Vm {
                name: name.into(),
                provider_id: format!("inmemory://{cluster}/{name}"),
                running: !name.contains("booting"),
                addresses: vec!["10.0.0.7".into()],
            })
        }
        fn ensure_api_server(&self, cluster: &str) -> Result<ApiServer, SimCloudError> {
            Self::check(cluster)?;
            Ok(ApiServer {
                host: "127.0.0.1".into(),
                port: 7001,
            })
        }
        fn ensure_api_server_at(
            &self,
            cluster: &str,
            port: u16,
        ) -> Result<ApiServer, SimCloudError> {
            Self::check(cluster)?;
            Ok(ApiServer {
                host: "127.0.0.1".into(),
                port,
            })
        }
        fn delete_api_server(&self, cluster: &str) -> Result<bool, SimCloudError> {
            Self::check(cluster).map(|_| true)
        }
    }

    fn obj(name: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns"}, "spec": {}})
    }

    fn owned(name: &str, cluster: &str) -> Context {
        context(obj(name))
            .cluster(json!({"metadata": {"name": cluster}}))
            .machine(json!({"metadata": {"name": name}, "spec": {"failureDomain": "fd-1"}}))
    }

    #[test]
    fn machine_table() {
        install(Arc::new(FakeCloud));
        // (case, context, provisioned, Ready reason)
        let cases = [
            (
                "no bootstrap data yet",
                owned("m", "c"),
                false,
                "WaitingForBootstrapData",
            ),
            (
                "booting",
                owned("m-booting", "c").bootstrap_data("#cloud-config"),
                false,
                "VMBooting",
            ),
            (
                "running",
                owned("m", "c").bootstrap_data("#cloud-config"),
                true,
                "Provisioned",
            ),
        ];
        for (name, ctx, provisioned, reason) in cases {
            let st = InMemory::reconcile_machine(ctx).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(st.provisioned, provisioned, "{name}");
            assert_eq!(
                condition_of(&st.common.conditions, "Ready").map(|c| c.1),
                Some(reason.into()),
                "{name}"
            );
            assert_eq!(
                st.provider_id.is_some(),
                provisioned,
                "{name}: a provider ID exactly when provisioned"
            );
        }
        let st = InMemory::reconcile_machine(owned("m", "c").bootstrap_data("#cloud-config"))
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(st.provider_id.as_deref(), Some("inmemory://ns/c/m"));
        assert_eq!(st.failure_domain.as_deref(), Some("fd-1"));
        let addrs: Vec<(&str, &str)> = st
            .addresses
            .iter()
            .map(|a| (a.type_.as_str(), a.address.as_str()))
            .collect();
        assert_eq!(addrs, [("InternalIP", "10.0.0.7"), ("Hostname", "m")]);
    }

    #[test]
    fn cloud_errors_are_terminal_when_invalid_and_retried_when_unavailable() {
        install(Arc::new(FakeCloud));
        let data = "#cloud-config";
        assert!(matches!(
            InMemory::reconcile_machine(owned("m", "refused").bootstrap_data(data)),
            Err(ProviderError::Terminal(m)) if m == "refused"
        ));
        assert!(matches!(
            InMemory::reconcile_machine(owned("m", "full").bootstrap_data(data)),
            Err(ProviderError::Transient(_))
        ));
        // Without an owner there is nothing to ask the cloud yet.
        assert!(matches!(
            InMemory::reconcile_machine(context(obj("m"))),
            Err(ProviderError::Transient(_))
        ));
    }

    #[test]
    fn clusters_get_their_endpoint_and_failure_domains() {
        install(Arc::new(FakeCloud));
        let mut o = obj("c");
        o["spec"]["failureDomains"] = json!([{"name": "a"}, {"name": "b", "controlPlane": false}]);
        let ctx = context(o).cluster(json!({"metadata": {"name": "c"}}));
        let st = InMemory::reconcile_cluster(ctx).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(st.provisioned);
        assert_eq!(
            st.control_plane_endpoint.map(|e| (e.host, e.port)),
            Some(("127.0.0.1".into(), 7001))
        );
        let fds: Vec<(&str, bool)> = st
            .failure_domains
            .iter()
            .map(|f| (f.name.as_str(), f.control_plane))
            .collect();
        assert_eq!(fds, [("a", true), ("b", false)]);
        let done =
            InMemory::delete_cluster(context(obj("c")).cluster(json!({"metadata": {"name": "c"}})));
        assert!(done.is_ok_and(|d| d.done));
    }

    #[test]
    fn an_endpoint_already_recorded_is_asked_for_again() {
        install(Arc::new(FakeCloud));
        let mut o = obj("c");
        o["spec"]["controlPlaneEndpoint"] = json!({"host": "127.0.0.1", "port": 41234});
        let ctx = context(o).cluster(json!({"metadata": {"name": "c"}}));
        let st = InMemory::reconcile_cluster(ctx).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(st.control_plane_endpoint.map(|e| e.port), Some(41234));
    }

    #[test]
    fn metadata_declares_roles_and_one_crd_per_kind() {
        let m = InMemory::metadata();
        assert_eq!(m.kinds.len(), m.crds.len());
        let roles: Vec<(&str, &KindRole)> =
            m.kinds.iter().map(|k| (k.kind.as_str(), &k.role)).collect();
        assert!(matches!(
            roles[0],
            ("InMemoryCluster", KindRole::InfrastructureCluster)
        ));
        assert!(matches!(
            roles[1],
            ("InMemoryMachine", KindRole::InfrastructureMachine)
        ));
        assert!(
            matches!(roles[2], ("InMemoryMachineTemplate", KindRole::InfrastructureMachineTemplate(of)) if of == "InMemoryMachine")
        );
        assert!(
            matches!(roles[3], ("InMemoryClusterTemplate", KindRole::InfrastructureClusterTemplate(of)) if of == "InMemoryCluster")
        );
    }
}
