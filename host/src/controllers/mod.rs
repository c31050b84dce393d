//! The host's controllers: the core Cluster and Machine controllers, the provider driver that
//! runs every loaded plugin as the controller of its kinds, the WasmProvider controller and the
//! plugin drop-in directory.

pub mod adopt;
pub mod backoff;
pub mod cluster;
pub mod conditions;
pub mod context;
pub mod driver;
pub mod dropin;
pub mod error;
pub mod external;
pub mod fanout;
pub mod kubeconfig;
pub mod machine;
pub mod referenced;
pub mod relevance;
pub mod remote;
pub mod wasmprovider;
