//! Misbehaving: reconcile panics, which traps the instance.

// Panicking is what this component is for.
#![allow(clippy::panic)]

use capw_sdk::*;

struct Boom;

impl Provider for Boom {
    fn metadata() -> Metadata {
        Metadata::new("panic", "0.1.0", ProviderType::Infrastructure)
    }

    fn reconcile_machine(ctx: Context) -> Result<MachineStatus, ProviderError> {
        panic!(
            "the panic plugin always panics (object was {} bytes)",
            ctx.object.len()
        );
    }
}

capw_sdk::export_provider!(Boom);
