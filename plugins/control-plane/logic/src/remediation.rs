//! Which unhealthy control-plane Machine to replace, and when, as KubeadmControlPlane's
//! `reconcileUnhealthyMachines` decides it (`capi-lifecycle.md` §5.7).
//!
//! A MachineHealthCheck marks a Machine (`HealthCheckSucceeded=False`, `OwnerRemediated=False`);
//! the control plane remediates one at a time by deleting it, and its scale-up creates the
//! replacement. A replacement that fails again within `minHealthyPeriodSeconds` of the last
//! remediation is a retry: it waits `retryPeriodSeconds` and stops after `maxRetry`.
//!
//! Upstream keeps the remediation in progress in an annotation on the KubeadmControlPlane and
//! marks the replacement with another; capw keeps both in `status.lastRemediation`
//! (`{machine, time, retryCount}`, upstream's status field), and a Machine created at or after
//! that time is the replacement. Upstream's etcd checks (quorum, leadership) have nothing to
//! check on capw nodes, which run no etcd.

/// A control-plane Machine as remediation sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patient {
    pub name: String,
    /// `metadata.creationTimestamp`, in seconds since the epoch.
    pub created: i64,
    pub has_node: bool,
    pub deleting: bool,
    /// Marked by a MachineHealthCheck and not yet taken up by its owner.
    pub unhealthy: bool,
    /// `cluster.x-k8s.io/remediate-machine`: goes first.
    pub annotated: bool,
}

/// `spec.remediation`, with upstream's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Unlimited when unset.
    pub max_retry: Option<u32>,
    /// Default 0: retry at once.
    pub retry_period_seconds: i64,
    /// Default 3600.
    pub min_healthy_period_seconds: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_retry: None,
            retry_period_seconds: 0,
            min_healthy_period_seconds: 3600,
        }
    }
}

/// `status.lastRemediation`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Last {
    pub machine: String,
    /// Seconds since the epoch.
    pub time: i64,
    pub retry_count: u32,
}

/// What to do about unhealthy Machines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No Machine is waiting for remediation.
    Nothing,
    /// Delete this Machine now; record `retry_count`.
    Remediate { machine: String, retry_count: u32 },
    /// Not now: the message says what it waits for. Ask again in `after` seconds.
    Deferred {
        machine: String,
        message: String,
        after: i64,
    },
    /// Never, unless something changes (the message says what).
    Refused { machine: String, message: String },
}

/// Upstream's order: the `remediate-machine` annotation, then Machines without a Node, then the
/// oldest (the name breaks ties).
fn pick(unhealthy: &mut [&Patient]) {
    unhealthy.sort_by(|a, b| {
        (!a.annotated, a.has_node, a.created, &a.name).cmp(&(
            !b.annotated,
            b.has_node,
            b.created,
            &b.name,
        ))
    });
}

