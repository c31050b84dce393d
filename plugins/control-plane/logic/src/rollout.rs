//! What the control plane does next with its Machines, as KubeadmControlPlane decides it: one
//! Machine at a time, and only while the control plane is healthy (every Machine has its Node
//! and none is being deleted).
//!
//! - Fewer Machines than replicas: create one, in the failure domain with the fewest.
//! - More: delete one: outdated first, from the failure domain with the most, oldest first.
//! - As many, some outdated (another `version` or another machine template than the spec's):
//!   with `maxSurge` 1 create one first (3→4→3), with `maxSurge` 0 delete one first (3→2→3).

/// A control-plane Machine as the decision needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// `metadata.creationTimestamp` (RFC 3339, so it sorts by time).
    pub created: String,
    pub version: Option<String>,
    /// The machine template it was cloned from, when the host recorded it.
    pub template: Option<String>,
    pub failure_domain: Option<String>,
    pub has_node: bool,
    pub deleting: bool,
}

/// What the spec asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub replicas: u32,
    pub version: Option<String>,
    pub template: String,
    /// 0 or 1.
    pub max_surge: u32,
    /// `rollout.after` once it has passed, as the API server writes times (RFC 3339, seconds,
    /// `Z`): Machines created before it are outdated.
    pub rollout_after: Option<String>,
}

/// The next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Create one Machine, in this failure domain.
    Create(Option<String>),
    /// Delete this Machine.
    Delete(String),
    /// Nothing until the control plane is healthy again.
    WaitForHealthy,
    /// Nothing to do.
    Steady,
}

/// Whether `m` no longer matches the spec: another version, cloned from another template, or
/// created before a `rollout.after` that has passed. A Machine without a recorded template is
/// taken as cloned from the current one.
pub fn outdated(d: &Desired, m: &Member) -> bool {
    m.version != d.version
        || m.template.as_ref().is_some_and(|t| *t != d.template)
        || d.rollout_after
            .as_ref()
            .is_some_and(|after| m.created < *after)
}

/// The failure domain for a new Machine: the one with the fewest live Machines, the first
/// listed on a tie.
fn domain_for_new(domains: &[String], live: &[&Member]) -> Option<String> {
    domains
        .iter()
        .min_by_key(|fd| {
            live.iter()
                .filter(|m| m.failure_domain.as_deref() == Some(fd.as_str()))
                .count()
        })
        .cloned()
}

/// The Machine to delete: among the outdated ones if any (else all), those in the failure
/// domain holding the most live Machines, and of those the oldest.
fn to_delete(d: &Desired, live: &[&Member]) -> Option<String> {
    let outdated: Vec<&&Member> = live.iter().filter(|m| outdated(d, m)).collect();
    let candidates: Vec<&&Member> = if outdated.is_empty() {
        live.iter().collect()
    } else {
        outdated
    };
    let in_domain = |fd: &Option<String>| live.iter().filter(|m| m.failure_domain == *fd).count();
    let busiest = candidates
        .iter()
        .map(|m| in_domain(&m.failure_domain))
        .max()?;
    candidates
        .into_iter()
        .filter(|m| in_domain(&m.failure_domain) == busiest)
        .min_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)))
        .map(|m| m.name.clone())
}

