//! v1beta2 conditions: the one `Condition` type, the one setter (it keeps `lastTransitionTime`
//! unless the status changed, so a reconcile that observes nothing new writes nothing), and the
//! condition types and reasons core and the runtime set, as constants.

pub use crate::common::Condition;

/// Condition types, as Cluster API v1beta2 and the capw runtime name them.
pub mod types {
    pub const READY: &str = "Ready";
    pub const AVAILABLE: &str = "Available";
    pub const PAUSED: &str = "Paused";
    pub const DELETING: &str = "Deleting";
    pub const INFRASTRUCTURE_READY: &str = "InfrastructureReady";
    pub const BOOTSTRAP_CONFIG_READY: &str = "BootstrapConfigReady";
    /// A bootstrap config's: its data Secret is made (upstream's KubeadmConfig condition).
    pub const DATA_SECRET_AVAILABLE: &str = "DataSecretAvailable";
    pub const CONTROL_PLANE_INITIALIZED: &str = "ControlPlaneInitialized";
    pub const CONTROL_PLANE_AVAILABLE: &str = "ControlPlaneAvailable";
    pub const WORKERS_AVAILABLE: &str = "WorkersAvailable";
    pub const NODE_READY: &str = "NodeReady";
    pub const NODE_HEALTHY: &str = "NodeHealthy";
    /// The driver's: whether the last plugin call for the object succeeded.
    pub const PLUGIN_CALL_SUCCEEDED: &str = "PluginCallSucceeded";
    /// The runtime's, on WasmProviders.
    pub const VALIDATED: &str = "Validated";
    pub const ACTIVE: &str = "Active";
    pub const DEGRADED: &str = "Degraded";
    pub const ROLLED_BACK: &str = "RolledBack";
    /// The lifecycle kinds' (MachineSet, MachineDeployment, MachineHealthCheck).
    pub const UP_TO_DATE: &str = "UpToDate";
    pub const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
    pub const OWNER_REMEDIATED: &str = "OwnerRemediated";
    pub const SCALING_UP: &str = "ScalingUp";
    pub const SCALING_DOWN: &str = "ScalingDown";
    pub const MACHINES_READY: &str = "MachinesReady";
    pub const MACHINES_UP_TO_DATE: &str = "MachinesUpToDate";
    pub const REMEDIATING: &str = "Remediating";
    pub const ROLLING_OUT: &str = "RollingOut";
    /// A topology Cluster's: set by the topology controller, beside the Cluster controller's.
    pub const TOPOLOGY_RECONCILED: &str = "TopologyReconciled";
    pub const REMEDIATION_ALLOWED: &str = "RemediationAllowed";
}

