//! The MachineSet's Machines: the cluster label and owner on the set, the templates (owned by
//! the Cluster), adoption of orphans, in-place propagation, and scaling. A new Machine gets a
//! bootstrap config and an infrastructure machine cloned from the templates (upstream's
//! `CreateFromTemplate`: the kind is the template's kind without `Template`), named like the
//! Machine and annotated with where they were cloned from.

use super::{RECHECK, Scope, deletion_order, preflight};
use crate::adopt;
use crate::context::CoreCtx;
use crate::error::ReconcileError;
use crate::machine_conditions;
use crate::machinedeployment::revisions;
use crate::naming;
use capw_api::common::ContractVersionedObjectReference;
use capw_api::common::names::{
    API_VERSION, CLONED_FROM_GROUPKIND_ANNOTATION, CLONED_FROM_NAME_ANNOTATION, CLUSTER_NAME_LABEL,
    DEPLOYMENT_NAME_LABEL, DISABLE_MACHINE_CREATE_ANNOTATION, MACHINE_FINALIZER, SET_NAME_LABEL,
    SKIP_PREFLIGHT_ANNOTATION,
};
use capw_api::contract::conditions::{self, types};
use capw_api::contract::fields;
use capw_api::machine::Machine;
use capw_api::machineset::MachineSet;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// The cluster-name label on the set (written by the defaults) and, for a stand-alone set, a
/// plain owner reference to the Cluster.
pub(super) async fn reconcile_owner_and_labels(
    scope: &Scope,
    ctx: &CoreCtx,
) -> Result<(), ReconcileError> {
    let ms = &scope.ms;
    let standalone = !ms.labels().contains_key(DEPLOYMENT_NAME_LABEL)
        && !ms
            .owner_references()
            .iter()
            .any(|o| o.kind == "MachineDeployment" || o.kind == "Cluster");
    if !standalone {
        return Ok(());
    }
    let api: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &scope.ns());
    adopt::ensure_cluster_owner(&api, &**ms, &scope.cluster).await?;
    Ok(())
}

/// The set's Machines from the cache: those it controls, and orphans its selector matches,
/// which it adopts (events `SuccessfulAdopt`/`FailedAdopt`). Deleting Machines stay in the
/// set: they count in `status.replicas`.
pub(super) async fn adopt(scope: &mut Scope, ctx: &CoreCtx) -> Result<(), ReconcileError> {
    let ns = scope.ns();
    let uid = scope.ms.uid().unwrap_or_default();
    let mut mine = vec![];
    let mut orphans = vec![];
    // A set's Machines, and the orphans it may adopt, are in its cluster.
    for m in ctx.machines_of(&ns, &scope.spec.cluster_name) {
        match m
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
        {
            Some(o) if o.uid == uid => mine.push(m),
            Some(_) => {}
            None => {
                if m.spec.cluster_name == scope.spec.cluster_name
                    && scope.spec.selector.matches(m.labels())
                    && m.metadata.deletion_timestamp.is_none()
                {
                    orphans.push(m)
                }
            }
        }
    }
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &ns);
    for m in orphans {
        let controller = adopt::owner_ref("MachineSet", &scope.name(), &uid, true);
        match adopt::claim(&api, &*m, Some(controller), Default::default()).await {
            Ok(Some(adopted)) => {
                ctx.event_about(
                    &scope.object_ref(),
                    m.object_ref(&()),
                    false,
                    "SuccessfulAdopt",
                    format!("Adopted Machine {}", m.name_any()),
                )
                .await;
                mine.push(Arc::new(adopted));
            }
            // Someone else changed it first: the change wakes this set again.
            Ok(None) => {}
            Err(e) => {
                ctx.event_about(
                    &scope.object_ref(),
                    m.object_ref(&()),
                    true,
                    "FailedAdopt",
                    format!("Failed to adopt Machine {}: {e}", m.name_any()),
                )
                .await;
                return Err(e.into());
            }
        }
    }
    mine.sort_by_key(|m| m.name_any());
    let key = format!("{ns}/{}", scope.name());
    let (created, deleted) = ctx.expectations.unmet(
        &key,
        |n| ctx.machines.get(&ObjectRef::new(n).within(&ns)).is_some(),
        |n| {
            ctx.machines
                .get(&ObjectRef::new(n).within(&ns))
                .is_none_or(|m| m.metadata.deletion_timestamp.is_some())
        },
    );
    scope.unseen_created = created;
    scope.unseen_deleted = deleted;
    scope.machines = mine;
    Ok(())
}

