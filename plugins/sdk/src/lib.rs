//! Guest-side helpers for capw provider components.
//!
//! A provider implements [`Provider`] and exports it with [`export_provider!`]; the SDK owns
//! the generated WIT bindings (the `any-provider` world, so one crate can serve any provider
//! type), decodes the JSON context into [`View`]s and builds results. The host requires only the
//! interfaces of the type `metadata()` declares; the others answer `terminal`.
//!
//! ```ignore
//! struct Echo;
//! impl capw_sdk::Provider for Echo { /* ... */ }
//! capw_sdk::export_provider!(Echo);
//! ```

#![warn(missing_docs)]

/// The generated WIT bindings (wit-bindgen); the SDK re-exports what providers use.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: ["../../wit/host", "../../wit/provider"],
        world: "capw:provider/any-provider",
        pub_export_macro: true,
        export_macro_name: "export_any",
        default_bindings_module: "capw_sdk::bindings",
        generate_all,
        // Lets a native build (tests, the host's benchmark) carry results across to its own
        // copy of the contract's types.
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}

pub use bindings::capw::host::log::Level;
pub use bindings::capw::provider::types::{
    Address, ApiEndpoint, Common, Condition, ConditionStatus, Context, DeleteStatus, FailureDomain,
    ProviderError, Retry,
};
pub use bindings::exports::capw::provider::bootstrap_config::{
    BootstrapData, BootstrapFormat, BootstrapStatus,
};
pub use bindings::exports::capw::provider::control_plane::{
    ControlPlaneStatus, MachineRequest, ReplicaCounts,
};
pub use bindings::exports::capw::provider::infrastructure_cluster::ClusterStatus;
pub use bindings::exports::capw::provider::infrastructure_machine::MachineStatus;
pub use bindings::exports::capw::provider::plugin_info::{
    ControlPlaneMachines, KindRef, KindRole, PluginMetadata as Metadata, ProviderType, ServedKind,
};
pub use host::{aws, container_runtime, log, sim_cloud};
pub use serde_json::{self, Value, json};

pub mod host;

mod helpers;
pub use helpers::*;

/// Exports a type implementing [`Provider`] as the component's exports.
#[macro_export]
macro_rules! export_provider {
    ($t:ty) => {
        struct __CapwExport;

        impl $crate::bindings::exports::capw::provider::plugin_info::Guest for __CapwExport {
            fn metadata() -> $crate::Metadata {
                <$t as $crate::Provider>::metadata()
            }
        }

        impl $crate::bindings::exports::capw::provider::infrastructure_cluster::Guest for __CapwExport {
            fn reconcile(ctx: $crate::Context) -> Result<$crate::ClusterStatus, $crate::ProviderError> {
                <$t as $crate::Provider>::reconcile_cluster(ctx)
            }
            fn delete(ctx: $crate::Context) -> Result<$crate::DeleteStatus, $crate::ProviderError> {
                <$t as $crate::Provider>::delete_cluster(ctx)
            }
        }

        impl $crate::bindings::exports::capw::provider::infrastructure_machine::Guest for __CapwExport {
            fn reconcile(ctx: $crate::Context) -> Result<$crate::MachineStatus, $crate::ProviderError> {
                <$t as $crate::Provider>::reconcile_machine(ctx)
            }
            fn delete(ctx: $crate::Context) -> Result<$crate::DeleteStatus, $crate::ProviderError> {
                <$t as $crate::Provider>::delete_machine(ctx)
            }
        }

        impl $crate::bindings::exports::capw::provider::bootstrap_config::Guest for __CapwExport {
            fn reconcile(ctx: $crate::Context) -> Result<$crate::BootstrapStatus, $crate::ProviderError> {
                <$t as $crate::Provider>::reconcile_bootstrap(ctx)
            }
            fn delete(ctx: $crate::Context) -> Result<$crate::DeleteStatus, $crate::ProviderError> {
                <$t as $crate::Provider>::delete_bootstrap(ctx)
            }
        }

        impl $crate::bindings::exports::capw::provider::control_plane::Guest for __CapwExport {
            fn reconcile(ctx: $crate::Context) -> Result<$crate::ControlPlaneStatus, $crate::ProviderError> {
                <$t as $crate::Provider>::reconcile_control_plane(ctx)
            }
            fn delete(ctx: $crate::Context) -> Result<$crate::DeleteStatus, $crate::ProviderError> {
                <$t as $crate::Provider>::delete_control_plane(ctx)
            }
        }

        $crate::bindings::export_any!(__CapwExport with_types_in $crate::bindings);
    };
}

pub mod testing;
