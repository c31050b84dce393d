//! `echo`: a well-behaved infrastructure provider for tests. It provisions instantly and echoes
//! its own version into what it returns, so tests can tell v1 from v2.

use capw_sdk::*;

#[cfg(not(any(feature = "v2", feature = "v3")))]
const VERSION: &str = "1.0.0";
#[cfg(all(feature = "v2", not(feature = "v3")))]
const VERSION: &str = "2.0.0";
/// v3 is the broken release the rollback tests need: it traps on every machine reconcile.
#[cfg(feature = "v3")]
const VERSION: &str = "3.0.0";

const GROUP: &str = "infrastructure.cluster.x-k8s.io";

fn crd(kind: &str, plural: &str) -> String {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{GROUP}"), "labels": {"cluster.x-k8s.io/v1beta2": "v1beta2"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "categories": ["cluster-api"]},
            "versions": [{
                "name": "v1beta2", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    })
    .to_string()
}

struct Echo;

impl Provider for Echo {
    fn metadata() -> Metadata {
        Metadata {
            name: "echo".into(),
            version: VERSION.into(),
            provider_type: ProviderType::Infrastructure,
            contract_version: "v1beta2".into(),
            kinds: vec![
                ServedKind {
                    group: GROUP.into(),
                    version: "v1beta2".into(),
                    kind: "EchoCluster".into(),
                    role: KindRole::InfrastructureCluster,
                },
                ServedKind {
                    group: GROUP.into(),
                    version: "v1beta2".into(),
                    kind: "EchoMachine".into(),
                    role: KindRole::InfrastructureMachine,
                },
            ],
            crds: vec![
                crd("EchoCluster", "echoclusters"),
                crd("EchoMachine", "echomachines"),
            ],
        }
    }

    fn reconcile_cluster(ctx: Context) -> Result<ClusterStatus, ProviderError> {
        let obj = ctx.view()?;
        log(
            Level::Info,
            &format!("echo {VERSION} reconciling cluster {}", obj.name()),
        );
        Ok(ClusterStatus {
            provisioned: true,
            control_plane_endpoint: Some(ApiEndpoint {
                host: "127.0.0.1".into(),
                port: 6443,
            }),
            failure_domains: vec![],
            common: common(
                vec![condition("Ready", true, &reason(), "echoed")],
                Some(json!({"echo": VERSION})),
            ),
        })
    }

    // The v3 build is the broken version that hot-reload tests roll back from.
    #[allow(clippy::panic)]
    fn reconcile_machine(ctx: Context) -> Result<MachineStatus, ProviderError> {
        if cfg!(feature = "v3") {
            panic!("echo 3.0.0 is broken on purpose");
        }
        let obj = ctx.view()?;
        log(
            Level::Info,
            &format!("echo {VERSION} reconciling machine {}", obj.name()),
        );
        Ok(MachineStatus {
            provisioned: true,
            provider_id: Some(format!("echo:///{}/{}", obj.namespace(), obj.name())),
            addresses: vec![Address {
                type_: "InternalIP".into(),
                address: "10.0.0.1".into(),
            }],
            failure_domain: None,
            interruptible: false,
            common: common(
                vec![condition("Ready", true, &reason(), "echoed")],
                Some(json!({"echo": VERSION})),
            ),
        })
    }
}

/// The visible difference between versions: `EchoedV1` or `EchoedV2`.
fn reason() -> String {
    format!("EchoedV{}", &VERSION[..1])
}

capw_sdk::export_provider!(Echo);
