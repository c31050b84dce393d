//! Misbehaving: reconcile allocates until memory runs out. The host's memory limit must stop it.
use capw_sdk::*;

struct Bomb;

impl Provider for Bomb {
    fn metadata() -> Metadata {
        Metadata::new("memory-bomb", "0.1.0", ProviderType::Infrastructure)
    }

    fn reconcile_machine(_ctx: Context) -> Result<MachineStatus, ProviderError> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(std::hint::black_box(vec![7u8; 16 << 20]));
        }
    }
}

capw_sdk::export_provider!(Bomb);
