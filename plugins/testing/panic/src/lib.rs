//! Misbehaving: reconcile panics, which traps the instance.

// Panicking is what this component is for.
#![allow(clippy::panic)]

use capw_sdk::*;

struct Boom;

impl Provider for Boom {
    fn metadata() -> Metadata {
        Metadata {
            name: "panic".into(),
            version: "0.1.0".into(),
            provider_type: ProviderType::Infrastructure,
            contract_version: "v1beta2".into(),
            kinds: vec![],
            crds: vec![],
        }
    }

    fn reconcile_machine(ctx: Context) -> Result<MachineStatus, ProviderError> {
        panic!(
            "the panic plugin always panics (object was {} bytes)",
            ctx.object.len()
        );
    }
}

capw_sdk::export_provider!(Boom);
