//! Host bindings generated from `wit/`. Private: the rest of the host sees only the re-exported
//! types. The WIT doc comments are the normative contract.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "capw:provider/infrastructure-provider",
    exports: { default: async },
});

pub use self::capw::host::{container_runtime, log, sim_cloud};
pub use self::capw::provider::types;
pub use self::exports::capw::provider::{
    infrastructure_cluster, infrastructure_machine, plugin_info,
};
