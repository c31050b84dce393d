//! The host's controllers, by layer:
//!
//! - `core/`: the Cluster and Machine controllers and what only they use (adoption, ordered
//!   deletion of referenced objects, workload cluster clients, their shared context);
//! - `provider/`: the driver that runs every loaded plugin as the controller of its kinds;
//! - here: what both layers share (the reconcile skeleton, Events, backoff, provider object resolution and
//!   watches, the change fan-out, relevance filters, kubeconfig checks).
//!
//! The plugin-side controllers (WasmProvider, the drop-in directory) live with the runtime.

pub mod backoff;
pub mod core;
pub mod events;
pub mod external;
pub mod fanout;
pub mod kubeconfig;
pub mod provider;
pub mod relevance;
pub mod skeleton;
