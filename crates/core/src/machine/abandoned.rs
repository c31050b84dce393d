//! A Machine its creator left without its clones. A MachineSet, or the host for a control
//! plane, writes a new Machine first and its bootstrap config and infrastructure machine after
//! it, born owned by it (`machineset/machines.rs`, the driver's `machines.rs`). A creator that
//! stops between those writes (a crash, a lost Lease) leaves a Machine whose objects will never
//! come, and the creator, counting it, makes no other. Such a Machine, older than [`GRACE`],
//! never provisioned, and still without one of its objects when the API server itself is asked,
//! is deleted with a Warning Event, so that its creator makes another.

use super::Scope;
use crate::adopt;
use crate::context::CoreCtx;
use crate::error::ReconcileError;
use capw_api::common::ContractVersionedObjectReference;
use capw_api::contract::conditions::{reasons, types};
use capw_api::machine::Machine;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use std::time::Duration;

/// How long a new Machine may lack an object its creator writes after it. The creator writes
/// them within milliseconds; a minute leaves room for a slow API server.
const GRACE: Duration = Duration::from_secs(60);

/// The reference this reconcile found missing, with the Machine's creator (`Kind name`), if
/// the Machine is one its creator abandoned.
fn missing(scope: &Scope) -> Option<(&ContractVersionedObjectReference, String)> {
    let m = &scope.machine;
    if m.metadata.deletion_timestamp.is_some() || m.spec.provider_id.is_some() {
        return None;
    }
    let creator = adopt::on_create_owner(m, scope.cluster.as_deref())
        .map(|o| format!("{} {}", o.kind, o.name))?;
    let age = m
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| jiff::Timestamp::now().as_second() - t.0.as_second())?;
    if age < GRACE.as_secs() as i64 {
        return None;
    }
    let reason = |type_: &str| {
        scope
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.reason.as_str())
    };
    let reference =
        if reason(types::INFRASTRUCTURE_READY) == Some(reasons::INFRASTRUCTURE_DOES_NOT_EXIST) {
            Some(&m.spec.infrastructure_ref)
        } else if reason(types::BOOTSTRAP_CONFIG_READY)
            == Some(reasons::BOOTSTRAP_CONFIG_DOES_NOT_EXIST)
        {
            m.spec.bootstrap.config_ref.as_ref()
        } else {
            None
        };
    reference.map(|r| (r, creator))
}

/// Deletes the Machine if its creator abandoned it; returns whether it did.
pub(super) async fn reconcile(scope: &Scope, ctx: &CoreCtx) -> Result<bool, ReconcileError> {
    let Some((reference, creator)) = missing(scope) else {
        return Ok(false);
    };
    let ns = scope.machine.namespace().unwrap_or_default();
    // The cache may lag; only the API server's answer may delete a Machine.
    let resolved = ctx
        .resolver
        .resolve(&reference.api_group, &reference.kind)
        .await?;
    if ctx
        .resolver
        .api(&ns, &resolved)
        .get_opt(&reference.name)
        .await?
        .is_some()
    {
        return Ok(false);
    }
    let name = scope.machine.name_any();
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &ns);
    api.delete(&name, &DeleteParams::background()).await?;
    ctx.event(
        &super::object_ref(&scope.machine),
        true,
        "AbandonedByCreator",
        format!(
            "Deleting Machine {name}: {} {} does not exist {} s after {creator} created the Machine, which writes it right after (its creator stopped in between); {creator} makes another",
            reference.kind,
            reference.name,
            GRACE.as_secs()
        ),
    )
    .await;
    Ok(true)
}
