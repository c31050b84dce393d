//! Guest-side helpers for capw provider components.
//!
//! A provider implements [`InfrastructureProvider`] and exports it with
//! [`infrastructure_provider!`]; the SDK owns the generated WIT bindings, decodes the JSON
//! context into [`View`]s and builds results.
//!
//! ```ignore
//! struct Echo;
//! impl capw_sdk::InfrastructureProvider for Echo { /* ... */ }
//! capw_sdk::infrastructure_provider!(Echo);
//! ```

pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "capw:provider/infrastructure-provider",
        pub_export_macro: true,
        export_macro_name: "export_infrastructure",
        default_bindings_module: "capw_sdk::bindings",
        generate_all,
    });
}

pub use bindings::capw::host::log::Level;
pub use bindings::capw::provider::types::{
    Address, ApiEndpoint, Common, Condition, Context, DeleteStatus, FailureDomain, ProviderError, Retry,
};
pub use bindings::exports::capw::provider::infrastructure_cluster::ClusterStatus;
pub use bindings::exports::capw::provider::infrastructure_machine::MachineStatus;
pub use bindings::exports::capw::provider::plugin_info::{PluginMetadata as Metadata, ProviderType, ServedKind};
pub use serde_json::{Value, json};

/// Writes to the host log (which caps what one call may log).
pub fn log(level: Level, message: &str) {
    bindings::capw::host::log::log(level, message);
}

/// A parsed object from the context, with accessors for the fields every provider reads.
pub struct View(pub Value);

impl View {
    /// Parses one JSON object of the context; malformed JSON is an `invalid-spec` error.
    pub fn parse(json: &str) -> Result<View, ProviderError> {
        serde_json::from_str(json)
            .map(View)
            .map_err(|e| ProviderError::InvalidSpec(format!("the host sent an object that is not JSON: {e}")))
    }

    pub fn name(&self) -> &str {
        self.str("/metadata/name")
    }

    pub fn namespace(&self) -> &str {
        self.str("/metadata/namespace")
    }

    pub fn kind(&self) -> &str {
        self.str("/kind")
    }

    /// The string at a JSON pointer, or "".
    pub fn str(&self, pointer: &str) -> &str {
        self.0.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
    }

    pub fn get(&self, pointer: &str) -> Option<&Value> {
        self.0.pointer(pointer)
    }
}

impl Context {
    /// The provider object of this call.
    pub fn view(&self) -> Result<View, ProviderError> {
        View::parse(&self.object)
    }

    /// The owning Cluster, when the host sent one.
    pub fn cluster_view(&self) -> Result<Option<View>, ProviderError> {
        self.cluster.as_deref().map(View::parse).transpose()
    }
}

/// A v1beta2 condition.
pub fn condition(type_: &str, ok: bool, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
    }
}

/// The common part of a result.
pub fn common(conditions: Vec<Condition>, status_patch: Option<Value>) -> Common {
    Common {
        conditions,
        status_patch: status_patch.map(|v| v.to_string()),
        requeue_after_seconds: None,
    }
}

/// Deletion finished.
pub fn deleted() -> DeleteStatus {
    DeleteStatus { done: true, common: common(vec![], None) }
}

/// An infrastructure provider. Every method has a default so test providers override only
/// what they exercise.
pub trait InfrastructureProvider {
    fn metadata() -> Metadata;

    fn reconcile_cluster(ctx: Context) -> Result<ClusterStatus, ProviderError> {
        let _ = ctx;
        Err(ProviderError::Terminal("this provider does not serve infrastructure clusters".into()))
    }

    fn delete_cluster(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        let _ = ctx;
        Ok(deleted())
    }

    fn reconcile_machine(ctx: Context) -> Result<MachineStatus, ProviderError> {
        let _ = ctx;
        Err(ProviderError::Terminal("this provider does not serve infrastructure machines".into()))
    }

    fn delete_machine(ctx: Context) -> Result<DeleteStatus, ProviderError> {
        let _ = ctx;
        Ok(deleted())
    }
}

/// Exports a type implementing [`InfrastructureProvider`] as the component's exports.
#[macro_export]
macro_rules! infrastructure_provider {
    ($t:ty) => {
        struct __CapwExport;

        impl $crate::bindings::exports::capw::provider::plugin_info::Guest for __CapwExport {
            fn metadata() -> $crate::Metadata {
                <$t as $crate::InfrastructureProvider>::metadata()
            }
        }

        impl $crate::bindings::exports::capw::provider::infrastructure_cluster::Guest for __CapwExport {
            fn reconcile(ctx: $crate::Context) -> Result<$crate::ClusterStatus, $crate::ProviderError> {
                <$t as $crate::InfrastructureProvider>::reconcile_cluster(ctx)
            }
            fn delete(ctx: $crate::Context) -> Result<$crate::DeleteStatus, $crate::ProviderError> {
                <$t as $crate::InfrastructureProvider>::delete_cluster(ctx)
            }
        }

        impl $crate::bindings::exports::capw::provider::infrastructure_machine::Guest for __CapwExport {
            fn reconcile(ctx: $crate::Context) -> Result<$crate::MachineStatus, $crate::ProviderError> {
                <$t as $crate::InfrastructureProvider>::reconcile_machine(ctx)
            }
            fn delete(ctx: $crate::Context) -> Result<$crate::DeleteStatus, $crate::ProviderError> {
                <$t as $crate::InfrastructureProvider>::delete_machine(ctx)
            }
        }

        $crate::bindings::export_infrastructure!(__CapwExport with_types_in $crate::bindings);
    };
}
