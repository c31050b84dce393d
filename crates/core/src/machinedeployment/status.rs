//! `updateStatus` (`capi-lifecycle.md` §3.9): the counters are sums over the deployment's
//! MachineSets, the phase follows from desired against current, and the conditions:
//! `Available` (at least replicas − maxUnavailable available), `RollingOut`, scaling, and the
//! Machine aggregates.

use super::Scope;
use super::rollout::Strategy;
use crate::aggregate;
use capw_api::contract::conditions::{self, reasons, types};

pub const PHASE_SCALING_UP: &str = "ScalingUp";
pub const PHASE_SCALING_DOWN: &str = "ScalingDown";
pub const PHASE_RUNNING: &str = "Running";

pub(super) fn update(scope: &mut Scope, ok: bool) {
    let generation = scope.generation();
    let deleting = scope.md.metadata.deletion_timestamp.is_some();
    let now = jiff::Timestamp::now().as_second();
    let replicas = scope.replicas();
    let sum = |f: fn(&capw_api::machineset::MachineSetStatus) -> Option<i32>| -> Option<i32> {
        let vals: Vec<i32> = scope
            .sets
            .iter()
            .filter_map(|s| s.status.as_ref().and_then(f))
            .collect();
        (!vals.is_empty()).then(|| vals.iter().sum())
    };
    let mut s = scope.status.clone();
    s.selector = Some(scope.spec.selector.to_selector_string());
    s.replicas = sum(|s| s.replicas);
    s.ready_replicas = sum(|s| s.ready_replicas);
    s.available_replicas = sum(|s| s.available_replicas);
    s.up_to_date_replicas = sum(|s| s.up_to_date_replicas);
    let current = s.replicas.unwrap_or(0);
    s.phase = Some(
        if deleting || replicas < current {
            PHASE_SCALING_DOWN
        } else if replicas > current {
            PHASE_SCALING_UP
        } else {
            PHASE_RUNNING
        }
        .into(),
    );
    let machines = scope.machines.clone();
    let refs: Vec<&capw_api::machine::Machine> = machines.iter().map(|m| &**m).collect();
    // Available: replicas − maxUnavailable available Machines (all of them for OnDelete).
    let strategy = Strategy::of(&scope.spec).ok();
    let min_available = replicas - strategy.map_or(0, |st| st.max_unavailable(replicas));
    let available = s.available_replicas.unwrap_or(0);
    if deleting {
        conditions::set(
            &mut s.conditions,
            types::AVAILABLE,
            "False",
            reasons::NOT_AVAILABLE,
            "Deletion in progress",
            generation,
        );
    } else if s.available_replicas.is_none() && replicas > 0 {
        conditions::set(
            &mut s.conditions,
            types::AVAILABLE,
            "Unknown",
            reasons::WAITING_FOR_REPLICAS_SET,
            "",
            generation,
        );
    } else if available >= min_available {
        conditions::set(
            &mut s.conditions,
            types::AVAILABLE,
            "True",
            reasons::AVAILABLE,
            "",
            generation,
        );
    } else {
        let msg = format!("{available} available replicas, at least {min_available} required");
        conditions::set(
            &mut s.conditions,
            types::AVAILABLE,
            "False",
            reasons::NOT_AVAILABLE,
            &msg,
            generation,
        );
    }
    // RollingOut: any Machine the deployment selects not up to date.
    let outdated: Vec<&&capw_api::machine::Machine> = refs
        .iter()
        .filter(|m| {
            m.status.as_ref().is_some_and(|st| {
                st.conditions
                    .iter()
                    .any(|c| c.type_ == types::UP_TO_DATE && c.status == "False")
            })
        })
        .collect();
    if outdated.is_empty() {
        conditions::set(
            &mut s.conditions,
            types::ROLLING_OUT,
            "False",
            reasons::NOT_ROLLING_OUT,
            "",
            generation,
        );
    } else {
        let mut lines: Vec<String> = outdated
            .iter()
            .filter_map(|m| {
                m.status
                    .as_ref()?
                    .conditions
                    .iter()
                    .find(|c| c.type_ == types::UP_TO_DATE)
                    .map(|c| c.message.clone())
            })
            .flat_map(|msg| msg.lines().map(str::to_string).collect::<Vec<_>>())
            .collect();
        lines.sort_by_key(|l| (!l.starts_with("* Version"), l.clone()));
        lines.dedup();
        let msg = format!(
            "Rolling out {} not up-to-date replicas\n{}",
            outdated.len(),
            lines.join("\n")
        );
        conditions::set(
            &mut s.conditions,
            types::ROLLING_OUT,
            "True",
            reasons::ROLLING_OUT,
            &msg,
            generation,
        );
    }
    let mut blocked = scope.missing_templates.clone();
    blocked.extend(scope.rollout_error.clone());
    aggregate::scaling(
        &mut s.conditions,
        if deleting { 0 } else { replicas },
        current,
        &blocked,
        generation,
    );
    aggregate::machines_ready(&mut s.conditions, &refs, generation);
    aggregate::machines_up_to_date(&mut s.conditions, &refs, now, generation);
    aggregate::remediating(&mut s.conditions, &refs, generation);
    aggregate::deleting(&mut s.conditions, deleting, refs.len(), generation);
    if ok {
        s.observed_generation = generation;
    }
    scope.status = s;
}
