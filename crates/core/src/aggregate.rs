//! Conditions and counters a MachineSet and a MachineDeployment both sum up from their
//! Machines (`capi-lifecycle.md` §2.8 and §3.9): the replica counters from the Machines'
//! `Ready`, `Available` and `UpToDate`, and `ScalingUp`, `ScalingDown`, `MachinesReady`,
//! `MachinesUpToDate`, `Remediating` and `Deleting`.

use capw_api::common::Condition;
use capw_api::contract::conditions::{self, reasons, types};
use capw_api::machine::Machine;
use kube::ResourceExt;

/// The status fields of a MachineSet or MachineDeployment that count Machines: a change of
/// these alone is progress, written at the pace (`CoreCtx::hold_status`).
pub(crate) const COUNTERS: &[&str] = &[
    "replicas",
    "readyReplicas",
    "availableReplicas",
    "upToDateReplicas",
];

/// Machines younger than this without `UpToDate` are left out of `MachinesUpToDate`, so a
/// fresh Machine does not make it flicker (upstream's grace).
const UP_TO_DATE_GRACE_SECONDS: i64 = 10;

fn condition<'a>(m: &'a Machine, type_: &str) -> Option<&'a Condition> {
    m.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

pub fn has_true(m: &Machine, type_: &str) -> bool {
    condition(m, type_).is_some_and(|c| c.status == "True")
}

/// `(ready, available, upToDate)` over `machines`.
pub fn counts(machines: &[&Machine]) -> (i32, i32, i32) {
    let n = |t: &str| machines.iter().filter(|m| has_true(m, t)).count() as i32;
    (n(types::READY), n(types::AVAILABLE), n(types::UP_TO_DATE))
}

fn names(ms: &[&&Machine]) -> String {
    let mut n: Vec<String> = ms.iter().map(|m| m.name_any()).collect();
    n.sort();
    if n.len() > 3 {
        let more = n.len() - 3;
        n.truncate(3);
        return format!("{}, ... ({more} more)", n.join(", "));
    }
    n.join(", ")
}

/// The aggregate of one Machine condition: True when all are True, False when any is False
/// (the message names them), Unknown otherwise; True `NoReplicas` with no Machines.
#[allow(clippy::too_many_arguments)]
fn aggregate(
    list: &mut Vec<Condition>,
    as_type: &str,
    of: &str,
    machines: &[&Machine],
    (true_reason, false_reason, unknown_reason): (&str, &str, &str),
    skip: impl Fn(&Machine) -> bool,
    generation: Option<i64>,
) {
    let considered: Vec<&Machine> = machines.iter().copied().filter(|m| !skip(m)).collect();
    if considered.is_empty() {
        conditions::set(list, as_type, "True", reasons::NO_REPLICAS, "", generation);
        return;
    }
    let with = |status: &str| -> Vec<&&Machine> {
        considered
            .iter()
            .filter(|m| {
                condition(m, of)
                    .map(|c| c.status.as_str())
                    .unwrap_or("Unknown")
                    == status
            })
            .collect()
    };
    let (falses, unknowns) = (with("False"), with("Unknown"));
    if !falses.is_empty() {
        let msg = format!("* Machines {}: {of} is False", names(&falses));
        conditions::set(list, as_type, "False", false_reason, &msg, generation);
    } else if !unknowns.is_empty() {
        let msg = format!("* Machines {}: {of} is Unknown", names(&unknowns));
        conditions::set(list, as_type, "Unknown", unknown_reason, &msg, generation);
    } else {
        conditions::set(list, as_type, "True", true_reason, "", generation);
    }
}

pub fn machines_ready(list: &mut Vec<Condition>, machines: &[&Machine], generation: Option<i64>) {
    aggregate(
        list,
        types::MACHINES_READY,
        types::READY,
        machines,
        (reasons::READY, reasons::NOT_READY, reasons::READY_UNKNOWN),
        |_| false,
        generation,
    );
}

