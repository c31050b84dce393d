//! The CRD controller: serves a CRD's kinds as soon as it is written, reports
//! `NamesAccepted`/`Established`, and on deletion removes every custom resource (honouring their
//! finalizers) before releasing the CRD.

use super::{ControllerConfig, delete, mutate};
use crate::core::{CRD_FINALIZER, Core, Propagation};
use crate::meta;
use crate::registry::types_from_crd;
use crate::store::{EventType, ObjKey};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

const CRD_STORAGE: &str = "apiextensions.k8s.io/customresourcedefinitions";

fn group_plural(crd: &Value) -> (String, String) {
    let s = |p: &str| {
        crd.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (s("/spec/group"), s("/spec/names/plural"))
}

/// Makes the registry serve what `crd` declares. Runs inline with the CRD write, so a client
/// may create custom resources right after the CRD create returns.
pub fn install(core: &Core, crd: &Value) {
    let (group, plural) = group_plural(crd);
    core.registry
        .set_custom(&group, &plural, types_from_crd(crd));
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, old: &Value) -> Value {
    let prev = old
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == type_));
    match prev {
        Some(p) if p["status"] == status && p["reason"] == reason => p.clone(),
        _ => json!({"type": type_, "status": status, "reason": reason, "message": message,
                    "lastTransitionTime": meta::now_rfc3339()}),
    }
}

/// The status the CRD controller converges to; a created CRD carries it at once, because its
/// kinds are served from the moment the create returns.
pub(crate) fn desired_status(crd: &Value) -> Value {
    let mut stored: Vec<Value> = crd
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for v in crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if v["storage"] == true && !stored.contains(&v["name"]) {
            stored.push(v["name"].clone());
        }
    }
    let mut conditions = vec![
        condition(
            "NamesAccepted",
            "True",
            "NoConflicts",
            "no conflicts found",
            crd,
        ),
        condition(
            "Established",
            "True",
            "InitialNamesAccepted",
            "the initial names have been accepted",
            crd,
        ),
    ];
    if meta::is_deleting(crd) {
        conditions.push(condition(
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
            crd,
        ));
    }
    json!({"acceptedNames": crd["spec"]["names"], "conditions": conditions, "storedVersions": stored})
}

async fn reconcile(core: &Core, crd: &Value) {
    let name = meta::str_field(crd, "name").to_string();
    let key = ObjKey::new(CRD_STORAGE, "", &name);
    let status = desired_status(crd);
    if crd.get("status") != Some(&status) {
        let set = move |mut o: Value| {
            o["status"] = status;
            Ok(o)
        };
        if let Err(e) = mutate(core, &key, "status", "apiextensions-apiserver", set).await {
            tracing::warn!(crd = %name, error = %e, "could not update CRD status");
        }
    }
    if !meta::is_deleting(crd) {
        return;
    }
    let (group, plural) = group_plural(crd);
    let (remaining, _) = core.store.list(&format!("{group}/{plural}"), None);
    for cr in &remaining {
        if meta::is_deleting(cr) {
            continue;
        }
        let k = ObjKey::new(
            &format!("{group}/{plural}"),
            meta::str_field(cr, "namespace"),
            meta::str_field(cr, "name"),
        );
        if let Err(e) = delete(core, &k, Propagation::Background).await {
            tracing::warn!(crd = %name, object = %k.name, error = %e, "could not delete custom resource");
        }
    }
    if core
        .store
        .list(&format!("{group}/{plural}"), None)
        .0
        .is_empty()
    {
        let release = |mut o: Value| {
            let fins: Vec<String> = meta::finalizers(&o)
                .into_iter()
                .filter(|f| f != CRD_FINALIZER)
                .collect();
            meta::meta_mut(&mut o).insert("finalizers".into(), json!(fins));
            Ok(o)
        };
        if let Err(e) = mutate(core, &key, "", "apiextensions-apiserver", release).await {
            tracing::warn!(crd = %name, error = %e, "could not release CRD finalizer");
        }
    }
}

async fn sweep(core: &Core) {
    for crd in core.store.list(CRD_STORAGE, None).0 {
        reconcile(core, &crd).await;
    }
}

/// Serves every stored CRD; called once at start-up before the server accepts requests.
pub fn install_all(core: &Core) {
    for crd in core.store.list(CRD_STORAGE, None).0 {
        install(core, &crd);
    }
}

pub async fn run(core: Arc<Core>, config: ControllerConfig) {
    let Ok((_, mut rx, _)) = core.store.subscribe(core.store.current_rv()) else {
        return;
    };
    sweep(&core).await;
    let mut tick = tokio::time::interval(config.resync);
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) if &*ev.key.gr == CRD_STORAGE => {
                    let Ok(crd) = ev.object.value() else { continue };
                    if ev.kind == EventType::Deleted {
                        let (group, plural) = group_plural(&crd);
                        core.registry.set_custom(&group, &plural, vec![]);
                    } else {
                        reconcile(&core, &crd).await;
                    }
                }
                Ok(ev) => {
                    // A custom resource of a deleting CRD went away: maybe the CRD can go now.
                    if ev.kind == EventType::Deleted && let Some((g, p)) = ev.key.gr.split_once('/')
                        && let Some(crd) = core.store.get(&ObjKey::new(CRD_STORAGE, "", &format!("{p}.{g}")))
                        && meta::is_deleting(&crd)
                    {
                        reconcile(&core, &crd).await;
                    }
                }
                Err(RecvError::Lagged(_)) => sweep(&core).await,
                Err(RecvError::Closed) => return,
            },
            _ = tick.tick() => sweep(&core).await,
        }
    }
}
