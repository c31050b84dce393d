//! The backends of the host interfaces (`capw:host/*`) a plugin can be granted. The runtime links
//! them into a Store only when the plugin's WasmProvider grants them.

pub mod cloud_config;
pub mod container_runtime;
pub mod sim_cloud;