pub fn machines_up_to_date(
    list: &mut Vec<Condition>,
    machines: &[&Machine],
    now: i64,
    generation: Option<i64>,
) {
    aggregate(
        list,
        types::MACHINES_UP_TO_DATE,
        types::UP_TO_DATE,
        machines,
        (
            reasons::UP_TO_DATE,
            reasons::NOT_UP_TO_DATE,
            reasons::UP_TO_DATE_UNKNOWN,
        ),
        |m| {
            condition(m, types::UP_TO_DATE).is_none()
                && m.metadata
                    .creation_timestamp
                    .as_ref()
                    .is_some_and(|t| now - t.0.as_second() < UP_TO_DATE_GRACE_SECONDS)
        },
        generation,
    );
}

/// `ScalingUp` and `ScalingDown` from the desired and current counts. `blocked` lists why
/// scaling up cannot go on (preflight checks, missing templates).
pub fn scaling(
    list: &mut Vec<Condition>,
    desired: i32,
    current: i32,
    blocked: &[String],
    generation: Option<i64>,
) {
    let blocked_note = if blocked.is_empty() {
        String::new()
    } else {
        format!(
            " is blocked because:\n{}",
            blocked
                .iter()
                .map(|b| format!("* {b}"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    };
    if desired > current {
        let msg = format!("Scaling up from {current} to {desired} replicas{blocked_note}");
        conditions::set(
            list,
            types::SCALING_UP,
            "True",
            reasons::SCALING_UP,
            &msg,
            generation,
        );
    } else {
        let msg = if blocked.is_empty() {
            String::new()
        } else {
            format!(
                "Scaling up would be blocked because:\n{}",
                &blocked_note[" is blocked because:\n".len()..]
            )
        };
        conditions::set(
            list,
            types::SCALING_UP,
            "False",
            reasons::NOT_SCALING_UP,
            &msg,
            generation,
        );
    }
    if desired < current {
        let msg = format!("Scaling down from {current} to {desired} replicas");
        conditions::set(
            list,
            types::SCALING_DOWN,
            "True",
            reasons::SCALING_DOWN,
            &msg,
            generation,
        );
    } else {
        conditions::set(
            list,
            types::SCALING_DOWN,
            "False",
            reasons::NOT_SCALING_DOWN,
            "",
            generation,
        );
    }
}

/// `Remediating`: True while any Machine waits for or undergoes owner remediation.
pub fn remediating(list: &mut Vec<Condition>, machines: &[&Machine], generation: Option<i64>) {
    let remediating: Vec<&&Machine> = machines
        .iter()
        .filter(|m| condition(m, types::OWNER_REMEDIATED).is_some_and(|c| c.status == "False"))
        .collect();
    if remediating.is_empty() {
        conditions::set(
            list,
            types::REMEDIATING,
            "False",
            reasons::NOT_REMEDIATING,
            "",
            generation,
        );
    } else {
        let msg = format!("* Machines {}: being remediated", names(&remediating));
        conditions::set(
            list,
            types::REMEDIATING,
            "True",
            reasons::REMEDIATING,
            &msg,
            generation,
        );
    }
}

/// `Deleting`: True with the Machines still to go while the object is being deleted.
pub fn deleting(
    list: &mut Vec<Condition>,
    being_deleted: bool,
    remaining: usize,
    generation: Option<i64>,
) {
    if !being_deleted {
        conditions::set(
            list,
            types::DELETING,
            "False",
            reasons::NOT_DELETING,
            "",
            generation,
        );
    } else if remaining > 0 {
        let msg = format!("Deleting {remaining} Machines");
        conditions::set(
            list,
            types::DELETING,
            "True",
            reasons::DELETING,
            &msg,
            generation,
        );
    } else {
        conditions::set(
            list,
            types::DELETING,
            "True",
            reasons::DELETING,
            "Deletion completed",
            generation,
        );
    }
}
