//! `reconcileMachineOwnerAndLabels`, `reconcileBootstrap` and `reconcileInfrastructure`.

use super::{EXTERNAL_READY_WAIT, Scope};
use crate::context::CoreCtx;
use crate::error::ReconcileError;
use crate::{adopt, referenced};
use capw_api::common::names::{CLUSTER_NAME_LABEL, CONTROL_PLANE_NAME_LABEL, SET_NAME_LABEL};
use capw_api::common::{ContractVersionedObjectReference, Deprecated, V1Beta1Deprecated};
use capw_api::contract::conditions;
use capw_api::contract::conditions::{reasons, types};
use capw_api::machine::{Machine, MachineInitialization};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;

fn init(scope: &mut Scope) -> &mut MachineInitialization {
    scope
        .status
        .initialization
        .get_or_insert_with(Default::default)
}

pub(super) async fn reconcile_owner_and_labels(
    scope: &mut Scope,
    ctx: &CoreCtx,
) -> Result<(), ReconcileError> {
    let m = &scope.machine;
    let cluster_name = &m.spec.cluster_name;
    let labelled = m.labels().get(CLUSTER_NAME_LABEL) == Some(cluster_name);
    let mut refs = m.owner_references().to_vec();
    // A control-plane Machine belongs to its control plane, and a MachineSet's to its set:
    // they re-adopt it if needed (upstream's `shouldAdopt`).
    let standalone = !refs.iter().any(|o| o.controller == Some(true))
        && !m.labels().contains_key(CONTROL_PLANE_NAME_LABEL)
        && !m.labels().contains_key(SET_NAME_LABEL);
    let mut changed = false;
    if standalone && let Some(c) = &scope.cluster {
        let uid = c.uid().unwrap_or_default();
        if !refs.iter().any(|o| o.uid == uid) {
            refs.retain(|o| !(o.kind == "Cluster" && o.name == c.name_any()));
            refs.push(adopt::owner_ref("Cluster", &c.name_any(), &uid, false));
            changed = true;
        }
    }
    if !changed && labelled {
        return Ok(());
    }
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &scope.ns());
    let patch = json!({"metadata": {"ownerReferences": refs, "labels": {CLUSTER_NAME_LABEL: cluster_name}}});
    let written = api
        .patch(
            &m.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    // Only metadata changed: the status computed from the read still holds.
    scope.wrote(written);
    Ok(())
}

/// Reads a referenced object and makes the Machine its controller.
async fn reconcile_external(
    scope: &mut Scope,
    ctx: &CoreCtx,
    reference: &ContractVersionedObjectReference,
) -> Result<Option<capw_api::contract::ProviderObject>, ReconcileError> {
    let m = &scope.machine;
    let found = referenced::read_and_adopt(
        &ctx.resolver,
        &ctx.machine_tracker,
        &scope.ns(),
        reference,
        adopt::owner_ref("Machine", &m.name_any(), &m.uid().unwrap_or_default(), true),
        // The MachineSet or control plane that made the Machine made its clones too; the
        // Machine becomes their controller in its place.
        adopt::on_create_owner(m, scope.cluster.as_deref()),
        &m.spec.cluster_name,
    )
    .await?;
    Ok(found.map(|r| {
        if r.deprecated.is_some() {
            scope.status.deprecated = r.deprecated;
        }
        r.object
    }))
}

