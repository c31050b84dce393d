//! The MachineDeployment's writes: its owner and templates, adoption of MachineSets, the
//! current set (found by template, created when missing, updated in place), the scale steps
//! [`super::rollout`] decides, and the removal of old sets once the rollout is complete.

use super::rollout::{self, SetCounts, Strategy};
use super::{Scope, revisions};
use crate::adopt;
use crate::context::CoreCtx;
use crate::error::ReconcileError;
use crate::naming;
use capw_api::common::names::{
    API_VERSION, CLUSTER_NAME_LABEL, DEPLOYMENT_NAME_LABEL, DESIRED_REPLICAS_ANNOTATION,
    DISABLE_MACHINE_CREATE_ANNOTATION, LAST_APPLIED_ANNOTATION, MACHINESET_FINALIZER,
    MAX_REPLICAS_ANNOTATION, REVISION_ANNOTATION, TEMPLATE_HASH_LABEL,
};
use capw_api::contract::conditions::types;
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machineset::{MachineSet, MachineTemplateSpec};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const CACHE_WAIT: Duration = Duration::from_secs(10);

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

use super::revisions::created;

/// A plain (non-controller) owner reference to the Cluster.
pub(super) fn reconcile_owner(scope: &mut Scope) {
    if let Some(p) = adopt::cluster_owner_patch(&*scope.md, &scope.cluster) {
        scope.patch_object(&p);
    }
}

/// The deployment's sets from the cache: those it controls and controller-less ones its
/// selector matches (adopted), each labelled with the deployment's name; oldest first.
pub(super) async fn adopt(scope: &mut Scope, ctx: &CoreCtx) -> Result<(), ReconcileError> {
    let ns = scope.ns();
    let uid = scope.md.uid().unwrap_or_default();
    let api: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &ns);
    let mut mine = vec![];
    for ms in ctx.machine_sets_of(&ns, &scope.spec.cluster_name) {
        let controller = ms
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .cloned();
        let ours = controller.as_ref().is_some_and(|o| o.uid == uid);
        let orphan = controller.is_none()
            && ms.spec.cluster_name == scope.spec.cluster_name
            && scope.spec.selector.matches(ms.labels());
        if !ours && !orphan {
            continue;
        }
        let labelled = ms.labels().get(DEPLOYMENT_NAME_LABEL) == Some(&scope.name());
        if ours && labelled {
            mine.push(ms);
            continue;
        }
        if orphan && ms.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let controller =
            orphan.then(|| adopt::owner_ref("MachineDeployment", &scope.name(), &uid, true));
        let labels =
            serde_json::Map::from_iter([(DEPLOYMENT_NAME_LABEL.to_string(), json!(scope.name()))]);
        if let Some(updated) = adopt::claim(&api, &*ms, controller, labels).await? {
            if orphan {
                ctx.event_about(
                    &scope.object_ref(),
                    ms.object_ref(&()),
                    false,
                    "SuccessfulAdopt",
                    format!("Adopted MachineSet {}", ms.name_any()),
                )
                .await;
            }
            mine.push(Arc::new(updated));
        }
    }
    mine.sort_by(|a, b| {
        created(a)
            .cmp(&created(b))
            .then(a.name_any().cmp(&b.name_any()))
    });
    scope.sets = mine;
    Ok(())
}

