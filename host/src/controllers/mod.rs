//! Controllers the host runs: today the WasmProvider controller and the plugin-directory
//! drop-in watcher (the core Cluster and Machine controllers come next).

pub mod dropin;
pub mod wasmprovider;
