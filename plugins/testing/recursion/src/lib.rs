//! Misbehaving: unbounded recursion. The host's stack limit must trap it.
use capw_sdk::*;

struct Deep;

#[inline(never)]
fn dive(n: u64) -> u64 {
    if n == u64::MAX {
        0
    } else {
        dive(std::hint::black_box(n + 1)).wrapping_add(n)
    }
}

impl Provider for Deep {
    fn metadata() -> Metadata {
        Metadata::new("recursion", "0.1.0", ProviderType::Infrastructure)
    }

    fn reconcile_machine(_ctx: Context) -> Result<MachineStatus, ProviderError> {
        let depth = dive(std::hint::black_box(0));
        Err(ProviderError::Other(format!("returned from depth {depth}")))
    }
}

capw_sdk::export_provider!(Deep);