/// The next step for `members` (every owned Machine, deleting ones included), given the
/// control-plane failure domains.
pub fn next_step(d: &Desired, members: &[Member], domains: &[String]) -> Step {
    let live: Vec<&Member> = members.iter().filter(|m| !m.deleting).collect();
    let count = live.len() as u32;
    let healthy = live.len() == members.len() && live.iter().all(|m| m.has_node);
    let stale = live.iter().any(|m| outdated(d, m));
    let grow = count < d.replicas || (count == d.replicas && stale && d.max_surge > 0);
    let shrink = count > d.replicas || (count == d.replicas && stale && d.max_surge == 0);
    if !grow && !shrink {
        return Step::Steady;
    }
    if !healthy {
        return Step::WaitForHealthy;
    }
    if grow {
        Step::Create(domain_for_new(domains, &live))
    } else {
        to_delete(d, &live).map_or(Step::Steady, Step::Delete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desired(replicas: u32, max_surge: u32) -> Desired {
        Desired {
            replicas,
            version: Some("v1.34.0".into()),
            template: "t2".into(),
            max_surge,
            rollout_after: None,
        }
    }

    /// Runs the decision step by step as the host would carry it out (a new Machine gets its
    /// Node at the next step, a deleted one is gone at the next step), and checks upstream's
    /// invariants at every step: never more than replicas + maxSurge Machines, never fewer
    /// than replicas − 1 healthy, and the roll ends with every Machine up to date.
    fn roll(replicas: u32, max_surge: u32, domains: &[&str]) -> Vec<u32> {
        let d = desired(replicas, max_surge);
        let domains: Vec<String> = domains.iter().map(|s| s.to_string()).collect();
        let mut members: Vec<Member> = (0..replicas)
            .map(|i| Member {
                name: format!("old-{i}"),
                created: format!("2026-01-01T00:00:0{i}Z"),
                version: Some("v1.33.0".into()),
                template: Some("t1".into()),
                failure_domain: (!domains.is_empty())
                    .then(|| domains[i as usize % domains.len()].clone()),
                has_node: true,
                deleting: false,
            })
            .collect();
        let mut counts = vec![members.len() as u32];
        for step in 0..100 {
            members.retain(|m| !m.deleting);
            for m in &mut members {
                m.has_node = true;
            }
            match next_step(&d, &members, &domains) {
                Step::Steady => {
                    assert!(members.iter().all(|m| !outdated(&d, m)), "{members:?}");
                    assert_eq!(members.len() as u32, replicas);
                    return counts;
                }
                Step::WaitForHealthy => panic!("healthy at every step here: {members:?}"),
                Step::Create(fd) => members.push(Member {
                    name: format!("new-{step}"),
                    created: format!("2026-02-01T00:00:{step:02}Z"),
                    version: d.version.clone(),
                    template: Some(d.template.clone()),
                    failure_domain: fd,
                    has_node: false,
                    deleting: false,
                }),
                Step::Delete(name) => {
                    let m = members.iter_mut().find(|m| m.name == name).unwrap();
                    m.deleting = true;
                }
            }
            let total = members.len() as u32;
            let healthy = members.iter().filter(|m| m.has_node && !m.deleting).count() as u32;
            assert!(
                total <= replicas + max_surge,
                "step {step}: {total} Machines"
            );
            assert!(healthy + 1 >= replicas, "step {step}: {healthy} healthy");
            counts.push(members.iter().filter(|m| !m.deleting).count() as u32);
        }
        panic!("no convergence: {members:?}")
    }

    #[test]
    fn max_surge_one_goes_three_four_three() {
        assert_eq!(roll(3, 1, &[]), vec![3, 4, 3, 4, 3, 4, 3]);
        assert_eq!(roll(1, 1, &[]), vec![1, 2, 1]);
    }

    #[test]
    fn max_surge_zero_goes_three_two_three() {
        assert_eq!(roll(3, 0, &[]), vec![3, 2, 3, 2, 3, 2, 3]);
    }

    #[test]
    fn rolls_keep_the_machines_spread_over_failure_domains() {
        for surge in [0, 1] {
            roll(3, surge, &["a", "b", "c"]);
        }
        let d = desired(3, 1);
        let m = |name: &str, fd: &str, created: &str| Member {
            name: name.into(),
            created: created.into(),
            version: Some("v1.33.0".into()),
            template: Some("t2".into()),
            failure_domain: Some(fd.into()),
            has_node: true,
            deleting: false,
        };
        // The oldest outdated Machine of the busiest domain goes first.
        let members = vec![
            m("a1", "a", "2026-01-01T00:00:01Z"),
            m("b1", "b", "2026-01-01T00:00:00Z"),
            m("b2", "b", "2026-01-01T00:00:02Z"),
            m("c1", "c", "2026-01-01T00:00:03Z"),
        ];
        let domains = ["a".to_string(), "b".into(), "c".into()];
        assert_eq!(next_step(&d, &members, &domains), Step::Delete("b1".into()));
        // A new Machine goes to the domain with the fewest.
        let members = vec![m("a1", "a", "1"), m("b1", "b", "2")];
        assert_eq!(
            next_step(&d, &members, &domains),
            Step::Create(Some("c".into()))
        );
    }

    #[test]
    fn nothing_moves_while_a_machine_lacks_its_node_or_is_being_deleted() {
        let d = desired(3, 1);
        let base = Member {
            name: "m".into(),
            created: "1".into(),
            version: Some("v1.33.0".into()),
            template: None,
            failure_domain: None,
            has_node: true,
            deleting: false,
        };
        let mut no_node = vec![base.clone(), base.clone(), base.clone()];
        no_node[1].has_node = false;
        assert_eq!(next_step(&d, &no_node, &[]), Step::WaitForHealthy);
        let mut deleting = vec![base.clone(), base.clone(), base.clone(), base.clone()];
        deleting[0].deleting = true;
        assert_eq!(next_step(&d, &deleting, &[]), Step::WaitForHealthy);
        // Up to date (no template recorded counts as the current one): steady.
        let current = Member {
            version: d.version.clone(),
            ..base
        };
        assert_eq!(
            next_step(&d, &[current.clone(), current.clone(), current], &[]),
            Step::Steady
        );
    }

    #[test]
    fn rollout_after_outdates_machines_created_before_it_once_it_has_passed() {
        let m = |created: &str| Member {
            name: "m".into(),
            created: created.into(),
            version: Some("v1.34.0".into()),
            template: Some("t2".into()),
            failure_domain: None,
            has_node: true,
            deleting: false,
        };
        let mut d = desired(3, 1);
        assert!(!outdated(&d, &m("2026-01-01T00:00:00Z")));
        d.rollout_after = Some("2026-06-01T00:00:00Z".into());
        assert!(outdated(&d, &m("2026-01-01T00:00:00Z")));
        assert!(!outdated(&d, &m("2026-06-01T00:00:00Z")));
        assert!(!outdated(&d, &m("2026-07-01T00:00:00Z")));
    }
}
