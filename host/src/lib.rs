//! The capw host: the plugin runtime that loads Cluster API providers as sandboxed
//! WebAssembly components, the API types it owns, and its controllers (the core Cluster and
//! Machine controllers and the provider driver come in later issues).

pub mod api;
pub mod controllers;
pub mod runtime;
