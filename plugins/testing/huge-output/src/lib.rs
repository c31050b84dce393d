//! Misbehaving: tries to return a 100 MB status patch. The host must refuse it.
use capw_sdk::*;

struct Flood;

impl Provider for Flood {
    fn metadata() -> Metadata {
        Metadata::new("huge-output", "0.1.0", ProviderType::Infrastructure)
    }

    fn reconcile_machine(_ctx: Context) -> Result<MachineStatus, ProviderError> {
        let huge = "x".repeat(100 << 20);
        Ok(MachineStatus::pending(Common {
            conditions: vec![],
            status_patch: Some(huge),
            requeue_after_seconds: None,
        }))
    }
}

capw_sdk::export_provider!(Flood);
