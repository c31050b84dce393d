//! Hostile providers, written against the WIT as an attacker would. Each build (a feature)
//! attacks one rule of SECURITY.md; `host/tests/security.rs` runs them against the real host and
//! asserts the host refused, leaked nothing and ran nothing.
//!
//! The control-plane and bootstrap builds take their attack from their object's spec, so one
//! component covers every variant of a vector: `spec.kubeconfig` (returned as the workload
//! kubeconfig), `spec.statusPatch` (returned as the status patch), `spec.createMachines` (how
//! many Machines to ask for), `spec.machineNames` (the names to ask for them by: another
//! cluster's Secret names), `spec.logLines` (empty log lines to emit), `spec.logMessages`
//! (messages to log, each once per call: line breaks, escapes, forged host lines).

use capw_sdk::*;

struct Hostile;

const CP_GROUP: &str = "controlplane.cluster.x-k8s.io";
const BOOT_GROUP: &str = "bootstrap.cluster.x-k8s.io";
const INFRA_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// A group of the impostor's own, where it may call its kind anything.
const IMPOSTOR_GROUP: &str = "controlplane.hostile.example";

fn name() -> &'static str {
    if cfg!(feature = "control-plane") {
        "hostile-control-plane"
    } else if cfg!(feature = "bootstrap") {
        "hostile-bootstrap"
    } else if cfg!(feature = "core-kind") {
        "hostile-core-kind"
    } else if cfg!(feature = "kind-thief") {
        "hostile-kind-thief"
    } else if cfg!(feature = "crd-shadow") {
        "hostile-crd-shadow"
    } else if cfg!(feature = "kcp-impostor") {
        "hostile-kcp-impostor"
    } else {
        "hostile-crd-swap"
    }
}

/// The control-plane role whose Machines get a KubeadmConfig from `spec.kubeadmConfigSpec`.
fn kubeadm_control_plane() -> KindRole {
    KindRole::ControlPlane(ControlPlaneMachines {
        bootstrap_config: KindRef {
            group: BOOT_GROUP.into(),
            kind: "KubeadmConfig".into(),
        },
        spec_field: "kubeadmConfigSpec".into(),
    })
}

fn patch_and_logs(obj: &View) -> Option<Value> {
    let lines = obj
        .get("/spec/logLines")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    for _ in 0..lines {
        log(Level::Info, "");
    }
    for m in obj
        .get("/spec/logMessages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        log(Level::Warn, m);
    }
    obj.get("/spec/statusPatch").cloned()
}

