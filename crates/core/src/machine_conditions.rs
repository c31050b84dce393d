//! Conditions other controllers set on a Machine (`UpToDate` by its MachineSet,
//! `HealthCheckSucceeded` by a MachineHealthCheck, `OwnerRemediated` by both). Each write
//! carries the resourceVersion it was computed from, and the Machine controller's own status
//! write does too: whoever read a stale Machine is refused and reads again, so no controller
//! drops a condition it did not know of. Writes start from the newest Machine the core
//! controllers wrote (`written`), not a cache that has not seen that write yet.

use crate::context::CoreCtx;
use crate::error::ReconcileError;
use capw_api::contract::conditions;
use capw_api::machine::Machine;
use capw_reconcile::skeleton::write_conditions_at;
use kube::ResourceExt;
use kube::api::Api;

/// The condition types this module writes for other controllers; the Machine controller
/// owns every other condition of a Machine.
pub const OTHERS: [&str; 3] = [
    conditions::types::UP_TO_DATE,
    conditions::types::HEALTH_CHECK_SUCCEEDED,
    conditions::types::OWNER_REMEDIATED,
];

/// Sets one condition on a Machine's status unless it already reads so. The write carries
/// the resourceVersion it was computed from: a Machine that changed meanwhile is left to the
/// next reconcile, so no controller overwrites conditions it did not read.
pub async fn set(
    ctx: &CoreCtx,
    m: &Machine,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> Result<(), ReconcileError> {
    set_all(ctx, m, &[(type_, status, reason, message)]).await
}

/// Sets several conditions, each `(type, status, reason, message)`, in one guarded write.
pub async fn set_all(
    ctx: &CoreCtx,
    m: &Machine,
    updates: &[(&str, &str, &str, &str)],
) -> Result<(), ReconcileError> {
    let newer = ctx.written.machines.stand_in(m);
    let m = newer.as_deref().unwrap_or(m);
    let mut list = m.status.clone().unwrap_or_default().conditions;
    let before = list.clone();
    for (type_, status, reason, message) in updates {
        conditions::set(
            &mut list,
            type_,
            status,
            reason,
            message,
            m.metadata.generation,
        );
    }
    if list == before || (generation_only(&before, &list) && !observed_by_machine(m)) {
        return Ok(());
    }
    patch(ctx, m, list).await
}

/// Whether `after` differs from `before` only in observed generations.
fn generation_only(before: &[conditions::Condition], after: &[conditions::Condition]) -> bool {
    let unobserved = |list: &[conditions::Condition]| -> Vec<conditions::Condition> {
        list.iter()
            .map(|c| conditions::Condition {
                observed_generation: None,
                ..c.clone()
            })
            .collect()
    };
    unobserved(before) == unobserved(after)
}

/// Whether the Machine controller has written its status for the Machine's generation. Until
/// it has, a condition that only needs its observed generation raised waits: when the
/// generation moved by the Machine controller's own spec write (a data Secret's name, a
/// providerID), that controller's next status write raises it (`observe_own_write`). Writing
/// it here first raced that write, and one of the two was refused (409) at a thousand
/// clusters about once per cluster.
fn observed_by_machine(m: &Machine) -> bool {
    m.status.as_ref().and_then(|s| s.observed_generation) >= m.metadata.generation
}

/// Removes a condition from a Machine's status (guarded as above).
pub async fn remove(ctx: &CoreCtx, m: &Machine, type_: &str) -> Result<(), ReconcileError> {
    let newer = ctx.written.machines.stand_in(m);
    let m = newer.as_deref().unwrap_or(m);
    let mut list = m.status.clone().unwrap_or_default().conditions;
    let n = list.len();
    list.retain(|c| c.type_ != type_);
    if list.len() == n {
        return Ok(());
    }
    patch(ctx, m, list).await
}

async fn patch(
    ctx: &CoreCtx,
    m: &Machine,
    list: Vec<conditions::Condition>,
) -> Result<(), ReconcileError> {
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &m.namespace().unwrap_or_default());
    match write_conditions_at(&api, &m.name_any(), m.resource_version(), &list).await {
        Ok(written) => {
            ctx.written
                .machines
                .record(m.resource_version().into_iter().collect(), written);
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capw_api::machine::MachineStatus;

    fn up_to_date(generation: i64) -> conditions::Condition {
        conditions::Condition {
            type_: conditions::types::UP_TO_DATE.into(),
            status: "True".into(),
            observed_generation: Some(generation),
            ..Default::default()
        }
    }

    /// A raise of the observed generation alone waits for the Machine controller to observe
    /// the generation; any other change does not.
    #[test]
    fn a_generation_only_refresh_waits_for_the_machine_controller() {
        let before = [up_to_date(1)];
        assert!(generation_only(&before, &[up_to_date(2)]));
        let mut flipped = up_to_date(2);
        flipped.status = "False".into();
        assert!(!generation_only(&before, &[flipped]));

        let mut m = Machine::new("m", Default::default());
        m.metadata.generation = Some(2);
        m.status = Some(MachineStatus {
            observed_generation: Some(1),
            ..Default::default()
        });
        assert!(!observed_by_machine(&m));
        if let Some(s) = m.status.as_mut() {
            s.observed_generation = Some(2);
        }
        assert!(observed_by_machine(&m));
    }
}
