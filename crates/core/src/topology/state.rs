//! Reconcile state (upstream's `reconcile_state.go`): the desired objects written in upstream's
//! order: shim, infrastructure cluster, control plane (its health check, machine template, then
//! itself), the Cluster's references, then the MachineDeployments.
//!
//! Writes are server-side apply with the field manager `capi-topology`, forced, as upstream's,
//! so a user's own fields on the same objects stay theirs. An object is written only when the
//! desired one is not already contained in what exists ([`super::desired::contained`]); that
//! stands in for upstream's dry-run apply and costs no request. A template whose spec changed
//! is never edited: a copy under a new name replaces it (rotation), so a Machine rolls to it
//! and the old one stays until nothing uses it.
//!
//! Each create, update and delete is an Event on the Cluster, with upstream's reasons and
//! notes (`TopologyCreate`, `Created "MachineDeployment default/x"`), naming the object as
//! related.

use super::TopologyError;
use super::current::{CONTROL_PLANE_MACHINE_REF, Current, group_kind};
use super::desired::{Desired, cluster_owner, contained, reference};
use crate::context::CoreCtx;
use crate::naming;
use capw_api::cluster::Cluster;
use capw_api::common::names::{CLUSTER_NAME_LABEL, TOPOLOGY_OWNED_LABEL};
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machinehealthcheck::MachineHealthCheck;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// Upstream's field manager for everything the topology writes.
pub const FIELD_MANAGER: &str = "capi-topology";

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

