//! The capw host: the core Cluster and Machine controllers, the provider driver that turns every
//! loaded plugin into the controller of its kinds, the plugin runtime that loads Cluster API
//! providers as sandboxed WebAssembly components, and the host capabilities plugins can be
//! granted.

pub mod api;
pub mod capabilities;
pub mod contract;
pub mod controllers;
pub mod logging;
pub mod manager;
pub mod metrics;
pub mod node;
pub mod runtime;
