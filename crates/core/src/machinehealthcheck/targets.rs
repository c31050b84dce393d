//! The health verdict on one target Machine (`capi-lifecycle.md` §4.2), and the
//! short-circuit (§4.3), as pure functions of what the controller read.

use capw_api::common::IntOrString;
use capw_api::common::names::REMEDIATE_MACHINE_ANNOTATION;
use capw_api::contract::conditions::reasons;
use capw_api::machine::Machine;
use capw_api::machinehealthcheck::MachineHealthCheckChecks;
use kube::ResourceExt;

/// Upstream's default `nodeStartupTimeoutSeconds`.
pub const DEFAULT_NODE_STARTUP_TIMEOUT: i64 = 600;

/// A Node condition as the check reads it: type, status and when it last changed.
#[derive(Debug, Clone)]
pub struct NodeCondition {
    pub type_: String,
    pub status: String,
    pub since: i64,
}

/// What is known of the target's Node.
#[derive(Debug, Clone)]
pub enum NodeState {
    /// The Machine has no nodeRef yet.
    NotYet,
    /// The nodeRef names a Node the workload cluster does not have.
    Gone(String),
    Found(Vec<NodeCondition>),
    /// The workload cluster could not be read: nothing is concluded.
    Unknown,
}

/// What the Cluster says, as the check needs it: since when (Unix seconds) its infrastructure
/// is ready and its control plane initialized, if they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterState {
    pub infrastructure_ready: Option<i64>,
    pub control_plane_initialized: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Healthy,
    Unhealthy {
        reason: &'static str,
        message: String,
    },
    /// Not healthy yet, not unhealthy yet: look again in this many seconds.
    Pending(i64),
    /// Not evaluated (the cluster is not far enough, or the check is off).
    NotEvaluated,
}

impl Verdict {
    pub fn is_unhealthy(&self) -> bool {
        matches!(self, Verdict::Unhealthy { .. })
    }
}