/// Condition reasons core and the runtime set.
pub mod reasons {
    pub const NOT_READY: &str = "NotReady";
    pub const NOT_AVAILABLE: &str = "NotAvailable";
    pub const NOT_PAUSED: &str = "NotPaused";
    pub const NOT_DELETING: &str = "NotDeleting";
    pub const PROVISIONED: &str = "Provisioned";
    pub const PROVISIONING: &str = "Provisioning";
    pub const PENDING: &str = "Pending";
    pub const INITIALIZED: &str = "Initialized";
    pub const NOT_INITIALIZED: &str = "NotInitialized";
    pub const NO_WORKERS: &str = "NoWorkers";
    pub const DATA_SECRET_AVAILABLE: &str = "DataSecretAvailable";
    pub const DATA_SECRET_NOT_AVAILABLE: &str = "DataSecretNotAvailable";
    /// A Secret of the data Secret's name exists that the config does not control.
    pub const DATA_SECRET_NOT_OWNED: &str = "DataSecretNotOwned";
    pub const DATA_SECRET_PROVIDED: &str = "DataSecretProvided";
    pub const WAITING_FOR_DATA_SECRET: &str = "WaitingForDataSecret";
    pub const WAITING_FOR_INFRASTRUCTURE_DELETION: &str = "WaitingForInfrastructureDeletion";
    pub const WAITING_FOR_BOOTSTRAP_DELETION: &str = "WaitingForBootstrapDeletion";
    pub const WAITING_FOR_CONTROL_PLANE_DELETION: &str = "WaitingForControlPlaneDeletion";
    pub const WAITING_FOR_WORKERS_DELETION: &str = "WaitingForWorkersDeletion";
    pub const INFRASTRUCTURE_DOES_NOT_EXIST: &str = "InfrastructureDoesNotExist";
    pub const INFRASTRUCTURE_DELETED: &str = "InfrastructureDeleted";
    pub const BOOTSTRAP_CONFIG_DOES_NOT_EXIST: &str = "BootstrapConfigDoesNotExist";
    pub const INVALID_INFRASTRUCTURE_REF: &str = "InvalidInfrastructureRef";
    pub const INVALID_BOOTSTRAP_CONFIG_REF: &str = "InvalidBootstrapConfigRef";
    pub const NODE_DOES_NOT_EXIST: &str = "NodeDoesNotExist";
    pub const NODE_DELETED: &str = "NodeDeleted";
    pub const NODE_NOT_READY: &str = "NodeNotReady";
    pub const NODE_READY_UNKNOWN: &str = "NodeReadyUnknown";
    pub const NODE_INSPECTION_FAILED: &str = "NodeInspectionFailed";
    pub const KUBECONFIG_REFUSED: &str = "KubeconfigRefused";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const TRANSIENT_ERROR: &str = "TransientError";
    pub const TERMINAL_ERROR: &str = "TerminalError";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const PROVIDER_ERROR: &str = "ProviderError";
    pub const PLUGIN_TRAPPED: &str = "PluginTrapped";
    pub const PLUGIN_TIMEOUT: &str = "PluginTimeout";
    pub const PLUGIN_INVALID_RESULT: &str = "PluginInvalidResult";
    pub const SERVING: &str = "Serving";
    pub const VALID: &str = "Valid";
    pub const MODULE_MISSING: &str = "ModuleMissing";
    pub const QUARANTINED: &str = "Quarantined";
    pub const BAKE_FAILED: &str = "BakeFailed";
    pub const OBJECTS_REMAIN: &str = "ObjectsRemain";
    pub const DELETING: &str = "Deleting";
    pub const DELETION_COMPLETED: &str = "DeletionCompleted";
    pub const SCALING_UP: &str = "ScalingUp";
    pub const NOT_SCALING_UP: &str = "NotScalingUp";
    pub const SCALING_DOWN: &str = "ScalingDown";
    pub const NOT_SCALING_DOWN: &str = "NotScalingDown";
    pub const NO_REPLICAS: &str = "NoReplicas";
    pub const READY: &str = "Ready";
    pub const READY_UNKNOWN: &str = "ReadyUnknown";
    pub const UP_TO_DATE: &str = "UpToDate";
    pub const NOT_UP_TO_DATE: &str = "NotUpToDate";
    pub const UP_TO_DATE_UNKNOWN: &str = "UpToDateUnknown";
    pub const REMEDIATING: &str = "Remediating";
    pub const NOT_REMEDIATING: &str = "NotRemediating";
    pub const ROLLING_OUT: &str = "RollingOut";
    pub const NOT_ROLLING_OUT: &str = "NotRollingOut";
    pub const AVAILABLE: &str = "Available";
    pub const WAITING_FOR_REPLICAS_SET: &str = "WaitingForReplicasSet";
    pub const MACHINE_DELETING: &str = "MachineDeleting";
    pub const WAITING_FOR_REMEDIATION: &str = "WaitingForRemediation";
    pub const CANNOT_BE_REMEDIATED: &str = "CannotBeRemediated";
    pub const REMEDIATION_DEFERRED: &str = "RemediationDeferred";
    pub const HEALTH_CHECK_SUCCEEDED: &str = "HealthCheckSucceeded";
    pub const UNHEALTHY_NODE: &str = "UnhealthyNode";
    pub const UNHEALTHY_MACHINE: &str = "UnhealthyMachine";
    pub const NODE_STARTUP_TIMEOUT: &str = "NodeStartupTimeout";
    pub const HAS_REMEDIATE_ANNOTATION: &str = "HasRemediateAnnotation";
    pub const TOO_MANY_UNHEALTHY: &str = "TooManyUnhealthy";
    pub const REMEDIATION_ALLOWED: &str = "RemediationAllowed";
    pub const PREFLIGHT_CHECK_FAILED: &str = "PreflightCheckFailed";
}

pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub fn status_str(ok: bool) -> &'static str {
    if ok { "True" } else { "False" }
}

