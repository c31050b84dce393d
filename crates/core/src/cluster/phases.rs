//! `reconcileInfrastructure` and `reconcileControlPlane`: read the referenced provider objects
//! through the contract, adopt them, and bubble their flags (sticky) up to the Cluster.

use super::{EXTERNAL_READY_WAIT, Scope};
use crate::context::CoreCtx;
use crate::error::ReconcileError;
use crate::{adopt, referenced};
use capw_api::cluster::{ClusterInitialization, ReplicaSummary};
use capw_api::common::ContractVersionedObjectReference;
use capw_api::common::names::CONTROL_PLANE_LABEL;
use capw_api::contract::ProviderObject;
use capw_api::contract::conditions;
use capw_api::contract::conditions::{reasons, types};
use kube::ResourceExt;

/// Reads a referenced object and adopts it with a plain (non-controller) owner reference, so
/// external tools can own it.
async fn reconcile_external(
    scope: &mut Scope,
    ctx: &CoreCtx,
    reference: &ContractVersionedObjectReference,
) -> Result<Option<ProviderObject>, ReconcileError> {
    let c = &scope.cluster;
    let owner = adopt::owner_ref(
        "Cluster",
        &c.name_any(),
        &c.uid().unwrap_or_default(),
        false,
    );
    let found = referenced::read_and_adopt(
        &ctx.resolver,
        &ctx.cluster_tracker,
        &scope.ns(),
        reference,
        owner,
        None,
        &c.name_any(),
    )
    .await?;
    Ok(found.map(|r| {
        if r.deprecated.is_some() {
            scope.status.deprecated = r.deprecated;
        }
        r.object
    }))
}

/// A topology Cluster's references are set by the topology controller; until then there is
/// nothing to provision, and the Cluster waits rather than taking "no reference" as done.
const TOPOLOGY_WAIT: &str = "Waiting for cluster topology to be reconciled";

fn awaits_topology(scope: &Scope) -> bool {
    scope.cluster.spec.topology.is_some()
}

/// How one referenced-object phase words its condition when the object cannot be read.
struct RefPhase {
    /// The Cluster condition the phase owns.
    condition: &'static str,
    /// The reason prefix: `Infrastructure`, `ControlPlane`.
    noun: &'static str,
    /// The Cluster field that holds the reference.
    field: &'static str,
    /// What the sticky flag means, for the error when the object vanishes after it.
    done: &'static str,
}