fn seconds(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> i64 {
    t.as_ref().map(|t| t.0.as_second()).unwrap_or(0)
}

fn condition_since(m: &Machine, type_: &str) -> Option<i64> {
    m.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .and_then(|c| c.last_transition_time.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_second())
}

/// `needsRemediation`: the first rule that applies decides.
pub fn verdict(
    m: &Machine,
    node: &NodeState,
    cluster: ClusterState,
    checks: &MachineHealthCheckChecks,
    control_plane_machine: bool,
    now: i64,
) -> Verdict {
    if m.annotations().contains_key(REMEDIATE_MACHINE_ANNOTATION) {
        return Verdict::Unhealthy {
            reason: reasons::HAS_REMEDIATE_ANNOTATION,
            message: "Marked for remediation via cluster.x-k8s.io/remediate-machine annotation"
                .into(),
        };
    }
    if let NodeState::Gone(name) = node {
        return Verdict::Unhealthy {
            reason: reasons::NODE_DELETED,
            message: format!("Health check failed: Node {name} has been deleted"),
        };
    }
    if cluster.control_plane_initialized.is_none() && !control_plane_machine {
        return Verdict::NotEvaluated;
    }
    if cluster.infrastructure_ready.is_none() {
        return Verdict::NotEvaluated;
    }
    if m.metadata.deletion_timestamp.is_some() {
        return Verdict::NotEvaluated;
    }
    // The Machine's own conditions are checked whatever is known of its Node.
    let machine_recheck = match machine_checks(m, checks, now) {
        Ok(recheck) => recheck,
        Err(unhealthy) => return unhealthy,
    };
    match node_verdict(node, m, cluster, checks, now) {
        Verdict::Healthy => machine_recheck.map_or(Verdict::Healthy, Verdict::Pending),
        Verdict::Pending(r) => Verdict::Pending(machine_recheck.map_or(r, |m| m.min(r))),
        other => other,
    }
}

/// `unhealthyMachineConditions`: an unhealthy verdict, or when to look again.
fn machine_checks(
    m: &Machine,
    checks: &MachineHealthCheckChecks,
    now: i64,
) -> Result<Option<i64>, Verdict> {
    let mut recheck: Option<i64> = None;
    let have = m
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    for want in &checks.unhealthy_machine_conditions {
        let Some(c) = have
            .iter()
            .find(|c| c.type_ == want.type_ && c.status == want.status)
        else {
            continue;
        };
        let since = c
            .last_transition_time
            .parse::<jiff::Timestamp>()
            .map_or(now, |t| t.as_second());
        let held = now - since;
        let timeout = i64::from(want.timeout_seconds);
        if held > timeout {
            return Err(Verdict::Unhealthy {
                reason: reasons::UNHEALTHY_MACHINE,
                message: format!(
                    "Health check failed: Condition {} on Machine is reporting status {} with reason {} for more than {timeout}s",
                    want.type_, want.status, c.reason
                ),
            });
        }
        let left = timeout - held + 1;
        recheck = Some(recheck.map_or(left, |r| r.min(left)));
    }
    Ok(recheck)
}

/// The Node's part of the verdict: its startup timeout and `unhealthyNodeConditions`.
fn node_verdict(
    node: &NodeState,
    m: &Machine,
    cluster: ClusterState,
    checks: &MachineHealthCheckChecks,
    now: i64,
) -> Verdict {
    match node {
        NodeState::Unknown => Verdict::NotEvaluated,
        NodeState::Gone(_) => Verdict::NotEvaluated,
        NodeState::NotYet => {
            let timeout = checks
                .node_startup_timeout_seconds
                .map(i64::from)
                .unwrap_or(DEFAULT_NODE_STARTUP_TIMEOUT);
            if timeout == 0 {
                return Verdict::NotEvaluated;
            }
            let start = [
                seconds(&m.metadata.creation_timestamp),
                cluster.infrastructure_ready.unwrap_or(0),
                cluster.control_plane_initialized.unwrap_or(0),
                condition_since(
                    m,
                    capw_api::contract::conditions::types::INFRASTRUCTURE_READY,
                )
                .unwrap_or(0),
            ]
            .into_iter()
            .max()
            .unwrap_or(0);
            let waited = now - start;
            if waited > timeout {
                Verdict::Unhealthy {
                    reason: reasons::NODE_STARTUP_TIMEOUT,
                    message: format!(
                        "Health check failed: Node failed to report startup in {timeout}s"
                    ),
                }
            } else {
                Verdict::Pending(timeout - waited + 1)
            }
        }
        NodeState::Found(conditions) => {
            let mut recheck: Option<i64> = None;
            for want in &checks.unhealthy_node_conditions {
                let Some(c) = conditions
                    .iter()
                    .find(|c| c.type_ == want.type_ && c.status == want.status)
                else {
                    continue;
                };
                let held = now - c.since;
                let timeout = i64::from(want.timeout_seconds);
                if held > timeout {
                    return Verdict::Unhealthy {
                        reason: reasons::UNHEALTHY_NODE,
                        message: format!(
                            "Health check failed: Condition {} on Node is reporting status {} for more than {timeout}s",
                            want.type_, want.status
                        ),
                    };
                }
                let left = timeout - held + 1;
                recheck = Some(recheck.map_or(left, |r| r.min(left)));
            }
            match recheck {
                Some(r) => Verdict::Pending(r),
                None => Verdict::Healthy,
            }
        }
    }
}

/// Why `remediation.triggerIf` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.remediation.triggerIf.{field}: {message}")]
pub struct TriggerError {
    pub field: &'static str,
    pub message: String,
}

/// `isAllowedRemediation`: whether remediation may go on with `unhealthy` of `expected`
/// Machines not healthy, and how many more may be remediated; `Err` names the bad field.
pub fn allowed(
    trigger: Option<&capw_api::machinehealthcheck::TriggerIf>,
    expected: i32,
    unhealthy: i32,
) -> Result<(bool, i32, String), TriggerError> {
    if let Some(range) = trigger.and_then(|t| t.unhealthy_in_range.as_deref()) {
        let bad = || TriggerError {
            field: "unhealthyInRange",
            message: format!("{range:?} must read [min-max], with min <= max"),
        };
        let inner = range
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .ok_or_else(bad)?;
        let (lo, hi) = inner.split_once('-').ok_or_else(bad)?;
        let (lo, hi): (i32, i32) = (
            lo.parse().map_err(|_| bad())?,
            hi.parse().map_err(|_| bad())?,
        );
        if hi < lo {
            return Err(bad());
        }
        let ok = lo <= unhealthy && unhealthy <= hi;
        let message = format!(
            "Remediation is not allowed, the number of not started or unhealthy machines does not fall within the range (total: {expected}, unhealthy: {unhealthy}, unhealthyRange: {range})"
        );
        return Ok((ok, if ok { (hi - unhealthy).max(0) } else { 0 }, message));
    }
    let threshold = trigger
        .and_then(|t| t.unhealthy_less_than_or_equal_to.clone())
        .unwrap_or(IntOrString::String("100%".into()));
    let max = threshold
        .scaled(expected, false)
        .map_err(|e| TriggerError {
            field: "unhealthyLessThanOrEqualTo",
            message: e.to_string(),
        })?;
    let ok = unhealthy <= max;
    let message = format!(
        "Remediation is not allowed, the number of not started or unhealthy machines exceeds maxUnhealthy (total: {expected}, unhealthy: {unhealthy}, maxUnhealthy: {threshold})"
    );
    Ok((ok, if ok { (max - unhealthy).max(0) } else { 0 }, message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capw_api::machinehealthcheck::{
        TriggerIf, UnhealthyMachineCondition, UnhealthyNodeCondition,
    };
    use serde_json::json;

    const NOW: i64 = 1_800_000_000;

    fn machine(annotated: bool, created_ago: i64) -> Machine {
        let created = jiff::Timestamp::from_second(NOW - created_ago)
            .unwrap()
            .to_string();
        let mut v = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": "m", "creationTimestamp": created},
            "spec": {"clusterName": "c", "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "m"}},
        });
        if annotated {
            v["metadata"]["annotations"] = json!({REMEDIATE_MACHINE_ANNOTATION: ""});
        }
        serde_json::from_value(v).unwrap()
    }

    fn checks(startup: Option<i32>) -> MachineHealthCheckChecks {
        MachineHealthCheckChecks {
            node_startup_timeout_seconds: startup,
            unhealthy_node_conditions: vec![UnhealthyNodeCondition {
                type_: "Ready".into(),
                status: "Unknown".into(),
                timeout_seconds: 300,
            }],
            unhealthy_machine_conditions: vec![],
        }
    }

    const UP: ClusterState = ClusterState {
        infrastructure_ready: Some(NOW - 10_000),
        control_plane_initialized: Some(NOW - 10_000),
    };

    /// Upstream's `TestHealthCheckTargets` rows.
    #[test]
    fn health_check_targets() {
        let v = |m: &Machine, n: &NodeState, c: ClusterState, ch: &MachineHealthCheckChecks| {
            verdict(m, n, c, ch, false, NOW)
        };
        // Startup: before and after the timeout; disabled.
        assert_eq!(
            v(&machine(false, 100), &NodeState::NotYet, UP, &checks(None)),
            Verdict::Pending(501)
        );
        assert!(v(&machine(false, 700), &NodeState::NotYet, UP, &checks(None)).is_unhealthy());
        assert_eq!(
            v(
                &machine(false, 700),
                &NodeState::NotYet,
                UP,
                &checks(Some(0))
            ),
            Verdict::NotEvaluated
        );
        // The Node is gone.
        let gone = v(
            &machine(false, 100),
            &NodeState::Gone("n".into()),
            UP,
            &checks(None),
        );
        assert!(
            matches!(gone, Verdict::Unhealthy { reason, .. } if reason == reasons::NODE_DELETED)
        );
        // A condition before and after its timeout.
        let node = |since: i64| {
            NodeState::Found(vec![NodeCondition {
                type_: "Ready".into(),
                status: "Unknown".into(),
                since: NOW - since,
            }])
        };
        assert_eq!(
            v(&machine(false, 1000), &node(100), UP, &checks(None)),
            Verdict::Pending(201)
        );
        let bad = v(&machine(false, 1000), &node(400), UP, &checks(None));
        assert!(
            matches!(bad, Verdict::Unhealthy { reason, .. } if reason == reasons::UNHEALTHY_NODE)
        );
        let fine = NodeState::Found(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            since: NOW - 400,
        }]);
        assert_eq!(
            v(&machine(false, 1000), &fine, UP, &checks(None)),
            Verdict::Healthy
        );
        // The annotation wins over everything.
        assert!(v(&machine(true, 1), &fine, UP, &checks(None)).is_unhealthy());
        // A workers' check waits for the control plane.
        let early = ClusterState {
            control_plane_initialized: None,
            ..UP
        };
        assert_eq!(
            v(
                &machine(false, 700),
                &NodeState::NotYet,
                early,
                &checks(None)
            ),
            Verdict::NotEvaluated
        );
    }

    /// `unhealthyMachineConditions` (upstream v1.12+ `machineChecks`): a Machine condition held
    /// past its timeout is unhealthy whatever the Node says; before that it sets the recheck.
    #[test]
    fn machine_conditions() {
        let mut ch = checks(None);
        ch.unhealthy_machine_conditions = vec![UnhealthyMachineCondition {
            type_: "NodeReady".into(),
            status: "False".into(),
            timeout_seconds: 300,
        }];
        let with = |status: &str, ago: i64| {
            let mut m = machine(false, 1000);
            let since = jiff::Timestamp::from_second(NOW - ago).unwrap().to_string();
            m.status = serde_json::from_value(json!({"conditions": [
                {"type": "NodeReady", "status": status, "reason": "NodeNotReady", "lastTransitionTime": since}
            ]}))
            .unwrap();
            m
        };
        let fine = NodeState::Found(vec![]);
        let bad = verdict(&with("False", 400), &fine, UP, &ch, false, NOW);
        assert_eq!(
            bad,
            Verdict::Unhealthy {
                reason: reasons::UNHEALTHY_MACHINE,
                message: "Health check failed: Condition NodeReady on Machine is reporting status False with reason NodeNotReady for more than 300s".into(),
            }
        );
        assert_eq!(
            verdict(&with("False", 100), &fine, UP, &ch, false, NOW),
            Verdict::Pending(201)
        );
        assert_eq!(
            verdict(&with("True", 400), &fine, UP, &ch, false, NOW),
            Verdict::Healthy
        );
        // Checked before the Node has registered, too.
        assert!(
            verdict(&with("False", 400), &NodeState::NotYet, UP, &ch, false, NOW).is_unhealthy()
        );
    }

    /// Upstream's `TestIsAllowedRemediation` and `TestGetMaxUnhealthy` rows.
    #[test]
    fn short_circuit() {
        let t = |s: &str| TriggerIf {
            unhealthy_less_than_or_equal_to: Some(IntOrString::String(s.into())),
            unhealthy_in_range: None,
        };
        assert!(allowed(None, 3, 3).unwrap().0);
        assert_eq!(
            allowed(Some(&t("40%")), 5, 2).unwrap(),
            (true, 0, allowed(Some(&t("40%")), 5, 2).unwrap().2)
        );
        assert!(!allowed(Some(&t("40%")), 5, 3).unwrap().0);
        let n = TriggerIf {
            unhealthy_less_than_or_equal_to: Some(IntOrString::Int(1)),
            unhealthy_in_range: None,
        };
        let (ok, left, msg) = allowed(Some(&n), 3, 2).unwrap();
        assert!(
            !ok && left == 0 && msg.contains("exceeds maxUnhealthy"),
            "{msg}"
        );
        let r = |s: &str| TriggerIf {
            unhealthy_less_than_or_equal_to: None,
            unhealthy_in_range: Some(s.into()),
        };
        assert_eq!(allowed(Some(&r("[1-3]")), 5, 2).unwrap().1, 1);
        assert!(!allowed(Some(&r("[1-1]")), 5, 2).unwrap().0);
        assert!(!allowed(Some(&r("[2-3]")), 5, 1).unwrap().0);
        assert!(allowed(Some(&r("[3-1]")), 5, 2).is_err());
        assert!(allowed(Some(&t("x")), 5, 2).is_err());
    }
}