pub(super) async fn reconcile_bootstrap(
    scope: &mut Scope,
    ctx: &CoreCtx,
) -> Result<(), ReconcileError> {
    let generation = scope.generation();
    let bootstrap = scope.machine.spec.bootstrap.clone();
    let Some(reference) = bootstrap.config_ref.filter(|r| r.is_set()) else {
        let created = bootstrap.data_secret_name.is_some();
        init(scope).bootstrap_data_secret_created = Some(created);
        conditions::set(
            &mut scope.status.conditions,
            types::BOOTSTRAP_CONFIG_READY,
            conditions::status_str(created),
            if created {
                reasons::DATA_SECRET_PROVIDED
            } else {
                reasons::WAITING_FOR_DATA_SECRET
            },
            "",
            generation,
        );
        return Ok(());
    };
    let obj = match reconcile_external(scope, ctx, &reference).await {
        Ok(Some(o)) => o,
        Ok(None) => {
            if scope.machine.metadata.deletion_timestamp.is_none() {
                conditions::set(
                    &mut scope.status.conditions,
                    types::BOOTSTRAP_CONFIG_READY,
                    "Unknown",
                    reasons::BOOTSTRAP_CONFIG_DOES_NOT_EXIST,
                    &format!("{} {} does not exist", reference.kind, reference.name),
                    generation,
                );
                scope.requeue_after(EXTERNAL_READY_WAIT);
            }
            return Ok(());
        }
        Err(ReconcileError::External(e)) => {
            conditions::set(
                &mut scope.status.conditions,
                types::BOOTSTRAP_CONFIG_READY,
                "Unknown",
                reasons::INVALID_BOOTSTRAP_CONFIG_REF,
                &format!(
                    "Machine {}: spec.bootstrap.configRef: {e}",
                    scope.machine.name_any()
                ),
                generation,
            );
            scope.requeue_after(EXTERNAL_READY_WAIT);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let already = bootstrap.data_secret_name.is_some();
    let created = already || obj.data_secret_created();
    conditions::mirror(
        &mut scope.status.conditions,
        obj.condition(types::READY),
        types::BOOTSTRAP_CONFIG_READY,
        (
            created,
            if created {
                reasons::DATA_SECRET_AVAILABLE
            } else {
                reasons::DATA_SECRET_NOT_AVAILABLE
            },
            "",
        ),
        generation,
    );
    if already {
        init(scope).bootstrap_data_secret_created = Some(true);
        return Ok(());
    }
    if !created {
        return Ok(());
    }
    let Some(secret) = obj.data_secret_name() else {
        return Err(ReconcileError::Invalid(format!(
            "{} {}: status.dataSecretName is empty although the data secret is reported created",
            reference.kind, reference.name
        )));
    };
    scope
        .spec_patch
        .insert("bootstrap".into(), json!({"dataSecretName": secret}));
    init(scope).bootstrap_data_secret_created = Some(true);
    Ok(())
}

pub(super) async fn reconcile_infrastructure(
    scope: &mut Scope,
    ctx: &CoreCtx,
) -> Result<(), ReconcileError> {
    let generation = scope.generation();
    let reference = scope.machine.spec.infrastructure_ref.clone();
    let was = scope
        .status
        .initialization
        .as_ref()
        .and_then(|i| i.infrastructure_provisioned)
        == Some(true);
    let obj = match reconcile_external(scope, ctx, &reference).await {
        Ok(Some(o)) => o,
        Ok(None) => {
            if scope.machine.metadata.deletion_timestamp.is_some() {
                return Ok(());
            }
            let msg = format!("{} {} does not exist", reference.kind, reference.name);
            conditions::set(
                &mut scope.status.conditions,
                types::INFRASTRUCTURE_READY,
                if was { "False" } else { "Unknown" },
                if was {
                    reasons::INFRASTRUCTURE_DELETED
                } else {
                    reasons::INFRASTRUCTURE_DOES_NOT_EXIST
                },
                &msg,
                generation,
            );
            if was {
                scope.status.deprecated = Some(Deprecated {
                    v1beta1: Some(V1Beta1Deprecated {
                        failure_reason: Some("InvalidConfiguration".into()),
                        failure_message: Some(format!(
                            "Machine infrastructure resource {} with name {:?} has been deleted after provisioning was completed",
                            reference.kind, reference.name
                        )),
                    }),
                });
            }
            scope.requeue_after(EXTERNAL_READY_WAIT);
            return Ok(());
        }
        Err(ReconcileError::External(e)) => {
            conditions::set(
                &mut scope.status.conditions,
                types::INFRASTRUCTURE_READY,
                "Unknown",
                reasons::INVALID_INFRASTRUCTURE_REF,
                &format!(
                    "Machine {}: spec.infrastructureRef: {e}",
                    scope.machine.name_any()
                ),
                generation,
            );
            scope.requeue_after(EXTERNAL_READY_WAIT);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let provisioned = obj.provisioned();
    conditions::mirror(
        &mut scope.status.conditions,
        obj.condition(types::READY),
        types::INFRASTRUCTURE_READY,
        conditions::flag_fallback(provisioned || was),
        generation,
    );
    if !provisioned && !was {
        return Ok(());
    }
    let Some(provider_id) = obj.provider_id() else {
        scope.requeue_after(Duration::from_secs(5));
        return Ok(());
    };
    scope.status.addresses = obj.addresses();
    if let Some(fd) = obj.status_failure_domain() {
        scope.status.failure_domain = Some(fd);
    }
    if scope.machine.spec.failure_domain.is_none()
        && let Some(fd) = obj.spec_failure_domain()
    {
        scope.spec_patch.insert("failureDomain".into(), json!(fd));
    }
    if scope.machine.spec.provider_id.as_deref() != Some(provider_id.as_str()) {
        scope
            .spec_patch
            .insert("providerID".into(), json!(provider_id));
    }
    init(scope).infrastructure_provisioned = Some(true);
    Ok(())
}

/// The providerID core knows: the one in spec, or the one about to be written.
pub(super) fn provider_id(scope: &Scope) -> Option<String> {
    scope
        .spec_patch
        .get("providerID")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| scope.machine.spec.provider_id.clone())
}
