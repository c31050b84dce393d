//! Host bindings generated from `wit/`. Private: the rest of the host sees only the re-exported
//! types. The WIT doc comments are the normative contract.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "capw:provider/infrastructure-provider",
    exports: { default: async },
});

pub use capw::host::{container_runtime, log, sim_cloud};
pub use capw::provider::types;
pub use exports::capw::provider::{infrastructure_cluster, infrastructure_machine, plugin_info};
