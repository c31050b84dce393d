//! The core controllers, Cluster and Machine (`capi-contract.md` §3 and §4), and the plumbing
//! only they use. Each controller is a folder: `mod.rs` wires it (the reconcile skeleton, the
//! triggers), `phases.rs` reads its provider objects through the contract, `status.rs` sums up
//! its status and conditions, `delete.rs` deletes in order.

pub mod adopt;
pub mod aggregate;
pub mod cluster;
pub mod context;
pub mod error;
pub mod machine;
pub mod machine_conditions;
pub mod machinedeployment;
pub mod machinehealthcheck;
pub mod machineset;
pub mod naming;
pub mod referenced;
pub mod written;
