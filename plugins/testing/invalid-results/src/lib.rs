//! Misbehaving: claims to be provisioned without a provider ID and returns a status patch that
//! is not JSON. The host must reject the result rather than write it.
use capw_sdk::*;

struct Liar;

impl Provider for Liar {
    fn metadata() -> Metadata {
        Metadata::new("invalid-results", "0.1.0", ProviderType::Infrastructure)
    }

    fn reconcile_machine(_ctx: Context) -> Result<MachineStatus, ProviderError> {
        Ok(MachineStatus {
            provisioned: true,
            provider_id: Some(String::new()),
            addresses: vec![],
            failure_domain: None,
            interruptible: false,
            common: Common {
                conditions: vec![],
                status_patch: Some("{not json".into()),
                requeue_after_seconds: None,
            },
        })
    }
}

capw_sdk::export_provider!(Liar);