/// The deployment's annotations a set carries (upstream's `ComputeMachineSetAnnotations`).
fn set_annotations(
    md: &MachineDeployment,
    revision: i64,
    replicas: i32,
    surge: i32,
) -> BTreeMap<String, String> {
    let mut a: BTreeMap<String, String> = md
        .annotations()
        .iter()
        .filter(|(k, _)| {
            ![
                LAST_APPLIED_ANNOTATION,
                REVISION_ANNOTATION,
                DESIRED_REPLICAS_ANNOTATION,
                MAX_REPLICAS_ANNOTATION,
            ]
            .contains(&k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    a.insert(REVISION_ANNOTATION.into(), revision.to_string());
    a.insert(DESIRED_REPLICAS_ANNOTATION.into(), replicas.to_string());
    a.insert(
        MAX_REPLICAS_ANNOTATION.into(),
        (replicas + surge).to_string(),
    );
    a
}

/// The set's template: the deployment's, with the set's hash label.
fn set_template(scope: &Scope, hash: &str) -> MachineTemplateSpec {
    let mut t = scope.spec.template.clone();
    t.metadata
        .get_or_insert_with(Default::default)
        .labels
        .insert(TEMPLATE_HASH_LABEL.into(), hash.into());
    t
}

fn template_hash(scope: &Scope) -> String {
    let s = &scope.spec.template.spec;
    let key = json!([
        s.version,
        s.bootstrap,
        s.infrastructure_ref,
        s.failure_domain
    ])
    .to_string();
    let h = key.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("{h:x}")
}

/// Creates the set for the current template with `replicas` (upstream's
/// `computeDesiredMachineSet`), and waits until the cache shows it so no duplicate follows.
async fn create_set(
    scope: &Scope,
    ctx: &CoreCtx,
    revision: i64,
    replicas: i32,
    surge: i32,
) -> Result<Arc<MachineSet>, ReconcileError> {
    let ns = scope.ns();
    let suffix = naming::random_suffix();
    let name = naming::with_suffix(&scope.name(), &suffix);
    let hash = format!("{}-{suffix}", template_hash(scope));
    let mut labels = scope.spec.template.labels();
    labels.insert(TEMPLATE_HASH_LABEL.into(), hash.clone());
    labels.insert(DEPLOYMENT_NAME_LABEL.into(), scope.name());
    labels.insert(CLUSTER_NAME_LABEL.into(), scope.spec.cluster_name.clone());
    let mut selector = scope.spec.selector.clone();
    selector
        .match_labels
        .insert(TEMPLATE_HASH_LABEL.into(), hash.clone());
    let ms = json!({
        "apiVersion": API_VERSION, "kind": "MachineSet",
        "metadata": {
            "name": name, "namespace": ns, "labels": labels,
            "annotations": set_annotations(&scope.md, revision, scope.replicas(), surge),
            "ownerReferences": [adopt::owner_ref("MachineDeployment", &scope.name(), &scope.md.uid().unwrap_or_default(), true)],
            // The set's own finalizer from the start, as a MachineSet gives its Machines
            // theirs: the MachineSet controller would otherwise patch it in as its first write.
            "finalizers": [MACHINESET_FINALIZER],
        },
        "spec": {
            "clusterName": scope.spec.cluster_name,
            "replicas": replicas,
            "selector": selector,
            "template": set_template(scope, &hash),
            "machineNaming": scope.spec.machine_naming,
            "deletion": scope.spec.deletion,
        },
    });
    let ms: MachineSet =
        serde_json::from_value(ms).map_err(|e| ReconcileError::Invalid(e.to_string()))?;
    let api: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &ns);
    let created = api.create(&PostParams::default(), &ms).await?;
    ctx.event_about(
        &scope.object_ref(),
        created.object_ref(&()),
        false,
        "SuccessfulCreate",
        format!("Created MachineSet {ns}/{name} with {replicas} replicas"),
    )
    .await;
    let key = ObjectRef::new(&name).within(&ns);
    let deadline = tokio::time::Instant::now() + CACHE_WAIT;
    while ctx.machine_sets.get(&key).is_none() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Arc::new(created))
}

/// Keeps the in-place fields of the current set with the deployment's, and its revision.
async fn update_in_place(
    scope: &Scope,
    ctx: &CoreCtx,
    ms: &MachineSet,
    revision: i64,
) -> Result<(), ReconcileError> {
    let hash = ms
        .labels()
        .get(TEMPLATE_HASH_LABEL)
        .cloned()
        .unwrap_or_default();
    let mut want = set_template(scope, &hash);
    want.spec = in_place_spec(&ms.spec.template.spec, &want.spec);
    let same_template = ms.spec.template == want;
    let same_rest = ms.spec.deletion == scope.spec.deletion
        && ms.spec.machine_naming == scope.spec.machine_naming;
    let have_revision = revisions::revision(ms);
    if same_template && same_rest && have_revision >= revision {
        return Ok(());
    }
    let api: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &scope.ns());
    let patch = json!({
        "metadata": {"annotations": {REVISION_ANNOTATION: have_revision.max(revision).to_string()}},
        "spec": {"template": want, "deletion": scope.spec.deletion, "machineNaming": scope.spec.machine_naming},
    });
    api.patch(
        &ms.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// The set's Machine spec with the deployment's in-place fields (readiness gates,
/// minReadySeconds, deletion timeouts); the rollout fields stay the set's own.
fn in_place_spec(
    have: &capw_api::machine::MachineSpec,
    want: &capw_api::machine::MachineSpec,
) -> capw_api::machine::MachineSpec {
    let mut out = have.clone();
    out.min_ready_seconds = want.min_ready_seconds;
    out.readiness_gates = want.readiness_gates.clone();
    out.deletion = want.deletion.clone();
    out
}

/// The counts the arithmetic works on, from the Machines the cache holds. A set that has not
/// yet deleted what its spec asks will keep at most `spec` of its available Machines (it
/// deletes unavailable ones first), so only that many count: acting on a set's stale status
/// could otherwise take availability below the floor.
fn counts(ms: &MachineSet, machines: &[Arc<Machine>]) -> SetCounts {
    let uid = ms.uid().unwrap_or_default();
    let mine: Vec<&Arc<Machine>> = machines
        .iter()
        .filter(|m| {
            m.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect();
    let spec = ms.spec.replicas.unwrap_or(1);
    let deleting = mine
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_some())
        .count() as i32;
    let available = mine
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| crate::aggregate::has_true(m, types::AVAILABLE))
        .count() as i32;
    SetCounts {
        name: ms.name_any(),
        spec,
        current: mine.len() as i32,
        available: available.min(spec),
        deleting,
    }
}

async fn scale(
    scope: &Scope,
    ctx: &CoreCtx,
    ms: &MachineSet,
    to: i32,
    surge: i32,
) -> Result<(), ReconcileError> {
    let from = ms.spec.replicas.unwrap_or(1);
    let api: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &scope.ns());
    let patch = json!({
        "metadata": {"annotations": {
            DESIRED_REPLICAS_ANNOTATION: scope.replicas().to_string(),
            MAX_REPLICAS_ANNOTATION: (scope.replicas() + surge).to_string(),
        }},
        "spec": {"replicas": to},
    });
    match api
        .patch(
            &ms.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {
            ctx.event_about(
                &scope.object_ref(),
                ms.object_ref(&()),
                false,
                "SuccessfulScale",
                format!(
                    "Scaled MachineSet {}/{}: {from} -> {to}",
                    scope.ns(),
                    ms.name_any()
                ),
            )
            .await;
            Ok(())
        }
        Err(e) => {
            ctx.event_about(
                &scope.object_ref(),
                ms.object_ref(&()),
                true,
                "FailedScale",
                format!(
                    "Failed to scale MachineSet {}/{}: {e}",
                    scope.ns(),
                    ms.name_any()
                ),
            )
            .await;
            Err(e.into())
        }
    }
}

/// One rollout step: find (or, unless paused, create) the current set, then apply the plan.
/// A paused deployment only scales: its one active set follows `replicas`.
pub(super) async fn rollout(scope: &mut Scope, ctx: &CoreCtx) -> Result<(), ReconcileError> {
    let strategy = match Strategy::of(&scope.spec) {
        Ok(s) => s,
        Err(e) => {
            scope.rollout_error = Some(e.to_string());
            return Err(ReconcileError::Invalid(format!(
                "MachineDeployment {}/{}: {e}",
                scope.ns(),
                scope.name()
            )));
        }
    };
    let replicas = scope.replicas();
    let surge = strategy.max_surge();
    let sets: Vec<&MachineSet> = scope.sets.iter().map(|s| &**s).collect();
    let new = revisions::find_new(&scope.md, &sets, now()).map(|s| s.name_any());
    let max_old_revision = scope
        .sets
        .iter()
        .filter(|s| Some(s.name_any()) != new)
        .map(|s| revisions::revision(&**s))
        .max()
        .unwrap_or(0);
    let revision = max_old_revision + 1;
    let machines = scope.machines.clone();
    let paused = scope.spec.paused == Some(true);
    let new_set = match new {
        Some(name) => scope.sets.iter().find(|s| s.name_any() == name).cloned(),
        None if paused => None,
        None => {
            if !scope.missing_templates.is_empty() {
                return Err(ReconcileError::Invalid(format!(
                    "MachineDeployment {}/{}: cannot create a new MachineSet when templates do not exist: {}",
                    scope.ns(),
                    scope.name(),
                    scope.missing_templates.join(", ")
                )));
            }
            let old: Vec<SetCounts> = scope.sets.iter().map(|s| counts(s, &machines)).collect();
            let initial = rollout::new_set_replicas(strategy, replicas, &old, 0);
            let ms = create_set(scope, ctx, revision, initial, surge).await?;
            scope.sets.push(ms.clone());
            Some(ms)
        }
    };
    if let Some(ms) = &new_set {
        update_in_place(scope, ctx, ms, revision).await?;
        let rev = revisions::revision(&**ms).max(revision);
        if revisions::revision(&*scope.md) != rev {
            scope.patch_object(
                &json!({"metadata": {"annotations": {REVISION_ANNOTATION: rev.to_string()}}}),
            );
        }
    }
    if paused {
        let active: Vec<&Arc<MachineSet>> = scope
            .sets
            .iter()
            .filter(|s| s.spec.replicas.unwrap_or(1) > 0)
            .collect();
        let target = match (active.as_slice(), &new_set) {
            ([one], _) => Some((*one).clone()),
            ([], Some(n)) => Some(n.clone()),
            _ => None,
        };
        if let Some(ms) = target
            && ms.spec.replicas.unwrap_or(1) != replicas
        {
            scale(scope, ctx, &ms, replicas, surge).await?;
        }
        return Ok(());
    }
    let Some(new_set) = new_set else {
        return Ok(());
    };
    let new_counts = counts(&new_set, &machines);
    let old_sets: Vec<&Arc<MachineSet>> = scope
        .sets
        .iter()
        .filter(|s| s.name_any() != new_set.name_any())
        .collect();
    let old_counts: Vec<SetCounts> = old_sets.iter().map(|s| counts(s, &machines)).collect();
    let plan = rollout::plan(strategy, replicas, &new_counts, &old_counts);
    let api: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &scope.ns());
    for name in &plan.disable_create {
        if let Some(ms) = old_sets.iter().find(|s| &s.name_any() == name)
            && !ms
                .annotations()
                .contains_key(DISABLE_MACHINE_CREATE_ANNOTATION)
        {
            let patch =
                json!({"metadata": {"annotations": {DISABLE_MACHINE_CREATE_ANNOTATION: "true"}}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
    }
    if new_set
        .annotations()
        .contains_key(DISABLE_MACHINE_CREATE_ANNOTATION)
    {
        let patch = json!({"metadata": {"annotations": {DISABLE_MACHINE_CREATE_ANNOTATION: null}}});
        api.patch(
            &new_set.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    for (name, to) in &plan.scale {
        if let Some(ms) = scope.sets.iter().find(|s| &s.name_any() == name) {
            scale(scope, ctx, ms, *to, surge).await?;
        }
    }
    for name in &plan.delete {
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {
                ctx.event_about(
                    &scope.object_ref(),
                    ObjectRef::<MachineSet>::new(name)
                        .within(&scope.ns())
                        .into(),
                    false,
                    "SuccessfulDelete",
                    format!("Deleted MachineSet {}/{name}", scope.ns()),
                )
                .await
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Deletes every set of the deployment (its deletion).
pub(super) async fn delete_all(scope: &Scope, ctx: &CoreCtx) -> Result<(), ReconcileError> {
    let api: Api<MachineSet> = Api::namespaced(ctx.client.clone(), &scope.ns());
    for ms in scope
        .sets
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
    {
        match api
            .delete(&ms.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use capw_api::cluster::Cluster;
    use capw_api::machinedeployment::MachineDeploymentStatus;

    fn machine_spec(version: &str) -> serde_json::Value {
        json!({
            "clusterName": "c1",
            "version": version,
            "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "b"}},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "i"},
        })
    }

    fn deployment(annotations: serde_json::Value, spec: serde_json::Value) -> MachineDeployment {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "md", "namespace": "ns", "annotations": annotations},
            "spec": {"clusterName": "c1", "template": {"spec": spec}},
        }))
        .unwrap()
    }

    fn scope(md: MachineDeployment) -> Scope {
        let cluster: Cluster = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "ns"}, "spec": {},
        }))
        .unwrap();
        Scope {
            spec: md.spec.clone(),
            md: Arc::new(md),
            cluster: Arc::new(cluster),
            sets: vec![],
            machines: vec![],
            status: MachineDeploymentStatus::default(),
            missing_templates: vec![],
            rollout_error: None,
            requeue: None,
            object_patch: json!({}),
        }
    }

    fn machine(name: &str, owner_uid: &str, available: bool, deleting: bool) -> Arc<Machine> {
        let mut m = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": [{
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet", "name": "ms",
                "uid": owner_uid, "controller": true,
            }]},
            "spec": machine_spec("v1.29.10"),
            "status": {"conditions": [{
                "type": "Available", "status": if available { "True" } else { "False" },
                "reason": "X", "lastTransitionTime": "2026-01-01T00:00:00Z",
            }]},
        });
        if deleting {
            m["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            m["metadata"]["finalizers"] = json!(["machine.cluster.x-k8s.io"]);
        }
        Arc::new(serde_json::from_value(m).unwrap())
    }

    #[test]
    fn a_set_carries_the_deployment_s_annotations_but_not_its_revision_bookkeeping() {
        let md = deployment(
            json!({
                "team": "a",
                REVISION_ANNOTATION: "7",
                DESIRED_REPLICAS_ANNOTATION: "9",
                LAST_APPLIED_ANNOTATION: "{}",
            }),
            machine_spec("v1.29.10"),
        );
        let a = set_annotations(&md, 3, 2, 1);
        assert_eq!(a.get("team").map(String::as_str), Some("a"));
        assert_eq!(a.get(REVISION_ANNOTATION).map(String::as_str), Some("3"));
        assert_eq!(
            a.get(DESIRED_REPLICAS_ANNOTATION).map(String::as_str),
            Some("2")
        );
        assert_eq!(
            a.get(MAX_REPLICAS_ANNOTATION).map(String::as_str),
            Some("3")
        );
        assert!(!a.contains_key(LAST_APPLIED_ANNOTATION));
        assert_eq!(a.len(), 4, "{a:?}");
    }

    #[test]
    fn only_a_rollout_field_changes_the_template_hash() {
        let hash = |spec: serde_json::Value| template_hash(&scope(deployment(json!({}), spec)));
        let base = hash(machine_spec("v1.29.10"));
        assert_eq!(base, hash(machine_spec("v1.29.10")), "stable");
        assert_ne!(base, hash(machine_spec("v1.30.0")), "a version rolls out");
        let mut in_place = machine_spec("v1.29.10");
        in_place["minReadySeconds"] = json!(30);
        assert_eq!(
            base,
            hash(in_place),
            "minReadySeconds is propagated in place"
        );
        let mut moved = machine_spec("v1.29.10");
        moved["failureDomain"] = json!("fd-2");
        assert_ne!(base, hash(moved), "a failure domain rolls out");
    }

    #[test]
    fn in_place_fields_are_the_deployment_s_and_the_rest_stays_the_set_s() {
        let have: capw_api::machine::MachineSpec =
            serde_json::from_value(machine_spec("v1.29.10")).unwrap();
        let mut want_json = machine_spec("v1.30.0");
        want_json["minReadySeconds"] = json!(12);
        let want: capw_api::machine::MachineSpec = serde_json::from_value(want_json).unwrap();
        let out = in_place_spec(&have, &want);
        assert_eq!(out.min_ready_seconds, Some(12));
        assert_eq!(out.version.as_deref(), Some("v1.29.10"));
    }

    #[test]
    fn counts_see_the_set_s_own_machines_and_cap_available_at_its_spec() {
        let ms: MachineSet = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"name": "ms", "namespace": "ns", "uid": "u1"},
            "spec": {"clusterName": "c1", "replicas": 1, "template": {"spec": machine_spec("v1.29.10")}},
        }))
        .unwrap();
        let machines = [
            machine("a", "u1", true, false),
            machine("b", "u1", true, false),
            machine("c", "u1", true, true),
            machine("other", "u2", true, false),
        ];
        let c = counts(&ms, &machines);
        assert_eq!((c.spec, c.current, c.deleting), (1, 3, 1));
        assert_eq!(
            c.available, 1,
            "two are available, but the set keeps at most its spec"
        );
    }
}
