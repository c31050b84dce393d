//! The MachineDeployment rollout arithmetic (`capi-lifecycle.md` §3.5–3.6) over replica
//! counts only. The controller feeds it what the MachineSets report and applies what it
//! returns; the golden rollout simulations (`simulation.rs`) run the very same functions
//! against a fake MachineSet controller, step by step.

use capw_api::common::{IntOrPercentError, IntOrString};
use capw_api::machinedeployment::MachineDeploymentSpec;

/// The counts of one MachineSet the arithmetic works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetCounts {
    pub name: String,
    /// `spec.replicas`.
    pub spec: i32,
    /// `status.replicas`: every Machine of the set, deleting ones included.
    pub current: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// Machines of the set being deleted (OnDelete follows them).
    pub deleting: i32,
}

/// The resolved rollout strategy of a MachineDeployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// `maxSurge` and `maxUnavailable` resolved against `replicas`.
    RollingUpdate {
        surge: i32,
        unavailable: i32,
    },
    OnDelete,
}

pub const ROLLING_UPDATE: &str = "RollingUpdate";
pub const ON_DELETE: &str = "OnDelete";

/// Why a MachineDeployment's rollout settings cannot be used; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RolloutError {
    #[error("spec.rollout.strategy.rollingUpdate.{field}: {source}")]
    Fencepost {
        field: &'static str,
        source: IntOrPercentError,
    },
    #[error(
        "spec.rollout.strategy.type: unsupported value {0:?}: supported values: \"RollingUpdate\", \"OnDelete\""
    )]
    Type(String),
}

/// Upstream's `ResolveFenceposts`: surge rounds up, unavailable rounds down, and when both
/// come to 0 unavailable becomes 1 so a rollout can always make progress.
pub fn resolve_fenceposts(
    max_surge: &IntOrString,
    max_unavailable: &IntOrString,
    desired: i32,
) -> Result<(i32, i32), RolloutError> {
    let surge = max_surge
        .scaled(desired, true)
        .map_err(|source| RolloutError::Fencepost {
            field: "maxSurge",
            source,
        })?;
    let unavailable =
        max_unavailable
            .scaled(desired, false)
            .map_err(|source| RolloutError::Fencepost {
                field: "maxUnavailable",
                source,
            })?;
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

impl Strategy {
    /// The strategy of `spec`, with upstream's defaults (RollingUpdate, maxSurge 1,
    /// maxUnavailable 0).
    pub fn of(spec: &MachineDeploymentSpec) -> Result<Strategy, RolloutError> {
        let strategy = spec
            .rollout
            .as_ref()
            .and_then(|r| r.strategy.clone())
            .unwrap_or_default();
        match strategy.type_.as_deref().unwrap_or(ROLLING_UPDATE) {
            ROLLING_UPDATE => {
                let ru = strategy.rolling_update.unwrap_or_default();
                let (surge, unavailable) = resolve_fenceposts(
                    &ru.max_surge.unwrap_or(IntOrString::Int(1)),
                    &ru.max_unavailable.unwrap_or(IntOrString::Int(0)),
                    spec.replicas.unwrap_or(1),
                )?;
                Ok(Strategy::RollingUpdate { surge, unavailable })
            }
            ON_DELETE => Ok(Strategy::OnDelete),
            other => Err(RolloutError::Type(other.to_string())),
        }
    }

    /// Upstream's `MaxUnavailable`: 0 for OnDelete or no replicas, and never above replicas.
    pub fn max_unavailable(&self, replicas: i32) -> i32 {
        match self {
            Strategy::RollingUpdate { unavailable, .. } if replicas > 0 => {
                (*unavailable).min(replicas)
            }
            _ => 0,
        }
    }

    pub fn max_surge(&self) -> i32 {
        match self {
            Strategy::RollingUpdate { surge, .. } => *surge,
            Strategy::OnDelete => 0,
        }
    }
}

/// Machines that exist or are wanted: `max(spec, current)` per set, so Machines still being
/// deleted keep counting against the surge.
pub fn total_machines(sets: &[SetCounts]) -> i32 {
    sets.iter().map(|s| s.spec.max(s.current)).sum()
}

/// Upstream's `NewMSNewReplicas`: the size the new MachineSet may grow to now. `all` holds
/// every set, the new one included.
pub fn new_set_replicas(
    strategy: Strategy,
    replicas: i32,
    all: &[SetCounts],
    new_spec: i32,
) -> i32 {
    if new_spec >= replicas {
        return replicas;
    }
    let ceiling = match strategy {
        Strategy::RollingUpdate { surge, .. } => replicas + surge,
        Strategy::OnDelete => replicas,
    };
    let current = total_machines(all);
    if current >= ceiling {
        return new_spec;
    }
    new_spec + (ceiling - current).min(replicas - new_spec)
}

/// One reconcile's decisions: new `spec.replicas` per MachineSet (only the ones that change),
/// and the old sets to delete because the rollout is complete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub scale: Vec<(String, i32)>,
    pub delete: Vec<String>,
    /// Old sets that must not create Machines any more (OnDelete).
    pub disable_create: Vec<String>,
}

