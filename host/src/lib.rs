//! The capw host: the plugin runtime that loads Cluster API providers as sandboxed
//! WebAssembly components (and, in later issues, the core controllers and the provider driver).

pub mod runtime;