/// The labels every Machine of the set carries.
fn machine_labels(scope: &Scope) -> BTreeMap<String, String> {
    let mut labels = scope.spec.template.labels();
    labels.insert(SET_NAME_LABEL.into(), naming::label_value(&scope.name()));
    if let Some(md) = scope.ms.labels().get(DEPLOYMENT_NAME_LABEL) {
        labels.insert(DEPLOYMENT_NAME_LABEL.into(), md.clone());
    }
    labels.insert(CLUSTER_NAME_LABEL.into(), scope.spec.cluster_name.clone());
    labels
}

/// A clone of a template for one Machine, built but not yet written (upstream's
/// `CreateFromTemplate`).
struct TemplateClone {
    reference: ContractVersionedObjectReference,
    target: capw_reconcile::external::Resolved,
    object: Value,
}

/// Builds the clone of `template` for the Machine `name`: it fails, naming `field`, before
/// anything is written when the template is missing or is not a template.
async fn clone_template(
    scope: &Scope,
    ctx: &CoreCtx,
    field: &str,
    template: &ContractVersionedObjectReference,
    name: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<TemplateClone, ReconcileError> {
    let ns = scope.ns();
    let Some(kind) = template
        .kind
        .strip_suffix("Template")
        .filter(|k| !k.is_empty())
    else {
        return Err(ReconcileError::Invalid(format!(
            "MachineSet {ns}/{}: {field} names {} {}, which is not a template: name a {}Template",
            scope.name(),
            template.kind,
            template.name,
            template.kind
        )));
    };
    let Some((source, _)) = ctx.resolver.get(&ns, template).await? else {
        return Err(ReconcileError::Invalid(format!(
            "MachineSet {ns}/{}: {field} names {} {}, which does not exist",
            scope.name(),
            template.kind,
            template.name
        )));
    };
    let target = ctx.resolver.resolve(&template.api_group, kind).await?;
    let embedded = |key: &str| -> BTreeMap<String, String> {
        source
            .data
            .pointer(&format!("/spec/template/metadata/{key}"))
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default()
    };
    let mut all_labels = embedded("labels");
    all_labels.extend(labels.clone());
    let mut all_annotations = embedded("annotations");
    all_annotations.extend(annotations.clone());
    all_annotations.insert(CLONED_FROM_NAME_ANNOTATION.into(), template.name.clone());
    all_annotations.insert(
        CLONED_FROM_GROUPKIND_ANNOTATION.into(),
        format!("{}.{}", template.kind, template.api_group),
    );
    let object = json!({
        "apiVersion": target.ar.api_version, "kind": kind,
        "metadata": {"name": name, "namespace": ns, "labels": all_labels, "annotations": all_annotations},
        "spec": source.data.pointer(fields::TEMPLATE_SPEC).cloned().unwrap_or(json!({})),
    });
    Ok(TemplateClone {
        reference: ContractVersionedObjectReference {
            api_group: template.api_group.clone(),
            kind: kind.to_string(),
            name: name.to_string(),
        },
        target,
        object,
    })
}

/// Writes `clone` with `machine` as its controller, as the Machine controller would make it:
/// born adopted, it needs no second write for the owner reference.
async fn create_clone(
    ctx: &CoreCtx,
    ns: &str,
    clone: &TemplateClone,
    machine: &Machine,
) -> Result<(), ReconcileError> {
    let mut object = clone.object.clone();
    object["metadata"]["ownerReferences"] = json!([adopt::owner_ref(
        "Machine",
        &machine.name_any(),
        &machine.uid().unwrap_or_default(),
        true
    )]);
    let mut obj: DynamicObject =
        serde_json::from_value(object).map_err(|e| ReconcileError::Invalid(e.to_string()))?;
    ctx.resolver.mark(&clone.target, &mut obj);
    match ctx
        .resolver
        .api(ns, &clone.target)
        .create(&PostParams::default(), &obj)
        .await
    {
        Ok(created) => {
            ctx.resolver.created(&clone.target, created);
            Ok(())
        }
        // Left by an earlier attempt that failed after it: reuse it. The Machine controller
        // adopts it only if nothing else controls it.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn delete_clone(ctx: &CoreCtx, ns: &str, r: &ContractVersionedObjectReference) {
    if let Ok(resolved) = ctx.resolver.resolve(&r.api_group, &r.kind).await {
        let _ = ctx
            .resolver
            .api(ns, &resolved)
            .delete(&r.name, &DeleteParams::background())
            .await;
    }
}

fn machine_name(scope: &Scope) -> Result<String, ReconcileError> {
    let template = scope
        .spec
        .machine_naming
        .as_ref()
        .and_then(|n| n.template.clone());
    match template {
        None => Ok(naming::with_suffix(&scope.name(), &naming::random_suffix())),
        Some(t) => naming::from_template(
            &t,
            &scope.spec.cluster_name,
            ".machineSet.name",
            &scope.name(),
        )
        .map_err(|e| {
            ReconcileError::Invalid(format!(
                "MachineSet {}/{}: spec.machineNaming.template: {e}",
                scope.ns(),
                scope.name()
            ))
        }),
    }
}

/// Creates one Machine, then its clones owned by it; on failure nothing it made is left behind.
///
/// Upstream writes the clones first, owned by the set, and the Machine controller then makes
/// the Machine their controller: two more writes per Machine, and two more wake-ups of their
/// providers. The Machine first lets the clones be born with their final owner. Both templates
/// are read before anything is written, so a missing one still leaves nothing behind. The
/// Machine's references dangle until the clones are written; the clones are then noted with
/// the resolver, so a Machine controller that reads them before their cache has them finds
/// them rather than reporting them missing.
async fn create_one(scope: &Scope, ctx: &CoreCtx) -> Result<String, ReconcileError> {
    let ns = scope.ns();
    let name = machine_name(scope)?;
    let labels = machine_labels(scope);
    let annotations = scope.spec.template.annotations();
    let mut spec = scope.spec.template.spec.clone();
    spec.cluster_name = scope.spec.cluster_name.clone();
    let mut clones = vec![];
    if let Some(config) = spec.bootstrap.config_ref.clone() {
        let c = clone_template(
            scope,
            ctx,
            "spec.template.spec.bootstrap.configRef",
            &config,
            &name,
            &labels,
            &annotations,
        )
        .await?;
        spec.bootstrap.config_ref = Some(c.reference.clone());
        clones.push(c);
    }
    let infra = clone_template(
        scope,
        ctx,
        "spec.template.spec.infrastructureRef",
        &spec.infrastructure_ref,
        &name,
        &labels,
        &annotations,
    )
    .await?;
    spec.infrastructure_ref = infra.reference.clone();
    clones.push(infra);
    let machine = json!({
        "apiVersion": API_VERSION, "kind": "Machine",
        "metadata": {
            "name": name, "namespace": ns, "labels": labels, "annotations": annotations,
            "finalizers": [MACHINE_FINALIZER],
            "ownerReferences": [adopt::owner_ref("MachineSet", &scope.name(), &scope.ms.uid().unwrap_or_default(), true)],
        },
        "spec": spec,
    });
    let machine: Machine =
        serde_json::from_value(machine).map_err(|e| ReconcileError::Invalid(e.to_string()))?;
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &ns);
    let machine = api.create(&PostParams::default(), &machine).await?;
    for (i, clone) in clones.iter().enumerate() {
        if let Err(e) = create_clone(ctx, &ns, clone, &machine).await {
            for made in &clones[..i] {
                delete_clone(ctx, &ns, &made.reference).await;
            }
            // Its finalizer lets the Machine controller finish the deletion.
            let _ = api.delete(&name, &DeleteParams::background()).await;
            return Err(e);
        }
    }
    Ok(name)
}

/// Whether scaling up may go on now; records why not.
async fn may_scale_up(scope: &mut Scope, ctx: &CoreCtx) -> Result<bool, ReconcileError> {
    if scope.is_current_revision() && !scope.missing_templates.is_empty() {
        scope.blocked = scope.missing_templates.clone();
        return Ok(false);
    }
    let failed = run_preflight(scope, ctx).await?;
    if !failed.is_empty() {
        scope.blocked = failed;
        scope.requeue_after(RECHECK);
        return Ok(false);
    }
    Ok(true)
}

/// The preflight checks against the Cluster's control plane (read through its ref).
pub(super) async fn run_preflight(
    scope: &Scope,
    ctx: &CoreCtx,
) -> Result<Vec<String>, ReconcileError> {
    let ns = scope.ns();
    let cp = match scope
        .cluster
        .spec
        .control_plane_ref
        .as_ref()
        .filter(|r| r.is_set())
    {
        None => None,
        Some(r) => ctx
            .resolver
            .get(&ns, r)
            .await?
            .map(|(o, _)| preflight::ControlPlane {
                describe: format!("{} {ns}/{}", r.kind, r.name),
                spec_version: o
                    .data
                    .pointer(fields::SPEC_VERSION)
                    .and_then(Value::as_str)
                    .map(str::to_string),
                status_version: o
                    .data
                    .pointer(fields::STATUS_VERSION)
                    .and_then(Value::as_str)
                    .map(str::to_string),
            }),
    };
    let skip = scope
        .ms
        .annotations()
        .get(SKIP_PREFLIGHT_ANNOTATION)
        .cloned();
    Ok(preflight::failures(
        cp.as_ref(),
        scope.spec.template.spec.version.as_deref(),
        scope.spec.template.spec.bootstrap.config_ref.as_ref(),
        skip.as_deref(),
        scope
            .cluster
            .spec
            .topology
            .as_ref()
            .map(|t| t.version.as_str()),
    ))
}

/// `syncReplicas`: creates the missing Machines in one pass, or deletes the surplus by
/// deletion priority. Deleting Machines count as existing, so a replacement comes only once
/// the Machine it replaces is gone.
pub(super) async fn sync_replicas(scope: &mut Scope, ctx: &CoreCtx) -> Result<(), ReconcileError> {
    let ns = scope.ns();
    let key = format!("{ns}/{}", scope.name());
    let desired = scope.replicas();
    // Created Machines the cache does not show yet exist all the same.
    let current = (scope.machines.len() + scope.unseen_created.len()) as i32;
    if desired > current {
        if scope
            .ms
            .annotations()
            .contains_key(DISABLE_MACHINE_CREATE_ANNOTATION)
        {
            return Ok(());
        }
        if !may_scale_up(scope, ctx).await? {
            return Ok(());
        }
        let mut created = vec![];
        let mut first_error = None;
        for _ in 0..desired - current {
            match create_one(scope, ctx).await {
                Ok(name) => {
                    ctx.event_about(
                        &scope.object_ref(),
                        ObjectRef::<Machine>::new(&name).within(&ns).into(),
                        false,
                        "SuccessfulCreate",
                        format!("Created Machine {name}"),
                    )
                    .await;
                    created.push(name);
                }
                Err(e) => {
                    ctx.event(
                        &scope.object_ref(),
                        true,
                        "FailedCreate",
                        format!("Failed to create Machine: {e}"),
                    )
                    .await;
                    first_error.get_or_insert(e);
                }
            }
        }
        ctx.expectations.created(&key, &created);
        return first_error.map_or(Ok(()), Err);
    }
    if current > desired {
        let order = scope
            .spec
            .deletion
            .as_ref()
            .and_then(|d| d.order.clone())
            .unwrap_or_else(|| deletion_order::RANDOM.into());
        let all: Vec<&Machine> = scope.machines.iter().map(|m| &**m).collect();
        let surplus = (current - desired) as usize;
        // Machines this set deleted count as deleting even while the cache lags behind.
        let victims: Vec<String> = deletion_order::victims(&all, surplus, &order, now())
            .into_iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .map(|m| m.name_any())
            .filter(|n| !scope.unseen_deleted.contains(n))
            .take(surplus.saturating_sub(scope.unseen_deleted.len()))
            .collect();
        let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &ns);
        for name in &victims {
            match api.delete(name, &DeleteParams::background()).await {
                Ok(_) => {
                    ctx.event_about(
                        &scope.object_ref(),
                        ObjectRef::<Machine>::new(name).within(&ns).into(),
                        false,
                        "SuccessfulDelete",
                        format!("Deleted Machine {name}"),
                    )
                    .await
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        ctx.expectations.deleted(&key, &victims);
    }
    Ok(())
}

/// Deletes every Machine of the set (its deletion).
pub(super) async fn delete_all(scope: &Scope, ctx: &CoreCtx) -> Result<(), ReconcileError> {
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &scope.ns());
    for m in scope
        .machines
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
    {
        match api.delete(&m.name_any(), &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `syncMachines`: labels, annotations, readiness gates, minReadySeconds and the deletion
/// timeouts follow the template in place; Machines of a deployment's set get `UpToDate`.
pub(super) async fn sync(scope: &mut Scope, ctx: &CoreCtx) -> Result<(), ReconcileError> {
    let labels = machine_labels(scope);
    let annotations = scope.spec.template.annotations();
    let t = &scope.spec.template.spec;
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &scope.ns());
    let not_up_to_date = scope
        .md
        .as_ref()
        .map(|md| revisions::set_not_up_to_date(&scope.ms, md, now()));
    for m in &scope.machines {
        if m.metadata.deletion_timestamp.is_none() {
            let mut patch = serde_json::Map::new();
            let missing = |want: &BTreeMap<String, String>, have: &BTreeMap<String, String>| {
                want.iter().any(|(k, v)| have.get(k) != Some(v))
            };
            if missing(&labels, m.labels()) || missing(&annotations, m.annotations()) {
                patch.insert(
                    "metadata".into(),
                    json!({"labels": labels, "annotations": annotations}),
                );
            }
            if m.spec.readiness_gates != t.readiness_gates
                || m.spec.min_ready_seconds != t.min_ready_seconds
                || m.spec.deletion != t.deletion
            {
                patch.insert(
                    "spec".into(),
                    json!({"readinessGates": t.readiness_gates, "minReadySeconds": t.min_ready_seconds, "deletion": t.deletion}),
                );
            }
            if !patch.is_empty() {
                api.patch(
                    &m.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&Value::Object(patch)),
                )
                .await?;
            }
        }
        if let Some(reasons) = &not_up_to_date {
            let (status, reason, message) = if reasons.is_empty() {
                ("True", conditions::reasons::UP_TO_DATE, String::new())
            } else {
                let lines: Vec<String> = reasons.iter().map(|r| format!("* {r}")).collect();
                (
                    "False",
                    conditions::reasons::NOT_UP_TO_DATE,
                    lines.join("\n"),
                )
            };
            machine_conditions::set(ctx, m, types::UP_TO_DATE, status, reason, &message).await?;
        }
    }
    Ok(())
}

/// The set's Machines as plain references, for the pure helpers.
pub(super) fn refs(scope: &Scope) -> Vec<&Machine> {
    scope.machines.iter().map(|m| &**m).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use capw_api::cluster::Cluster;
    use capw_api::machineset::MachineSetStatus;

    fn scope(labels: Value, naming: Option<&str>) -> Scope {
        let mut spec = json!({
            "clusterName": "c1",
            "template": {
                "metadata": {"labels": {"pool": "blue"}},
                "spec": {
                    "clusterName": "c1",
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "i"},
                },
            },
        });
        if let Some(t) = naming {
            spec["machineNaming"] = json!({"template": t});
        }
        let ms: MachineSet = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"name": "md-0-x7kq2", "namespace": "ns", "labels": labels},
            "spec": spec,
        }))
        .unwrap();
        let cluster: Cluster = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "ns"}, "spec": {},
        }))
        .unwrap();
        Scope {
            spec: ms.spec.clone(),
            ms: Arc::new(ms),
            cluster: Arc::new(cluster),
            md: None,
            machines: vec![],
            unseen_created: vec![],
            unseen_deleted: vec![],
            status: MachineSetStatus::default(),
            blocked: vec![],
            missing_templates: vec![],
            requeue: None,
        }
    }

    #[test]
    fn a_machine_carries_the_template_s_set_s_deployment_s_and_cluster_s_labels() {
        let labels = machine_labels(&scope(json!({DEPLOYMENT_NAME_LABEL: "md-0"}), None));
        assert_eq!(labels.get("pool").map(String::as_str), Some("blue"));
        assert_eq!(
            labels.get(SET_NAME_LABEL).map(String::as_str),
            Some("md-0-x7kq2")
        );
        assert_eq!(
            labels.get(DEPLOYMENT_NAME_LABEL).map(String::as_str),
            Some("md-0")
        );
        assert_eq!(
            labels.get(CLUSTER_NAME_LABEL).map(String::as_str),
            Some("c1")
        );
        let alone = machine_labels(&scope(json!({}), None));
        assert!(!alone.contains_key(DEPLOYMENT_NAME_LABEL), "{alone:?}");
    }

    #[test]
    fn machine_names_follow_the_naming_template_or_get_a_random_suffix() {
        let plain = machine_name(&scope(json!({}), None)).unwrap();
        assert!(plain.starts_with("md-0-x7kq2-"), "{plain}");
        assert_eq!(plain.len(), "md-0-x7kq2-".len() + 5, "{plain}");
        let named = machine_name(&scope(
            json!({}),
            Some("{{ .cluster.name }}-{{ .machineSet.name }}-{{ .random }}"),
        ))
        .unwrap();
        assert!(named.starts_with("c1-md-0-x7kq2-"), "{named}");
        let bad = machine_name(&scope(json!({}), Some("{{ .nope }}"))).unwrap_err();
        assert!(
            bad.to_string().contains("spec.machineNaming.template"),
            "{bad}"
        );
    }
}