impl Provider for Hostile {
    fn metadata() -> Metadata {
        let (provider_type, kinds, crds) = if cfg!(feature = "control-plane") {
            (
                ProviderType::ControlPlane,
                vec![kind(
                    CP_GROUP,
                    "HostileControlPlane",
                    kubeadm_control_plane(),
                )],
                vec![crd(
                    CP_GROUP,
                    "HostileControlPlane",
                    "hostilecontrolplanes",
                    &[],
                )],
            )
        } else if cfg!(feature = "bootstrap") {
            (
                ProviderType::Bootstrap,
                vec![kind(BOOT_GROUP, "HostileConfig", KindRole::BootstrapConfig)],
                vec![crd(BOOT_GROUP, "HostileConfig", "hostileconfigs", &[])],
            )
        } else if cfg!(feature = "core-kind") {
            (
                ProviderType::ControlPlane,
                vec![kind("cluster.x-k8s.io", "Machine", kubeadm_control_plane())],
                vec![crd("cluster.x-k8s.io", "Machine", "machines", &[])],
            )
        } else if cfg!(feature = "crd-shadow") {
            // Its own kind name, but the plural of KubeadmConfig's CRD: the CRD named
            // kubeadmconfigs.bootstrap.cluster.x-k8s.io would then serve this kind.
            (
                ProviderType::Bootstrap,
                vec![kind(
                    BOOT_GROUP,
                    "KubeadmConfigShadow",
                    KindRole::BootstrapConfig,
                )],
                vec![crd(
                    BOOT_GROUP,
                    "KubeadmConfigShadow",
                    "kubeadmconfigs",
                    &[],
                )],
            )
        } else if cfg!(feature = "kcp-impostor") {
            (
                ProviderType::ControlPlane,
                vec![kind(
                    IMPOSTOR_GROUP,
                    "KubeadmControlPlane",
                    kubeadm_control_plane(),
                )],
                vec![crd(
                    IMPOSTOR_GROUP,
                    "KubeadmControlPlane",
                    "kubeadmcontrolplanes",
                    &[],
                )],
            )
        } else if cfg!(feature = "kind-thief") {
            (
                ProviderType::Infrastructure,
                vec![kind(
                    INFRA_GROUP,
                    "DockerMachine",
                    KindRole::InfrastructureMachine,
                )],
                vec![crd(INFRA_GROUP, "DockerMachine", "dockermachines", &[])],
            )
        } else {
            (
                ProviderType::Infrastructure,
                vec![
                    kind(
                        INFRA_GROUP,
                        "HostileMachine",
                        KindRole::InfrastructureMachine,
                    ),
                    kind(
                        INFRA_GROUP,
                        "HostileCluster",
                        KindRole::InfrastructureCluster,
                    ),
                ],
                vec![
                    crd("cluster.x-k8s.io", "Cluster", "clusters", &[]),
                    crd(
                        "apiextensions.k8s.io",
                        "CustomResourceDefinition",
                        "customresourcedefinitions",
                        &[],
                    ),
                ],
            )
        };
        Metadata {
            name: name().into(),
            version: "0.1.0".into(),
            provider_type,
            contract_version: "v1beta2".into(),
            kinds,
            crds,
        }
    }

    fn reconcile_control_plane(ctx: Context) -> Result<ControlPlaneStatus, ProviderError> {
        let obj = ctx.view()?;
        let n = obj
            .get("/spec/createMachines")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let named = obj
            .get("/spec/machineNames")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string);
        let machines_to_create = (0..n)
            .map(|i| format!("{}-m{i}", obj.name()))
            .chain(named)
            .map(|name| MachineRequest {
                name,
                version: obj
                    .get("/spec/version")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                failure_domain: None,
            })
            .collect();
        // Initialized unless its spec says otherwise: a control plane that is not yet makes
        // its first Machine's bootstrap config run `kubeadm init`, which needs no token.
        let initialized = obj
            .get("/spec/initialized")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        Ok(ControlPlaneStatus {
            initialized,
            available: initialized,
            endpoint: None,
            replicas: ReplicaCounts {
                desired: 1,
                ready: 1,
                available: 1,
                up_to_date: 1,
            },
            kubeconfig: obj
                .get("/spec/kubeconfig")
                .and_then(Value::as_str)
                .map(str::to_string),
            machines_to_create,
            machines_to_delete: vec![],
            common: common(
                vec![condition("Ready", true, "Hostile", "")],
                patch_and_logs(&obj),
            ),
        })
    }

    fn reconcile_bootstrap(ctx: Context) -> Result<BootstrapStatus, ProviderError> {
        let obj = ctx.view()?;
        Ok(BootstrapStatus {
            data: None,
            common: common(
                vec![condition("Ready", true, "Hostile", "")],
                patch_and_logs(&obj),
            ),
        })
    }

    fn reconcile_machine(ctx: Context) -> Result<MachineStatus, ProviderError> {
        // The thief reports whatever bootstrap data it was handed, which must be none.
        let leaked = ctx.bootstrap_data.is_some() || !ctx.secrets.is_empty();
        Ok(MachineStatus::pending(common(
            vec![],
            Some(json!({"leaked": leaked})),
        )))
    }
}

capw_sdk::export_provider!(Hostile);