impl Plan {
    fn set(&mut self, name: &str, to: i32) {
        self.scale.retain(|(n, _)| n != name);
        self.scale.push((name.to_string(), to));
    }
}

/// One rollout step. `new` is the MachineSet matching the template (created by the caller
/// with [`new_set_replicas`] when missing); `old` the others, oldest first.
pub fn plan(strategy: Strategy, replicas: i32, new: &SetCounts, old: &[SetCounts]) -> Plan {
    let mut plan = Plan::default();
    let mut new = new.clone();
    let mut old = old.to_vec();
    let all = |new: &SetCounts, old: &[SetCounts]| {
        let mut v = old.to_vec();
        v.push(new.clone());
        v
    };
    let target = new_set_replicas(strategy, replicas, &all(&new, &old), new.spec);
    if target != new.spec {
        new.spec = target;
        plan.set(&new.name, target);
    }
    match strategy {
        Strategy::RollingUpdate { .. } => {
            scale_down_rolling(strategy, replicas, &new, &mut old, &mut plan)
        }
        Strategy::OnDelete => scale_down_on_delete(replicas, &new, &mut old, &mut plan),
    }
    let everything = all(&new, &old);
    let complete = new.spec == replicas
        && new.current == replicas
        && new.available == replicas
        && everything.iter().map(|s| s.current).sum::<i32>() == replicas
        && everything.iter().map(|s| s.available).sum::<i32>() == replicas;
    if complete {
        plan.delete = old
            .iter()
            .filter(|s| s.spec == 0 && s.current == 0)
            .map(|s| s.name.clone())
            .collect();
    }
    plan
}

/// `reconcileOldMachineSets`: first the unavailable replicas of old sets, then available
/// ones while availability stays at `replicas - maxUnavailable` or above. Unavailable Machines
/// of the new set never pay for old scale-downs, so a broken template cannot drain the pool.
fn scale_down_rolling(
    strategy: Strategy,
    replicas: i32,
    new: &SetCounts,
    old: &mut [SetCounts],
    plan: &mut Plan,
) {
    if old.iter().map(|s| s.spec).sum::<i32>() == 0 {
        return;
    }
    let all_spec: i32 = old.iter().map(|s| s.spec).sum::<i32>() + new.spec;
    let min_available = replicas - strategy.max_unavailable(replicas);
    let new_unavailable = (new.spec - new.available).max(0);
    let max_scaled_down = all_spec - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return;
    }
    let mut cleaned = 0;
    for s in old.iter_mut() {
        if cleaned >= max_scaled_down {
            break;
        }
        // Upstream errors when spec < available (cluster-api#8987); a set whose Machines
        // are all available simply has nothing to clean up.
        let unhealthy = s.spec - s.available;
        if s.spec == 0 || unhealthy <= 0 {
            continue;
        }
        let down = unhealthy.min(max_scaled_down - cleaned);
        s.spec -= down;
        cleaned += down;
        plan.set(&s.name, s.spec);
    }
    let available: i32 = old.iter().map(|s| s.available).sum::<i32>() + new.available;
    if available <= min_available {
        return;
    }
    let budget = available - min_available;
    let mut done = 0;
    for s in old.iter_mut() {
        if done >= budget {
            break;
        }
        if s.spec == 0 {
            continue;
        }
        let down = s.spec.min(budget - done);
        s.spec -= down;
        done += down;
        plan.set(&s.name, s.spec);
    }
}

