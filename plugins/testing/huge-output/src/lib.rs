//! Misbehaving: tries to return a 100 MB status patch. The host must refuse it.
use capw_sdk::*;

struct Flood;

impl Provider for Flood {
    fn metadata() -> Metadata {
        Metadata {
            name: "huge-output".into(),
            version: "0.1.0".into(),
            provider_type: ProviderType::Infrastructure,
            contract_version: "v1beta2".into(),
            kinds: vec![],
            crds: vec![],
        }
    }

    fn reconcile_machine(_ctx: Context) -> Result<MachineStatus, ProviderError> {
        let huge = "x".repeat(100 << 20);
        Ok(MachineStatus {
            provisioned: false,
            provider_id: None,
            addresses: vec![],
            failure_domain: None,
            interruptible: false,
            common: Common {
                conditions: vec![],
                status_patch: Some(huge),
                requeue_after_seconds: None,
            },
        })
    }
}

capw_sdk::export_provider!(Flood);
