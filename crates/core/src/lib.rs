//! The core controllers (`capi-contract.md` §3 and §4, `capi-lifecycle.md`), and the plumbing
//! only they use. Each controller is a folder: `mod.rs` wires it (the reconcile skeleton),
//! `watches.rs` declares what wakes it (its `setup`, listed in [`CONTROLLERS`]), `phases.rs` reads its provider objects through the contract, `status.rs` sums up
//! its status and conditions, `delete.rs` deletes in order.

pub mod adopt;
pub mod aggregate;
pub mod caches;
pub mod cluster;
pub mod clusterclass;
pub mod context;
pub mod error;
pub mod machine;
pub mod machine_conditions;
pub mod machinedeployment;
pub mod machinehealthcheck;
pub mod machineset;
pub mod naming;
pub mod referenced;
pub mod topology;
pub mod webhooks;
pub mod written;

/// Every core controller. Adding one is a folder with its `setup` and a line here.
pub const CONTROLLERS: &[context::Registration] = &[
    cluster::CONTROLLER,
    clusterclass::CONTROLLER,
    machine::CONTROLLER,
    machineset::CONTROLLER,
    machinedeployment::CONTROLLER,
    machinehealthcheck::CONTROLLER,
    topology::CONTROLLER,
    topology::finalizers::DEPLOYMENTS,
    topology::finalizers::SETS,
];
