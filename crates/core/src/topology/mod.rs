//! Managed topologies (upstream's `internal/controllers/topology` and `exp/topology`): what a
//! ClusterClass and a Cluster's `spec.topology` make. It lands in steps (issue 30); so far the
//! inline patch engine and its templates, and the variables' defaults and checks.

pub mod patches;
pub mod template;
pub mod variables;
