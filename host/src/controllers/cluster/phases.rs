//! `reconcileInfrastructure` and `reconcileControlPlane`: read the referenced provider objects
//! through the contract, adopt them, and bubble their flags (sticky) up to the Cluster.

use super::{EXTERNAL_READY_WAIT, Scope};
use crate::api::cluster::{ClusterInitialization, ReplicaSummary};
use crate::api::common::names::CONTROL_PLANE_LABEL;
use crate::api::common::{ContractVersionedObjectReference, Deprecated, V1Beta1Deprecated};
use crate::controllers::adopt;
use crate::controllers::conditions;
use crate::controllers::context::CoreCtx;
use crate::controllers::error::ReconcileError;
use crate::controllers::external::read;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

/// Fetches a referenced object, starts its dynamic watch, and ensures the Cluster's owner
/// reference and the cluster-name label on it.
async fn reconcile_external(
    scope: &mut Scope,
    ctx: &CoreCtx,
    reference: &ContractVersionedObjectReference,
) -> Result<Option<Value>, ReconcileError> {
    let ns = scope.ns();
    let Some((obj, resolved)) = ctx.resolver.get(&ns, reference).await? else {
        return Ok(None);
    };
    ctx.cluster_tracker.ensure(&resolved);
    let c = &scope.cluster;
    let owner = adopt::owner_ref(
        "Cluster",
        &c.name_any(),
        &c.uid().unwrap_or_default(),
        false,
    );
    if obj.metadata.deletion_timestamp.is_none() {
        adopt::ensure(
            &ctx.resolver.api(&ns, &resolved),
            &obj,
            owner,
            &[],
            &c.name_any(),
        )
        .await?;
    }
    let v = to_value(&obj);
    let (reason, message) = read::failure(&v);
    if reason.is_some() || message.is_some() {
        scope.status.deprecated = Some(Deprecated {
            v1beta1: Some(V1Beta1Deprecated {
                failure_reason: reason,
                failure_message: message.map(|m| {
                    format!(
                        "Failure detected from referenced resource {}.{} with name {}: {m}",
                        reference.kind, reference.api_group, reference.name
                    )
                }),
            }),
        });
    }
    Ok(Some(v))
}

pub(crate) fn to_value(obj: &DynamicObject) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

fn init(scope: &mut Scope) -> &mut ClusterInitialization {
    scope
        .status
        .initialization
        .get_or_insert_with(Default::default)
}

