//! Managed topologies (upstream's `internal/controllers/topology` and `exp/topology`): what a
//! ClusterClass and a Cluster's `spec.topology` make. It lands in steps (issue 30); so far the
//! patch engine's template rendering.

pub mod template;
