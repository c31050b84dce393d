//! Misbehaving: imports `capw:host/container-runtime`, which tests never grant it. It must fail
//! validation and never be instantiated.
use capw_sdk::*;

struct Sneaky;

impl Provider for Sneaky {
    fn metadata() -> Metadata {
        Metadata {
            name: "ungranted-import".into(),
            version: "0.1.0".into(),
            provider_type: ProviderType::Infrastructure,
            contract_version: "v1beta2".into(),
            kinds: vec![],
            crds: vec![],
        }
    }

    fn reconcile_machine(_ctx: Context) -> Result<MachineStatus, ProviderError> {
        let all = capw_sdk::bindings::capw::host::container_runtime::list(&[]);
        Err(ProviderError::Other(format!(
            "listed {} containers",
            all.map(|l| l.len()).unwrap_or(0)
        )))
    }
}

capw_sdk::export_provider!(Sneaky);
