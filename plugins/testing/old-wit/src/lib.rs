//! A bootstrap provider built against `capw:provider@0.1.0`, the WIT before kinds declared
//! their roles (a frozen copy in `wit/`), so tests can see how this host answers such a
//! component.

wit_bindgen::generate!({
    path: "wit",
    world: "capw:provider/bootstrap-provider",
    generate_all,
});

use capw::provider::types::{Context, DeleteStatus, ProviderError};
use exports::capw::provider::bootstrap_config::{self, BootstrapStatus};
use exports::capw::provider::plugin_info::{self, PluginMetadata, ProviderType, ServedKind};

struct Old;

impl plugin_info::Guest for Old {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "old-wit".into(),
            version: "0.1.0".into(),
            provider_type: ProviderType::Bootstrap,
            contract_version: "v1beta2".into(),
            kinds: vec![ServedKind {
                group: "bootstrap.cluster.x-k8s.io".into(),
                version: "v1beta2".into(),
                kind: "OldConfig".into(),
            }],
            crds: vec![],
        }
    }
}

impl bootstrap_config::Guest for Old {
    fn reconcile(_ctx: Context) -> Result<BootstrapStatus, ProviderError> {
        Err(ProviderError::Terminal("old".into()))
    }
    fn delete(_ctx: Context) -> Result<DeleteStatus, ProviderError> {
        Err(ProviderError::Terminal("old".into()))
    }
}

export!(Old);
