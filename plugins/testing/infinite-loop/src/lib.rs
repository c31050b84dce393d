//! Misbehaving: reconcile never returns. The host's deadline must end it.
use capw_sdk::*;

struct Spin;

impl Provider for Spin {
    fn metadata() -> Metadata {
        Metadata::new("infinite-loop", "0.1.0", ProviderType::Infrastructure)
    }

    fn reconcile_machine(_ctx: Context) -> Result<MachineStatus, ProviderError> {
        let mut x = 0u64;
        loop {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
}

capw_sdk::export_provider!(Spin);