pub(super) async fn reconcile_infrastructure(
    scope: &mut Scope,
    ctx: &CoreCtx,
) -> Result<(), ReconcileError> {
    let generation = scope.generation();
    let Some(reference) = scope
        .cluster
        .spec
        .infrastructure_ref
        .clone()
        .filter(|r| r.is_set())
    else {
        init(scope).infrastructure_provisioned = Some(true);
        conditions::set(
            &mut scope.status.conditions,
            "InfrastructureReady",
            "True",
            "NoInfrastructure",
            "",
            generation,
        );
        return Ok(());
    };
    let was = init(scope).infrastructure_provisioned == Some(true);
    let deleting = scope.cluster.metadata.deletion_timestamp.is_some();
    let obj = match reconcile_external(scope, ctx, &reference).await {
        Ok(o) => o,
        Err(ReconcileError::External(e)) => {
            conditions::set(
                &mut scope.status.conditions,
                "InfrastructureReady",
                "Unknown",
                "InvalidInfrastructureRef",
                &e.to_string(),
                generation,
            );
            scope.requeue_after(EXTERNAL_READY_WAIT);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let Some(obj) = obj else {
        let msg = format!("{} {} does not exist", reference.kind, reference.name);
        conditions::set(
            &mut scope.status.conditions,
            "InfrastructureReady",
            if deleting { "False" } else { "Unknown" },
            if deleting {
                "InfrastructureDeleted"
            } else {
                "InfrastructureDoesNotExist"
            },
            &msg,
            generation,
        );
        if deleting {
            return Ok(());
        }
        if was {
            return Err(ReconcileError::Invalid(format!(
                "Cluster {}: spec.infrastructureRef {} {} has been deleted after being provisioned",
                scope.cluster.name_any(),
                reference.kind,
                reference.name
            )));
        }
        scope.requeue_after(EXTERNAL_READY_WAIT);
        return Ok(());
    };
    let provisioned = read::provisioned(&obj);
    conditions::mirror(
        &mut scope.status.conditions,
        conditions::of_object(&obj, "Ready"),
        "InfrastructureReady",
        (
            provisioned || was,
            if provisioned || was {
                "Ready"
            } else {
                "NotReady"
            },
            "",
        ),
        generation,
    );
    if obj.pointer("/metadata/deletionTimestamp").is_some() || (!provisioned && !was) {
        return Ok(());
    }
    let cluster_ep_valid = scope
        .cluster
        .spec
        .control_plane_endpoint
        .as_ref()
        .is_some_and(|e| e.is_valid());
    if !cluster_ep_valid && let Some(ep) = read::endpoint(&obj) {
        scope.endpoint = Some(ep);
    }
    scope.status.failure_domains = read::failure_domains(&obj);
    if !was {
        init(scope).infrastructure_provisioned = Some(true);
        ctx.event(
            &super::object_ref(&scope.cluster),
            false,
            "InfrastructureReady",
            format!(
                "Cluster {} InfrastructureReady is now true",
                scope.cluster.name_any()
            ),
        )
        .await;
    }
    Ok(())
}

pub(super) async fn reconcile_control_plane(
    scope: &mut Scope,
    ctx: &CoreCtx,
) -> Result<(), ReconcileError> {
    let generation = scope.generation();
    let was = init(scope).control_plane_initialized == Some(true);
    let Some(reference) = scope
        .cluster
        .spec
        .control_plane_ref
        .clone()
        .filter(|r| r.is_set())
    else {
        // Without a control-plane provider, the control plane is initialized once any
        // control-plane Machine has a Node.
        let ns = scope.ns();
        let initialized = was
            || ctx
                .machines_of(&ns, &scope.cluster.name_any())
                .iter()
                .any(|m| {
                    m.labels().contains_key(CONTROL_PLANE_LABEL)
                        && m.status
                            .as_ref()
                            .and_then(|s| s.node_ref.as_ref())
                            .is_some()
                });
        set_initialized(scope, ctx, initialized, was).await;
        conditions::set(
            &mut scope.status.conditions,
            "ControlPlaneAvailable",
            conditions::status_str(initialized),
            if initialized {
                "Available"
            } else {
                "NotAvailable"
            },
            "",
            generation,
        );
        return Ok(());
    };
    let deleting = scope.cluster.metadata.deletion_timestamp.is_some();
    let obj = match reconcile_external(scope, ctx, &reference).await {
        Ok(o) => o,
        Err(ReconcileError::External(e)) => {
            conditions::set(
                &mut scope.status.conditions,
                "ControlPlaneAvailable",
                "Unknown",
                "InvalidControlPlaneRef",
                &e.to_string(),
                generation,
            );
            scope.requeue_after(EXTERNAL_READY_WAIT);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let Some(obj) = obj else {
        let msg = format!("{} {} does not exist", reference.kind, reference.name);
        conditions::set(
            &mut scope.status.conditions,
            "ControlPlaneAvailable",
            if deleting { "False" } else { "Unknown" },
            if deleting {
                "ControlPlaneDeleted"
            } else {
                "ControlPlaneDoesNotExist"
            },
            &msg,
            generation,
        );
        if deleting {
            return Ok(());
        }
        if was {
            return Err(ReconcileError::Invalid(format!(
                "Cluster {}: spec.controlPlaneRef {} {} has been deleted after being initialized",
                scope.cluster.name_any(),
                reference.kind,
                reference.name
            )));
        }
        scope.requeue_after(EXTERNAL_READY_WAIT);
        return Ok(());
    };
    let initialized = read::control_plane_initialized(&obj);
    conditions::mirror(
        &mut scope.status.conditions,
        conditions::of_object(&obj, "Available"),
        "ControlPlaneAvailable",
        (false, "NotAvailable", ""),
        generation,
    );
    scope.status.control_plane = Some(ReplicaSummary {
        desired_replicas: read::int(&obj, "/spec/replicas"),
        replicas: read::int(&obj, "/status/replicas"),
        up_to_date_replicas: read::int(&obj, "/status/upToDateReplicas"),
        ready_replicas: read::int(&obj, "/status/readyReplicas"),
        available_replicas: read::int(&obj, "/status/availableReplicas"),
    });
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        return Ok(());
    }
    let cluster_ep_valid = scope
        .cluster
        .spec
        .control_plane_endpoint
        .as_ref()
        .is_some_and(|e| e.is_valid())
        || scope.endpoint.is_some();
    if !cluster_ep_valid && let Some(ep) = read::endpoint(&obj) {
        scope.endpoint = Some(ep);
    }
    set_initialized(scope, ctx, initialized, was).await;
    Ok(())
}

async fn set_initialized(scope: &mut Scope, ctx: &CoreCtx, now: bool, was: bool) {
    let generation = scope.generation();
    let initialized = now || was;
    conditions::set(
        &mut scope.status.conditions,
        "ControlPlaneInitialized",
        conditions::status_str(initialized),
        if initialized {
            "Initialized"
        } else {
            "NotInitialized"
        },
        if initialized {
            ""
        } else {
            "waiting for the control plane to be initialized"
        },
        generation,
    );
    if initialized && !was {
        init(scope).control_plane_initialized = Some(true);
        ctx.event(
            &super::object_ref(&scope.cluster),
            false,
            "ControlPlaneInitialized",
            format!(
                "Cluster {} ControlPlaneInitialized is now true",
                scope.cluster.name_any()
            ),
        )
        .await;
    }
}