/// Reads and adopts the referenced object. `None` ends the phase for this pass: the object is
/// missing or the reference is invalid, and the phase's condition says which. An object that
/// vanishes after its flag was set (`was`) is an error, as in Cluster API.
async fn read_ref(
    scope: &mut Scope,
    ctx: &CoreCtx,
    reference: &ContractVersionedObjectReference,
    phase: &RefPhase,
    deleting: bool,
    was: bool,
) -> Result<Option<ProviderObject>, ReconcileError> {
    let generation = scope.generation();
    let noun = phase.noun;
    let obj = match reconcile_external(scope, ctx, reference).await {
        Ok(o) => o,
        Err(ReconcileError::External(e)) => {
            conditions::set(
                &mut scope.status.conditions,
                phase.condition,
                "Unknown",
                &format!("Invalid{noun}Ref"),
                &e.to_string(),
                generation,
            );
            scope.requeue_after(EXTERNAL_READY_WAIT);
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if obj.is_some() {
        return Ok(obj);
    }
    let msg = format!("{} {} does not exist", reference.kind, reference.name);
    let (status, reason) = if deleting {
        ("False", format!("{noun}Deleted"))
    } else {
        ("Unknown", format!("{noun}DoesNotExist"))
    };
    conditions::set(
        &mut scope.status.conditions,
        phase.condition,
        status,
        &reason,
        &msg,
        generation,
    );
    if deleting {
        return Ok(None);
    }
    if was {
        return Err(ReconcileError::Invalid(format!(
            "Cluster {}: {} {} {} has been deleted after being {}",
            scope.cluster.name_any(),
            phase.field,
            reference.kind,
            reference.name,
            phase.done
        )));
    }
    scope.requeue_after(EXTERNAL_READY_WAIT);
    Ok(None)
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
        if awaits_topology(scope) {
            conditions::set(
                &mut scope.status.conditions,
                types::INFRASTRUCTURE_READY,
                "False",
                "InfrastructureDoesNotExist",
                TOPOLOGY_WAIT,
                generation,
            );
            return Ok(());
        }
        init(scope).infrastructure_provisioned = Some(true);
        conditions::set(
            &mut scope.status.conditions,
            types::INFRASTRUCTURE_READY,
            "True",
            "NoInfrastructure",
            "",
            generation,
        );
        return Ok(());
    };
    let was = init(scope).infrastructure_provisioned == Some(true);
    let deleting = scope.cluster.metadata.deletion_timestamp.is_some();
    let phase = RefPhase {
        condition: types::INFRASTRUCTURE_READY,
        noun: "Infrastructure",
        field: "spec.infrastructureRef",
        done: "provisioned",
    };
    let Some(obj) = read_ref(scope, ctx, &reference, &phase, deleting, was).await? else {
        return Ok(());
    };
    let provisioned = obj.provisioned();
    conditions::mirror(
        &mut scope.status.conditions,
        obj.condition(types::READY),
        types::INFRASTRUCTURE_READY,
        conditions::flag_fallback(provisioned || was),
        generation,
    );
    if obj.deleting() || (!provisioned && !was) {
        return Ok(());
    }
    let cluster_ep_valid = scope
        .cluster
        .spec
        .control_plane_endpoint
        .as_ref()
        .is_some_and(|e| e.is_valid());
    if !cluster_ep_valid && let Some(ep) = obj.endpoint() {
        scope.endpoint = Some(ep);
    }
    scope.status.failure_domains = obj.failure_domains();
    if !was {
        init(scope).infrastructure_provisioned = Some(true);
        ctx.event(
            &super::object_ref(&scope.cluster),
            false,
            types::INFRASTRUCTURE_READY,
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
        if awaits_topology(scope) {
            conditions::set(
                &mut scope.status.conditions,
                types::CONTROL_PLANE_AVAILABLE,
                "False",
                "ControlPlaneDoesNotExist",
                TOPOLOGY_WAIT,
                generation,
            );
            return Ok(());
        }
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
            types::CONTROL_PLANE_AVAILABLE,
            conditions::status_str(initialized),
            if initialized {
                types::AVAILABLE
            } else {
                reasons::NOT_AVAILABLE
            },
            "",
            generation,
        );
        return Ok(());
    };
    let deleting = scope.cluster.metadata.deletion_timestamp.is_some();
    let phase = RefPhase {
        condition: types::CONTROL_PLANE_AVAILABLE,
        noun: "ControlPlane",
        field: "spec.controlPlaneRef",
        done: "initialized",
    };
    let Some(obj) = read_ref(scope, ctx, &reference, &phase, deleting, was).await? else {
        return Ok(());
    };
    let initialized = obj.control_plane_initialized();
    conditions::mirror(
        &mut scope.status.conditions,
        obj.condition(types::AVAILABLE),
        types::CONTROL_PLANE_AVAILABLE,
        (false, reasons::NOT_AVAILABLE, ""),
        generation,
    );
    let [
        desired_replicas,
        replicas,
        up_to_date_replicas,
        ready_replicas,
        available_replicas,
    ] = obj.replicas();
    scope.status.control_plane = Some(ReplicaSummary {
        desired_replicas,
        replicas,
        up_to_date_replicas,
        ready_replicas,
        available_replicas,
    });
    if obj.deleting() {
        return Ok(());
    }
    let cluster_ep_valid = scope
        .cluster
        .spec
        .control_plane_endpoint
        .as_ref()
        .is_some_and(|e| e.is_valid())
        || scope.endpoint.is_some();
    if !cluster_ep_valid && let Some(ep) = obj.endpoint() {
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
        types::CONTROL_PLANE_INITIALIZED,
        conditions::status_str(initialized),
        if initialized {
            reasons::INITIALIZED
        } else {
            reasons::NOT_INITIALIZED
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
            types::CONTROL_PLANE_INITIALIZED,
            format!(
                "Cluster {} ControlPlaneInitialized is now true",
                scope.cluster.name_any()
            ),
        )
        .await;
    }
}
