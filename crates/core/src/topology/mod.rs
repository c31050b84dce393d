//! Managed topologies (upstream's `internal/controllers/topology` and `exp/topology`): what a
//! ClusterClass and a Cluster's `spec.topology` make. It lands in steps (issue 30); so far the
//! inline patch engine and its templates, the variables' defaults and checks, and the
//! upgrade sequencing.

pub mod patches;
pub mod template;
pub mod upgrade;
pub mod variables;
