//! Building contexts for a provider's native unit tests (not in components).

use crate::{Context, Value};

/// A context as the host sends it, for `object`.
pub fn context(object: Value) -> Context {
    Context {
        object: object.to_string(),
        cluster: None,
        machine: None,
        infrastructure_cluster: None,
        bootstrap_data: None,
        secrets: vec![],
        owned_machines: vec![],
    }
}

/// Builder-style additions to a [`Context`].
pub trait ContextBuilder {
    /// With the owning Cluster.
    fn cluster(self, cluster: Value) -> Self;
    /// With the owning Machine.
    fn machine(self, machine: Value) -> Self;
    /// With the bootstrap data.
    fn bootstrap_data(self, data: &str) -> Self;
    /// With a secret handed over (`ca.crt`, `ca.key`, `token`).
    fn secret(self, key: &str, value: &str) -> Self;
    /// With the control plane's Machines.
    fn owned(self, machines: Vec<Value>) -> Self;
}

impl ContextBuilder for Context {
    fn cluster(mut self, cluster: Value) -> Self {
        self.cluster = Some(cluster.to_string());
        self
    }
    fn machine(mut self, machine: Value) -> Self {
        self.machine = Some(machine.to_string());
        self
    }
    fn bootstrap_data(mut self, data: &str) -> Self {
        self.bootstrap_data = Some(data.to_string());
        self
    }
    fn secret(mut self, key: &str, value: &str) -> Self {
        self.secrets.push((key.into(), value.into()));
        self
    }
    fn owned(mut self, machines: Vec<Value>) -> Self {
        self.owned_machines = machines.iter().map(Value::to_string).collect();
        self
    }
}

/// The status of condition `type_` among `conditions`, as v1beta2 spells it, and its reason.
pub fn condition_of(conditions: &[crate::Condition], type_: &str) -> Option<(String, String)> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str().to_string(), c.reason.clone()))
}
