//! `updateStatus` (`capi-lifecycle.md` §2.8): the selector, the counters from the Machines'
//! conditions, and `ScalingUp`, `ScalingDown`, `MachinesReady`, `MachinesUpToDate`,
//! `Remediating` and `Deleting`.

use super::{RECHECK, Scope, machines::refs};
use crate::aggregate;
use std::time::Duration;

pub(super) fn update(scope: &mut Scope, ok: bool) {
    let generation = scope.generation();
    let deleting = scope.ms.metadata.deletion_timestamp.is_some();
    let now = jiff::Timestamp::now().as_second();
    let machines = refs(scope);
    let current = machines.len() as i32;
    let (ready, available, up_to_date) = aggregate::counts(&machines);
    let desired = if deleting { 0 } else { scope.replicas() };
    let mut s = scope.status.clone();
    s.selector = Some(scope.spec.selector.to_selector_string());
    s.replicas = Some(current);
    s.ready_replicas = Some(ready);
    s.available_replicas = Some(available);
    s.up_to_date_replicas = Some(up_to_date);
    aggregate::scaling(
        &mut s.conditions,
        desired,
        current,
        &scope.blocked,
        generation,
    );
    aggregate::machines_ready(&mut s.conditions, &machines, generation);
    aggregate::machines_up_to_date(&mut s.conditions, &machines, now, generation);
    aggregate::remediating(&mut s.conditions, &machines, generation);
    aggregate::deleting(&mut s.conditions, deleting, machines.len(), generation);
    if ok {
        s.observed_generation = generation;
    }
    scope.status = s;
    // Counters move without events while Machines wait out minReadySeconds.
    let min_ready = scope.spec.template.spec.min_ready_seconds.unwrap_or(0);
    if !deleting {
        if min_ready > 0 && ready == current && available != current {
            scope.requeue_after(Duration::from_secs(min_ready as u64));
        } else if ready != current {
            scope.requeue_after(RECHECK);
        }
    }
}