/// The decision for `machines` (every Machine the control plane owns, `desired` of them
/// wanted) at `now`.
pub fn decide(
    machines: &[Patient],
    desired: usize,
    initialized: bool,
    last: Option<&Last>,
    policy: &Policy,
    now: i64,
) -> Decision {
    let mut unhealthy: Vec<&Patient> = machines
        .iter()
        .filter(|m| m.unhealthy && !m.deleting)
        .collect();
    pick(&mut unhealthy);
    let Some(patient) = unhealthy.first() else {
        return Decision::Nothing;
    };
    let machine = patient.name.clone();
    let deferred = |message: String, after: i64| Decision::Deferred {
        machine: machine.clone(),
        message,
        after,
    };
    // In progress until its replacement exists: one Machine at a time.
    if let Some(l) = last
        && machines.iter().any(|m| m.name == l.machine)
    {
        return deferred(
            format!("waiting for Machine {} to be deleted", l.machine),
            5,
        );
    }
    let live = machines.iter().filter(|m| !m.deleting).count();
    if let Some(l) = last
        && live < desired
        && !machines.iter().any(|m| m.created >= l.time && !m.deleting)
    {
        return deferred(
            format!(
                "waiting for the replacement of Machine {}, remediated before",
                l.machine
            ),
            5,
        );
    }
    // Before initialization the first Machine may be remediated freely.
    if initialized {
        if live <= 1 {
            return Decision::Refused {
                machine,
                message: "a control plane with one Machine cannot be remediated: deleting it would lose the cluster; scale it to 3 replicas".into(),
            };
        }
        if machines.iter().any(|m| m.deleting) {
            return deferred(
                "waiting for control plane Machine deletion to complete before triggering remediation".into(),
                5,
            );
        }
        if let Some(p) = machines
            .iter()
            .find(|m| !m.deleting && !m.has_node && !m.unhealthy && m.name != patient.name)
        {
            return deferred(
                format!(
                    "waiting for control plane Machine {} provisioning to complete before triggering remediation",
                    p.name
                ),
                5,
            );
        }
    }
    // A replacement that failed soon after the last remediation is a retry.
    let mut retry_count = 0;
    if let Some(l) = last
        && patient.created >= l.time
        && now - l.time < policy.min_healthy_period_seconds
    {
        retry_count = l.retry_count + 1;
        if let Some(max) = policy.max_retry
            && retry_count > max
        {
            return Decision::Refused {
                machine,
                message: format!(
                    "remediation of this Machine was retried {} times (spec.remediation.maxRetry {max}) and its replacement failed again within {} s (spec.remediation.minHealthyPeriodSeconds); fix the cause, then delete the Machine by hand",
                    l.retry_count, policy.min_healthy_period_seconds
                ),
            };
        }
        let wait = l.time + policy.retry_period_seconds - now;
        if wait > 0 {
            return deferred(
                format!(
                    "waiting {wait} s more before retrying remediation (spec.remediation.retryPeriodSeconds {})",
                    policy.retry_period_seconds
                ),
                wait,
            );
        }
    }
    Decision::Remediate {
        machine,
        retry_count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, created: i64) -> Patient {
        Patient {
            name: name.into(),
            created,
            has_node: true,
            deleting: false,
            unhealthy: false,
            annotated: false,
        }
    }

    fn sick(mut p: Patient) -> Patient {
        p.unhealthy = true;
        p
    }

    const NOW: i64 = 100_000;

    #[test]
    fn the_annotated_then_nodeless_then_oldest_goes_first() {
        let mut no_node = sick(m("b", 50));
        no_node.has_node = false;
        let mut annotated = sick(m("c", 90));
        annotated.annotated = true;
        let cases = [
            (vec![sick(m("a", 10)), sick(m("b", 5)), m("c", 1)], "b"),
            (vec![sick(m("a", 10)), no_node.clone(), m("c", 1)], "b"),
            (vec![sick(m("a", 10)), no_node, annotated], "c"),
        ];
        for (machines, want) in cases {
            // Not initialized: no other rule applies.
            match decide(&machines, 3, false, None, &Policy::default(), NOW) {
                Decision::Remediate { machine, .. } => assert_eq!(machine, want),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn an_initialized_control_plane_remediates_only_when_it_is_safe() {
        let p = Policy::default();
        let mut deleting = m("c", 3);
        deleting.deleting = true;
        let mut provisioning = m("c", 3);
        provisioning.has_node = false;
        let cases = [
            (vec![m("a", 1), m("b", 2)], "nothing"),
            (vec![sick(m("a", 1))], "refused"),
            (vec![sick(m("a", 1)), m("b", 2), deleting], "deferred"),
            (vec![sick(m("a", 1)), m("b", 2), provisioning], "deferred"),
            (vec![sick(m("a", 1)), m("b", 2), m("c", 3)], "remediate"),
        ];
        for (machines, want) in cases {
            let got = match decide(&machines, 3, true, None, &p, NOW) {
                Decision::Nothing => "nothing",
                Decision::Refused { .. } => "refused",
                Decision::Deferred { .. } => "deferred",
                Decision::Remediate { .. } => "remediate",
            };
            assert_eq!(got, want, "{machines:?}");
        }
        // Before initialization, the only Machine may go.
        assert!(matches!(
            decide(&[sick(m("a", 1))], 3, false, None, &p, NOW),
            Decision::Remediate { .. }
        ));
    }

    #[test]
    fn one_at_a_time_until_the_replacement_exists() {
        let last = Last {
            machine: "a".into(),
            time: NOW - 10,
            retry_count: 0,
        };
        let p = Policy::default();
        // The remediated Machine is still there.
        let machines = [sick(m("a", 1)), sick(m("b", 2)), m("c", 3)];
        assert!(matches!(
            decide(&machines, 3, true, Some(&last), &p, NOW),
            Decision::Deferred { .. }
        ));
        // Gone, but no replacement yet.
        let machines = [sick(m("b", 2)), m("c", 3)];
        assert!(matches!(
            decide(&machines, 3, true, Some(&last), &p, NOW),
            Decision::Deferred { .. }
        ));
        // The replacement is here: b, older than the last remediation, is a first attempt.
        let machines = [sick(m("b", 2)), m("c", 3), m("d", NOW - 5)];
        assert_eq!(
            decide(&machines, 3, true, Some(&last), &p, NOW),
            Decision::Remediate {
                machine: "b".into(),
                retry_count: 0
            }
        );
    }

    #[test]
    fn a_replacement_failing_soon_is_a_retry_with_a_period_and_a_limit() {
        let machines = [m("b", 2), m("c", 3), sick(m("d", NOW - 50))];
        let last = |retry_count| Last {
            machine: "a".into(),
            time: NOW - 60,
            retry_count,
        };
        let policy = |max_retry, retry_period_seconds| Policy {
            max_retry,
            retry_period_seconds,
            min_healthy_period_seconds: 3600,
        };
        let cases = [
            // Unlimited, at once: retry 1.
            (policy(None, 0), last(0), Some(1)),
            // Within the retry period: wait.
            (policy(None, 120), last(0), None),
            // Past it.
            (policy(None, 30), last(2), Some(3)),
            // maxRetry 2 allows two retries, not a third.
            (policy(Some(2), 0), last(1), Some(2)),
            (policy(Some(2), 0), last(2), None),
        ];
        for (p, l, want) in cases {
            let got = decide(&machines, 3, true, Some(&l), &p, NOW);
            match (want, &got) {
                (Some(n), Decision::Remediate { retry_count, .. }) => assert_eq!(*retry_count, n),
                (None, Decision::Deferred { .. } | Decision::Refused { .. }) => {}
                _ => panic!("{p:?} {l:?}: {got:?}"),
            }
        }
        // Healthy for longer than minHealthyPeriod: a new first attempt.
        let old = Last {
            machine: "a".into(),
            time: NOW - 4000,
            retry_count: 5,
        };
        let machines = [m("b", 2), m("c", 3), sick(m("d", NOW - 3990))];
        assert_eq!(
            decide(&machines, 3, true, Some(&old), &policy(Some(1), 0), NOW),
            Decision::Remediate {
                machine: "d".into(),
                retry_count: 0
            }
        );
        // maxRetry reached is refused with a message naming the fields.
        match decide(&machines[..2], 3, true, None, &Policy::default(), NOW) {
            Decision::Nothing => {}
            other => panic!("{other:?}"),
        }
        match decide(
            &[m("b", 2), m("c", 3), sick(m("d", NOW - 50))],
            3,
            true,
            Some(&last(2)),
            &policy(Some(2), 0),
            NOW,
        ) {
            Decision::Refused { message, .. } => {
                assert!(message.contains("spec.remediation.maxRetry 2"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }
}
