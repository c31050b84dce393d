//! Host bindings generated from `wit/`. Private: the rest of the host sees only the re-exported
//! types. The WIT doc comments are the normative contract.
//!
//! The host binds the `any-provider` world and looks each export interface up on its own, so a
//! component built against the narrower `bootstrap-provider` or `control-plane-provider` world
//! loads as well as one built with the SDK.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "capw:provider/any-provider",
    exports: { default: async },
    // Docker calls take milliseconds to seconds: they must not block an executor thread.
    imports: { "capw:host/container-runtime": async },
});

pub use self::capw::host::{container_runtime, log, sim_cloud};
pub use self::capw::provider::types;
pub use self::exports::capw::provider::{
    bootstrap_config, control_plane, infrastructure_cluster, infrastructure_machine, plugin_info,
};