/// Condition `type_` as it should now read, given the `list` it goes into: the one
/// `lastTransitionTime` rule, kube's, which keeps the time unless the status changed.
pub fn updated(
    list: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    let time = match list.iter().find(|c| c.type_ == type_) {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now(),
    };
    Condition {
        type_: type_.into(),
        status: status.into(),
        observed_generation: generation,
        last_transition_time: time,
        reason: reason.into(),
        message: one_line(message),
    }
}

/// A condition's message as one readable line: an error's own line breaks and indentation
/// (a wasm validation error pretty-prints the bytes it expected) fold into single spaces.
pub fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The generation a reconcile's own spec write moved the object to, when that write is the only
/// spec change since the reconcile read it (`before` + 1 = `after`). The status it then writes
/// observed that spec: it computed the fields it wrote. Recording the new generation in the
/// same write saves the status write that would otherwise follow only to bump
/// `observedGeneration`. Any other change (a user's edit between read and write) makes the gap
/// larger, and the old generation stays.
pub fn advanced_by_own_write(before: Option<i64>, after: Option<i64>) -> Option<(i64, i64)> {
    match (before, after) {
        (Some(b), Some(a)) if a == b + 1 => Some((b, a)),
        _ => None,
    }
}

/// After a reconcile's own spec write moved the object from generation `before` to `after`
/// (see [`advanced_by_own_write`]), the status it writes next records `after`: its conditions
/// that observed `before`, and its `observedGeneration` if it did.
pub fn observe_own_write(
    list: &mut [Condition],
    observed: &mut Option<i64>,
    before: Option<i64>,
    after: Option<i64>,
) {
    let Some((from, to)) = advanced_by_own_write(before, after) else {
        return;
    };
    for c in list
        .iter_mut()
        .filter(|c| c.observed_generation == Some(from))
    {
        c.observed_generation = Some(to);
    }
    if *observed == Some(from) {
        *observed = Some(to);
    }
}

/// Sets condition `type_` in `list`, keeping its transition time when the status is unchanged.
pub fn set(
    list: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let c = updated(list, type_, status, reason, message, generation);
    match list.iter_mut().find(|c| c.type_ == type_) {
        Some(old) => *old = c,
        None => list.push(c),
    }
}

/// Sets `Paused`: True with `message` when paused, else False (`NotPaused`).
pub fn set_paused(list: &mut Vec<Condition>, paused: bool, message: &str, generation: Option<i64>) {
    if paused {
        set(
            list,
            types::PAUSED,
            "True",
            types::PAUSED,
            message,
            generation,
        );
    } else {
        set(
            list,
            types::PAUSED,
            "False",
            reasons::NOT_PAUSED,
            "",
            generation,
        );
    }
}

/// Takes the conditions of `types`, which other controllers own, from `latest` into `list`: a
/// status written again after a conflict keeps their latest, whatever this reconcile read.
pub fn keep_foreign(list: &mut Vec<Condition>, latest: &[Condition], types: &[&str]) {
    list.retain(|c| !types.contains(&c.type_.as_str()));
    list.extend(
        latest
            .iter()
            .filter(|c| types.contains(&c.type_.as_str()))
            .cloned(),
    );
}

pub fn is_true(list: &[Condition], type_: &str) -> bool {
    list.iter().any(|c| c.type_ == type_ && c.status == "True")
}

/// A summary condition (Cluster `Available`, Machine `Ready`): True once every `required`
/// condition is True and every gate is at its wanted status, and never while `deleting`. The
/// message says what it still waits for. Returns whether it is True.
pub struct Summary<'a> {
    /// The summary's type; it is also its reason when True.
    pub type_: &'a str,
    /// Its reason when False.
    pub false_reason: &'a str,
    pub required: &'a [&'a str],
    /// What is summarized, for the deletion message ("Cluster", "Machine").
    pub noun: &'a str,
}

impl Summary<'_> {
    pub fn set<'g>(
        &self,
        list: &mut Vec<Condition>,
        gates: impl Iterator<Item = (&'g str, Option<&'g str>)>,
        deleting: bool,
        generation: Option<i64>,
    ) -> bool {
        let missing = not_met(list, self.required, gates);
        let ok = !deleting && missing.is_empty();
        let message = if deleting {
            format!("the {} is being deleted", self.noun)
        } else if missing.is_empty() {
            String::new()
        } else {
            format!("not yet: {}", missing.join(", "))
        };
        let reason = if ok { self.type_ } else { self.false_reason };
        set(
            list,
            self.type_,
            status_str(ok),
            reason,
            &message,
            generation,
        );
        ok
    }
}

