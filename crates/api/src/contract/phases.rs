//! `status.phase` values, as Cluster API spells them for Clusters and Machines.

pub const PENDING: &str = "Pending";
pub const PROVISIONING: &str = "Provisioning";
pub const PROVISIONED: &str = "Provisioned";
/// Machines only: provisioned and its Node exists.
pub const RUNNING: &str = "Running";
pub const DELETING: &str = "Deleting";