/// `reconcileOldMachineSetsOnDelete`: old sets follow the Machines users delete and create
/// none; any excess over `replicas` comes off them in order.
fn scale_down_on_delete(replicas: i32, new: &SetCounts, old: &mut [SetCounts], plan: &mut Plan) {
    let mut excess = old.iter().map(|s| s.spec).sum::<i32>() + new.spec - replicas;
    for s in old.iter_mut() {
        if s.spec <= 0 {
            continue;
        }
        plan.disable_create.push(s.name.clone());
        let remaining = (s.current - s.deleting).max(0);
        if remaining < s.spec {
            excess -= s.spec - remaining;
            s.spec = remaining;
            plan.set(&s.name, s.spec);
        }
    }
    for s in old.iter_mut() {
        if excess <= 0 {
            break;
        }
        if s.spec <= 0 {
            continue;
        }
        let down = s.spec.min(excess);
        s.spec -= down;
        excess -= down;
        plan.set(&s.name, s.spec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(name: &str, spec: i32, current: i32, available: i32) -> SetCounts {
        SetCounts {
            name: name.into(),
            spec,
            current,
            available,
            deleting: 0,
        }
    }

    const S1U0: Strategy = Strategy::RollingUpdate {
        surge: 1,
        unavailable: 0,
    };

    /// Upstream's `TestResolveFenceposts` rows.
    #[test]
    fn fenceposts() {
        let p = |s: &str| IntOrString::String(s.into());
        assert_eq!(resolve_fenceposts(&p("0%"), &p("0%"), 0), Ok((0, 1)));
        assert_eq!(resolve_fenceposts(&p("39%"), &p("39%"), 10), Ok((4, 3)));
        assert_eq!(resolve_fenceposts(&p("25%"), &p("25%"), 4), Ok((1, 1)));
        assert_eq!(
            resolve_fenceposts(&IntOrString::Int(0), &IntOrString::Int(0), 3),
            Ok((0, 1))
        );
        let err = resolve_fenceposts(&p("1"), &p("25%"), 4).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("spec.rollout.strategy.rollingUpdate.maxSurge"),
            "{err}"
        );
        assert!(resolve_fenceposts(&p("2"), &p("abc%"), 4).is_err());
    }

    /// Upstream's `TestReconcileNewMachineSet` and `TestReconcileOldMachineSets` rows.
    #[test]
    fn single_steps() {
        // Scale up: 0 -> 2.
        let p = plan(S1U0, 2, &ms("new", 0, 0, 0), &[]);
        assert_eq!(p.scale, vec![("new".into(), 2)]);
        // Does not go above maxSurge (3+2): the new set goes 1 -> 2 while the old holds 3.
        let s3u0 = Strategy::RollingUpdate {
            surge: 2,
            unavailable: 0,
        };
        let p = plan(s3u0, 3, &ms("new", 1, 1, 0), &[ms("old", 3, 3, 3)]);
        assert_eq!(p.scale[0], ("new".into(), 2));
        // Accounts for deleting Machines: old spec 0 with 1 still there, surge 0 -> new stays 0.
        let s0u1 = Strategy::RollingUpdate {
            surge: 0,
            unavailable: 1,
        };
        let p = plan(s0u1, 1, &ms("new", 0, 0, 0), &[ms("old", 0, 1, 0)]);
        assert!(p.scale.is_empty(), "{p:?}");
        // Does not scale down when above maxUnavailable: R=10, unavail 2, surge 3, old 8 stays.
        let s3u2 = Strategy::RollingUpdate {
            surge: 3,
            unavailable: 2,
        };
        let p = plan(s3u2, 10, &ms("new", 5, 5, 0), &[ms("old", 8, 8, 8)]);
        assert!(p.scale.iter().all(|(n, _)| n != "old"), "{p:?}");
        // Scale down old when all new available.
        let p = plan(S1U0, 3, &ms("new", 3, 3, 3), &[ms("old", 1, 1, 1)]);
        assert_eq!(p.scale, vec![("old".into(), 0)]);
        // Unavailable old replicas go first, even without spare availability.
        let p = plan(S1U0, 3, &ms("new", 1, 1, 1), &[ms("old", 3, 3, 2)]);
        assert_eq!(p.scale, vec![("old".into(), 2)]);
        // A complete rollout deletes the empty old sets.
        let p = plan(S1U0, 3, &ms("new", 3, 3, 3), &[ms("old", 0, 0, 0)]);
        assert_eq!(p.delete, vec!["old".to_string()]);
        let p = plan(S1U0, 3, &ms("new", 3, 3, 2), &[ms("old", 0, 0, 0)]);
        assert!(p.delete.is_empty());
    }

    #[test]
    fn on_delete_follows_deletions_and_never_exceeds_replicas() {
        let mut old = ms("old", 3, 3, 3);
        let p = plan(Strategy::OnDelete, 3, &ms("new", 0, 0, 0), &[old.clone()]);
        assert!(p.scale.is_empty(), "{p:?}");
        assert_eq!(p.disable_create, vec!["old".to_string()]);
        old.deleting = 1;
        let p = plan(Strategy::OnDelete, 3, &ms("new", 0, 0, 0), &[old.clone()]);
        assert_eq!(p.scale, vec![("old".into(), 2)]);
        // The Machine is gone: only now does the new set grow.
        let p = plan(
            Strategy::OnDelete,
            3,
            &ms("new", 0, 0, 0),
            &[ms("old", 2, 2, 2)],
        );
        assert_eq!(p.scale, vec![("new".into(), 1)]);
    }
}
