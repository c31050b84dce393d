//! `inmemory`: the in-memory infrastructure provider. Clusters get a simulated workload API
//! endpoint and machines are simulated VMs that boot from their bootstrap data, both through
//! the host's `capw:host/sim-cloud`. Nothing here keeps state: the VM's name is the machine's,
//! so every call can ask the cloud again.

mod provider;

pub use provider::InMemory;