fn name(obj: &Value) -> String {
    obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Upstream's Event reasons for what the topology writes.
const CREATED: &str = "TopologyCreate";
const UPDATED: &str = "TopologyUpdate";
const DELETED: &str = "TopologyDelete";

/// An Event on the Cluster about `obj` (as written, or as it was): upstream's note,
/// `Created "Kind namespace/name"`, and `obj` as the related object.
async fn record(ctx: &CoreCtx, cluster: &Cluster, reason: &str, obj: &Value, suffix: &str) {
    let s = |v: &Value| v.as_str().map(str::to_string);
    let meta = &obj["metadata"];
    let ns = cluster.namespace().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let verb = match reason {
        CREATED => "Created",
        DELETED => "Deleted",
        _ => "Updated",
    };
    let related = ObjectReference {
        api_version: s(&obj["apiVersion"]),
        kind: Some(kind.to_string()),
        name: Some(name(obj)),
        namespace: Some(ns.clone()),
        uid: s(&meta["uid"]),
        resource_version: s(&meta["resourceVersion"]),
        field_path: None,
    };
    let note = format!("{verb} \"{kind} {ns}/{}\"{suffix}", name(obj));
    let regarding = capw_reconcile::events::reference(cluster, &());
    ctx.event_about(&regarding, related, false, reason, note)
        .await;
}

/// Upstream's suffix for a control plane or MachineDeployment whose version changes.
fn version_change(current: &Value, desired: &Value) -> String {
    let version = |o: &Value| {
        o["spec"]["version"]
            .as_str()
            .or(o["spec"]["template"]["spec"]["version"].as_str())
            .map(str::to_string)
    };
    match (version(current), version(desired)) {
        (Some(from), Some(to)) if from != to => format!(" with version change from {from} to {to}"),
        _ => String::new(),
    }
}

/// Server-side applies a provider object or template; returns it as written.
async fn apply(ctx: &CoreCtx, ns: &str, obj: &Value) -> Result<Value, TopologyError> {
    let (group, kind) = group_kind(obj);
    let r = ctx.resolver.resolve(&group, &kind).await?;
    let written = ctx
        .resolver
        .api(ns, &r)
        .patch(&name(obj), &apply_params(), &Patch::Apply(obj))
        .await?;
    Ok(serde_json::to_value(written)?)
}

/// [`apply`], and the Event saying so (`current`: what it replaces, for an update).
async fn write(
    ctx: &CoreCtx,
    cluster: &Cluster,
    obj: &Value,
    current: Option<&Value>,
) -> Result<Value, TopologyError> {
    let ns = cluster.namespace().unwrap_or_default();
    let written = apply(ctx, &ns, obj).await?;
    report(ctx, cluster, obj, &written, current).await;
    Ok(written)
}

/// The Event for a write of `desired`: created where nothing was, updated where the write
/// moved the resourceVersion (an apply that changes nothing keeps it, and is no update).
async fn report(
    ctx: &CoreCtx,
    cluster: &Cluster,
    desired: &Value,
    written: &Value,
    current: Option<&Value>,
) {
    let rv = |o: &Value| o["metadata"]["resourceVersion"].clone();
    match current {
        None => record(ctx, cluster, CREATED, written, "").await,
        Some(c) if rv(c) != rv(written) => {
            record(ctx, cluster, UPDATED, written, &version_change(c, desired)).await
        }
        Some(_) => {}
    }
}

/// A typed object as JSON with its apiVersion and kind, which [`record`] names it by.
fn typed<K>(obj: &K) -> Result<Value, TopologyError>
where
    K: kube::Resource<DynamicType = ()> + serde::Serialize,
{
    let mut v = serde_json::to_value(obj)?;
    v["apiVersion"] = json!(K::api_version(&()));
    v["kind"] = json!(K::kind(&()));
    Ok(v)
}

async fn delete(ctx: &CoreCtx, cluster: &Cluster, obj: &Value) -> Result<(), TopologyError> {
    let ns = cluster.namespace().unwrap_or_default();
    let (group, kind) = group_kind(obj);
    let r = ctx.resolver.resolve(&group, &kind).await?;
    if super::delete_if_present(&ctx.resolver.api(&ns, &r), &name(obj)).await? {
        record(ctx, cluster, DELETED, obj, "").await;
    }
    Ok(())
}

/// What the desired object sets, compared with what exists: spec, labels, annotations.
fn changed(desired: &Value, current: &Value) -> bool {
    let meta = |o: &Value| {
        json!({
            "labels": o["metadata"]["labels"],
            "annotations": o["metadata"]["annotations"],
        })
    };
    !contained(&desired["spec"], &current["spec"]) || !contained(&meta(desired), &meta(current))
}

/// The shim Secret: an owner for the infrastructure cluster and control plane created before
/// the Cluster references (and so adopts) them; a Cluster deleted in between still takes
/// them along. Returns its owner reference while it is needed.
async fn shim(
    ctx: &CoreCtx,
    cluster: &Cluster,
    current: &Current,
) -> Result<Option<Value>, TopologyError> {
    let ns = cluster.namespace().unwrap_or_default();
    let shim_name = format!("{}-shim", cluster.name_any());
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let owned_by_cluster = |o: &Option<Value>| {
        o.as_ref().is_some_and(|o| {
            o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|refs| {
                    refs.iter().any(|r| {
                        r["kind"] == "Cluster"
                            && r["uid"] == json!(cluster.uid().unwrap_or_default())
                    })
                })
        })
    };
    let exists = ctx
        .secrets
        .get(&ObjectRef::new(&shim_name).within(&ns))
        .is_some();
    if owned_by_cluster(&current.infrastructure) && owned_by_cluster(&current.control_plane) {
        if exists {
            super::delete_if_present(&api, &shim_name).await?;
        }
        return Ok(None);
    }
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "cluster.x-k8s.io/secret",
        "metadata": {
            "name": shim_name,
            "namespace": ns,
            "labels": {CLUSTER_NAME_LABEL: cluster.name_any(), TOPOLOGY_OWNED_LABEL: ""},
            "ownerReferences": [cluster_owner(cluster)],
        },
    });
    let written = api
        .patch(&shim_name, &apply_params(), &Patch::Apply(&secret))
        .await?;
    Ok(Some(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "name": shim_name,
        "uid": written.uid().unwrap_or_default(),
    })))
}

