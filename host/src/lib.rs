//! The `capw` binary's library half: the manager that wires the core controllers, the provider
//! driver and the plugin runtime into one process. The layers live in their own crates under
//! `crates/` (see `docs/architecture.md`); this crate sits on top of all of them.

pub mod manager;
