//! Misbehaving: reconcile never returns. The host's deadline must end it.
use capw_sdk::*;

struct Spin;

impl Provider for Spin {
    fn metadata() -> Metadata {
        Metadata {
            name: "infinite-loop".into(),
            version: "0.1.0".into(),
            provider_type: ProviderType::Infrastructure,
            contract_version: "v1beta2".into(),
            kinds: vec![],
            crds: vec![],
        }
    }

    fn reconcile_machine(_ctx: Context) -> Result<MachineStatus, ProviderError> {
        let mut x = 0u64;
        loop {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
}

capw_sdk::export_provider!(Spin);