/// Creates or updates a cluster-level object (infrastructure cluster, control plane); a new
/// one gets the shim as its owner.
async fn reconcile_object(
    ctx: &CoreCtx,
    cluster: &Cluster,
    desired: &Value,
    current: Option<&Value>,
    shim: Option<&Value>,
) -> Result<(), TopologyError> {
    match current {
        Some(c) if !changed(desired, c) => Ok(()),
        Some(c) => write(ctx, cluster, desired, Some(c)).await.map(drop),
        None => {
            let mut obj = desired.clone();
            if let Some(s) = shim {
                obj["metadata"]["ownerReferences"] = json!([s]);
            }
            write(ctx, cluster, &obj, None).await.map(drop)
        }
    }
}

/// Writes a template, rotating it when its spec changed: returns the name the holder must
/// reference, and the replaced template, if any.
async fn reconcile_template(
    ctx: &CoreCtx,
    cluster: &Cluster,
    desired: &mut Value,
    current: Option<&Value>,
    fresh_name: impl FnOnce() -> String,
) -> Result<Option<Value>, TopologyError> {
    match current {
        None => {
            write(ctx, cluster, desired, None).await?;
            Ok(None)
        }
        Some(c) if contained(&desired["spec"], &c["spec"]) => {
            if changed(desired, c) {
                write(ctx, cluster, desired, Some(c)).await?;
            }
            Ok(None)
        }
        Some(c) => {
            desired["metadata"]["name"] = json!(fresh_name());
            write(ctx, cluster, desired, None).await?;
            Ok(Some(c.clone()))
        }
    }
}

async fn reconcile_health_check(
    ctx: &CoreCtx,
    cluster: &Cluster,
    desired: Option<&Value>,
    current: Option<&MachineHealthCheck>,
) -> Result<(), TopologyError> {
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<MachineHealthCheck> = Api::namespaced(ctx.client.clone(), &ns);
    match (desired, current) {
        (None, None) => Ok(()),
        (None, Some(c)) => {
            if super::delete_if_present(&api, &c.name_any()).await? {
                record(ctx, cluster, DELETED, &typed(c)?, "").await;
            }
            Ok(())
        }
        (Some(d), c) => {
            let c = c.map(serde_json::to_value).transpose()?;
            if let Some(c) = &c
                && !changed(d, c)
            {
                return Ok(());
            }
            let written = api
                .patch(&name(d), &apply_params(), &Patch::Apply(d))
                .await?;
            report(ctx, cluster, d, &typed(&written)?, c.as_ref()).await;
            Ok(())
        }
    }
}

/// Points the control plane at its (possibly rotated) machine template.
fn set_machine_ref(control_plane: &mut Value, template: &Value) {
    if let Some(r) = control_plane.pointer_mut(CONTROL_PLANE_MACHINE_REF) {
        r["name"] = template["metadata"]["name"].clone();
    }
}