/// The conditions a summary (Cluster `Available`, Machine `Ready`) still waits for: the
/// `required` ones that are not True, and the user's gates (`(type, polarity)`) not at their
/// wanted status.
pub fn not_met<'a>(
    list: &[Condition],
    required: &[&str],
    gates: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Vec<String> {
    let mut missing: Vec<String> = required
        .iter()
        .filter(|t| !is_true(list, t))
        .map(|t| t.to_string())
        .collect();
    for (t, polarity) in gates {
        if is_true(list, t) != (polarity != Some("Negative")) {
            missing.push(t.to_string());
        }
    }
    missing
}

/// A mirror's fallback from a contract flag: True `Ready` or False `NotReady`, no message.
pub fn flag_fallback(ok: bool) -> (bool, &'static str, &'static str) {
    (ok, if ok { types::READY } else { reasons::NOT_READY }, "")
}

/// Mirrors a provider condition into `list` as `as_type`; without one, uses `fallback`.
pub fn mirror(
    list: &mut Vec<Condition>,
    source: Option<Condition>,
    as_type: &str,
    fallback: (bool, &str, &str),
    generation: Option<i64>,
) {
    match source {
        Some(c) => {
            let reason = if c.reason.is_empty() {
                if c.status == "True" {
                    types::READY
                } else {
                    reasons::NOT_READY
                }
                .to_string()
            } else {
                c.reason
            };
            set(list, as_type, &c.status, &reason, &c.message, generation)
        }
        None => set(
            list,
            as_type,
            status_str(fallback.0),
            fallback.1,
            fallback.2,
            generation,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_one_line() {
        assert_eq!(
            one_line("bad magic number - expected=[\n    0x0,\n    0x61,\n]\n"),
            "bad magic number - expected=[ 0x0, 0x61, ]"
        );
        let c = updated(&[], "Validated", "False", "Invalid", "a\n  b", None);
        assert_eq!(c.message, "a b");
    }

    #[test]
    fn transition_time_survives_an_unchanged_status() {
        let mut l = vec![];
        set(&mut l, "Ready", "False", "A", "", None);
        l[0].last_transition_time = "2020-01-01T00:00:00Z".into();
        set(&mut l, "Ready", "False", "B", "m", None);
        assert_eq!(l[0].last_transition_time, "2020-01-01T00:00:00Z");
        assert_eq!(l[0].reason, "B");
        set(&mut l, "Ready", "True", "B", "m", None);
        assert_ne!(l[0].last_transition_time, "2020-01-01T00:00:00Z");
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn only_a_reconciles_own_write_advances_the_generation() {
        assert_eq!(advanced_by_own_write(Some(1), Some(2)), Some((1, 2)));
        // Someone else changed the spec too, or the write changed none of it.
        assert_eq!(advanced_by_own_write(Some(1), Some(3)), None);
        assert_eq!(advanced_by_own_write(Some(1), Some(1)), None);
        assert_eq!(advanced_by_own_write(None, Some(1)), None);
        let mut l = vec![];
        set(&mut l, "Ready", "True", "A", "", Some(1));
        set(&mut l, "Paused", "False", "A", "", None);
        set(&mut l, "Other", "False", "A", "", Some(5));
        let mut observed = Some(1);
        observe_own_write(&mut l, &mut observed, Some(1), Some(2));
        let gens: Vec<_> = l.iter().map(|c| c.observed_generation).collect();
        assert_eq!(gens, [Some(2), None, Some(5)]);
        assert_eq!(observed, Some(2));
        // A status that had not observed the old generation (a failed reconcile) stays behind.
        let mut observed = Some(0);
        observe_own_write(&mut l, &mut observed, Some(2), Some(3));
        assert_eq!(observed, Some(0));
        // Someone else's write in between: nothing moves.
        observe_own_write(&mut l, &mut observed, Some(3), Some(5));
        assert_eq!(l[0].observed_generation, Some(3));
    }
}
