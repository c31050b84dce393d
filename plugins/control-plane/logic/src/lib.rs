//! `control-plane`: the capw control-plane provider. A CapwControlPlane asks the host for
//! control-plane Machines up to `spec.replicas` (one at a time until the first is initialized,
//! as KCP does), reports initialized/available and the replica counters, and renders the
//! workload kubeconfig from the cluster's endpoint, CA and token. A change of `spec.version` or
//! of the machine template rolls the Machines one at a time (`rollout`).

mod provider;
mod rollout;

pub use provider::ControlPlane;