pub(super) async fn reconcile(
    ctx: &CoreCtx,
    cluster: &Cluster,
    current: &Current,
    desired: &mut Desired,
) -> Result<(), TopologyError> {
    let ns = cluster.namespace().unwrap_or_default();
    let cluster_name = cluster.name_any();
    let shim = shim(ctx, cluster, current).await?;

    reconcile_object(
        ctx,
        cluster,
        &desired.infrastructure,
        current.infrastructure.as_ref(),
        shim.as_ref(),
    )
    .await?;

    // The control plane: its health check, then (unless an upgrade is pending, which would
    // make this a second rollout) its machine template and itself.
    reconcile_health_check(
        ctx,
        cluster,
        desired.control_plane_health_check.as_ref(),
        current.control_plane_health_check.as_deref(),
    )
    .await?;
    let cp_on_hold = current.control_plane.is_some() && desired.control_plane_tracker.pending;
    if !cp_on_hold {
        let mut replaced = None;
        if let Some(template) = desired.control_plane_machine.as_mut() {
            replaced = reconcile_template(
                ctx,
                cluster,
                template,
                current.control_plane_machine.as_ref(),
                || naming::control_plane_machine_template(&cluster_name),
            )
            .await?;
            let template = template.clone();
            set_machine_ref(&mut desired.control_plane, &template);
        }
        reconcile_object(
            ctx,
            cluster,
            &desired.control_plane,
            current.control_plane.as_ref(),
            shim.as_ref(),
        )
        .await?;
        if let Some(old) = replaced {
            delete(ctx, cluster, &old).await?;
        }
    }

    // The Cluster's references and labels.
    let want_infra = reference(&desired.infrastructure);
    let want_cp = reference(&desired.control_plane);
    let has = |r: &Option<capw_api::common::ContractVersionedObjectReference>, want: &Value| {
        r.as_ref().is_some_and(|r| json!(r) == *want)
    };
    let labelled = cluster.labels().get(CLUSTER_NAME_LABEL) == Some(&cluster_name)
        && cluster.labels().contains_key(TOPOLOGY_OWNED_LABEL);
    if !has(&cluster.spec.infrastructure_ref, &want_infra)
        || !has(&cluster.spec.control_plane_ref, &want_cp)
        || !labelled
    {
        let patch = json!({
            "metadata": {"labels": {CLUSTER_NAME_LABEL: cluster_name, TOPOLOGY_OWNED_LABEL: ""}},
            "spec": {"infrastructureRef": want_infra, "controlPlaneRef": want_cp},
        });
        let written = Api::<Cluster>::namespaced(ctx.client.clone(), &ns)
            .patch(
                &cluster_name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        record(ctx, cluster, UPDATED, &typed(&written)?, "").await;
    }

    reconcile_deployments(ctx, cluster, current, desired).await
}

async fn reconcile_deployments(
    ctx: &CoreCtx,
    cluster: &Cluster,
    current: &Current,
    desired: &mut Desired,
) -> Result<(), TopologyError> {
    let ns = &cluster.namespace().unwrap_or_default();
    let cluster_name = &cluster.name_any();
    let api: Api<MachineDeployment> = Api::namespaced(ctx.client.clone(), ns);
    for d in desired.deployments.iter_mut() {
        let Some(c) = current.deployments.get(&d.topology) else {
            if desired.workers.pending_create.contains(&d.topology) {
                continue;
            }
            write(ctx, cluster, &d.infrastructure, None).await?;
            write(ctx, cluster, &d.bootstrap, None).await?;
            let written = api
                .patch(&name(&d.object), &apply_params(), &Patch::Apply(&d.object))
                .await?;
            report(ctx, cluster, &d.object, &typed(&written)?, None).await;
            reconcile_health_check(ctx, cluster, d.health_check.as_ref(), None).await?;
            continue;
        };
        reconcile_health_check(
            ctx,
            cluster,
            d.health_check.as_ref(),
            c.health_check.as_deref(),
        )
        .await?;
        if c.object.metadata.deletion_timestamp.is_some()
            || desired.workers.pending_upgrade.contains(&d.topology)
        {
            continue;
        }
        let topology = d.topology.clone();
        let fresh = || naming::machine_deployment_template(cluster_name, &topology);
        reconcile_template(
            ctx,
            cluster,
            &mut d.infrastructure,
            c.infrastructure.as_ref(),
            fresh,
        )
        .await?;
        reconcile_template(ctx, cluster, &mut d.bootstrap, c.bootstrap.as_ref(), fresh).await?;
        let spec = &mut d.object["spec"]["template"]["spec"];
        spec["infrastructureRef"]["name"] = d.infrastructure["metadata"]["name"].clone();
        spec["bootstrap"]["configRef"]["name"] = d.bootstrap["metadata"]["name"].clone();
        let was = serde_json::to_value(&*c.object)?;
        if changed(&d.object, &was) {
            let written = api
                .patch(&name(&d.object), &apply_params(), &Patch::Apply(&d.object))
                .await?;
            report(ctx, cluster, &d.object, &typed(&written)?, Some(&was)).await;
        }
    }
    // MachineDeployment topologies that were removed: the health check, then the deployment;
    // its templates go with its MachineSets (the topology finalizers).
    for (topology, c) in &current.deployments {
        if desired.deployments.iter().any(|d| d.topology == *topology)
            || c.object.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        reconcile_health_check(ctx, cluster, None, c.health_check.as_deref()).await?;
        if super::delete_if_present(&api, &c.object.name_any()).await? {
            record(ctx, cluster, DELETED, &typed(&*c.object)?, "").await;
        }
    }
    Ok(())
}
