//! Host bindings generated from `wit/`. Private: the rest of the host sees only the re-exported
//! types. The WIT doc comments are the normative contract.
//!
//! The host binds the `any-provider` world and looks each export interface up on its own, so a
//! component built against the narrower `bootstrap-provider` or `control-plane-provider` world
//! loads as well as one built with the SDK.

wasmtime::component::bindgen!({
    // The host package first: the provider package uses it.
    path: ["../../wit/host", "../../wit/provider"],
    world: "capw:provider/any-provider",
    exports: { default: async },
    // Docker and AWS calls take milliseconds to seconds: they must not block an executor thread.
    imports: { "capw:host/container-runtime": async, "capw:host/aws": async },
    // Lets an in-process transport (the clusters benchmark's) carry values across from the
    // guest SDK's copy of these types.
    additional_derives: [serde::Serialize, serde::Deserialize],
});

pub use self::capw::host::{aws, container_runtime, log, sim_cloud};
pub use self::capw::provider::types;
pub use self::exports::capw::provider::{
    bootstrap_config, control_plane, infrastructure_cluster, infrastructure_machine, plugin_info,
};

impl types::ConditionStatus {
    /// As a v1beta2 condition spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            types::ConditionStatus::True => "True",
            types::ConditionStatus::False => "False",
            types::ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl bootstrap_config::BootstrapFormat {
    /// As the bootstrap data Secret's `format` key spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            bootstrap_config::BootstrapFormat::CloudConfig => "cloud-config",
            bootstrap_config::BootstrapFormat::Ignition => "ignition",
        }
    }
}
