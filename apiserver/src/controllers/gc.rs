//! The garbage collector: deletes dependents whose owners are all gone, strips dangling owner
//! references from dependents that still have a live owner, and carries out the Foreground and
//! Orphan deletion policies.

use super::{ControllerConfig, delete, mutate};
use crate::core::{Core, Propagation};
use crate::meta;
use crate::store::{Event, EventType, ObjKey};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

const MANAGER: &str = "garbage-collector";

/// Sets a metadata list, removing the key when the list is empty: kube omits empty
/// `ownerReferences` and `finalizers`, and clients compare against the omitted form.
fn set_list(obj: &mut Value, key: &str, list: Vec<Value>) {
    let m = meta::meta_mut(obj);
    if list.is_empty() {
        m.remove(key);
    } else {
        m.insert(key.into(), Value::Array(list));
    }
}

fn owner_refs(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Whether the owner named by `uid` exists where a dependent in `dep_ns` can see it.
fn owner_alive(core: &Core, uid: &str, dep_ns: &str) -> bool {
    core.store
        .by_uid(uid)
        .is_some_and(|k| k.visible_from(dep_ns))
}

/// Collects one dependent if its owners are gone. Every write of every object comes here:
/// the owner index answers for the common case, a dependent whose owners all live, and only
/// a dependent with a dead owner has its metadata decoded.
async fn check_dependent(core: &Core, key: &ObjKey) {
    if core.store.has_dead_owner(key) != Some(true) {
        return;
    }
    let Some(Ok(obj)) = core.store.get_raw(key).map(|raw| raw.metadata()) else {
        return;
    };
    let refs = owner_refs(&obj);
    if refs.is_empty() {
        return;
    }
    let live: Vec<&Value> = refs
        .iter()
        .filter(|r| {
            r["uid"]
                .as_str()
                .is_some_and(|u| owner_alive(core, u, &key.ns))
        })
        .collect();
    let result = if live.is_empty() {
        if meta::is_deleting(&obj) {
            return;
        }
        delete(core, key, Propagation::Background).await
    } else if live.len() < refs.len() {
        let keep: Vec<Value> = live.into_iter().cloned().collect();
        mutate(core, key, "", MANAGER, move |mut o| {
            set_list(&mut o, "ownerReferences", keep);
            Ok(o)
        })
        .await
    } else {
        return;
    };
    if let Err(e) = result {
        tracing::warn!(object = %key.name, resource = %key.gr, error = %e, "garbage collection failed");
    }
}

fn without_finalizer(
    name: &'static str,
) -> impl FnOnce(Value) -> Result<Value, crate::status::ApiError> + Send {
    move |mut o: Value| {
        let fins: Vec<Value> = meta::finalizers(&o)
            .into_iter()
            .filter(|f| f != name)
            .map(Value::String)
            .collect();
        set_list(&mut o, "finalizers", fins);
        Ok(o)
    }
}

/// Works on an owner that is being deleted with the Foreground or Orphan policy.
async fn check_owner(core: &Core, key: &ObjKey) {
    let Some(m) = core.store.get_raw(key).and_then(|r| r.lifecycle()) else {
        return;
    };
    if !m.is_deleting() {
        return;
    }
    let (uid, fins) = (m.uid, m.finalizers);
    let deps = core.store.dependents_of(&uid);
    if fins.iter().any(|f| f == "orphan") {
        for d in &deps {
            let u = uid.clone();
            let strip = move |mut o: Value| {
                let keep: Vec<Value> = owner_refs(&o)
                    .into_iter()
                    .filter(|r| r["uid"] != u.as_str())
                    .collect();
                set_list(&mut o, "ownerReferences", keep);
                Ok(o)
            };
            if let Err(e) = mutate(core, d, "", MANAGER, strip).await {
                tracing::warn!(object = %d.name, error = %e, "orphaning a dependent failed");
            }
        }
        if let Err(e) = mutate(core, key, "", MANAGER, without_finalizer("orphan")).await {
            tracing::warn!(object = %key.name, error = %e, "removing the orphan finalizer failed");
        }
    } else if fins.iter().any(|f| f == "foregroundDeletion") {
        let mut blocking = false;
        for d in &deps {
            let Some(dep) = core.store.get(d) else {
                continue;
            };
            let blocks = owner_refs(&dep)
                .iter()
                .any(|r| r["uid"] == uid.as_str() && r["blockOwnerDeletion"] == true);
            blocking |= blocks;
            if !meta::is_deleting(&dep) {
                let policy = if blocks {
                    Propagation::Foreground
                } else {
                    Propagation::Background
                };
                if let Err(e) = delete(core, d, policy).await {
                    tracing::warn!(object = %d.name, error = %e, "deleting a dependent failed");
                }
            }
        }
        if !blocking
            && let Err(e) = mutate(
                core,
                key,
                "",
                MANAGER,
                without_finalizer("foregroundDeletion"),
            )
            .await
        {
            tracing::warn!(object = %key.name, error = %e, "removing the foregroundDeletion finalizer failed");
        }
    }
}

async fn on_event(core: &Core, ev: &Event) {
    match ev.kind {
        EventType::Deleted => {
            let Ok(object) = ev.object.metadata() else {
                return;
            };
            if let Some(uid) = object.pointer("/metadata/uid").and_then(Value::as_str) {
                for d in core.store.dependents_of(uid) {
                    check_dependent(core, &d).await;
                }
            }
            // A dependent going away may unblock a foreground owner.
            for r in owner_refs(&object) {
                if let Some(owner) = r["uid"].as_str().and_then(|u| core.store.by_uid(u)) {
                    check_owner(core, &owner).await;
                }
            }
        }
        EventType::Added | EventType::Modified => {
            check_dependent(core, &ev.key).await;
            let Some(m) = ev.object.lifecycle() else {
                return;
            };
            if m.is_deleting()
                && m.finalizers
                    .iter()
                    .any(|f| f == "orphan" || f == "foregroundDeletion")
            {
                check_owner(core, &ev.key).await;
            }
        }
    }
}

async fn sweep(core: &Core) {
    for uid in core.store.referenced_owners() {
        if core.store.by_uid(&uid).is_none() {
            for d in core.store.dependents_of(&uid) {
                check_dependent(core, &d).await;
            }
        } else if let Some(owner) = core.store.by_uid(&uid) {
            check_owner(core, &owner).await;
            for d in core.store.dependents_of(&uid) {
                check_dependent(core, &d).await;
            }
        }
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
                Ok(ev) => on_event(&core, &ev).await,
                Err(RecvError::Lagged(_)) => sweep(&core).await,
                Err(RecvError::Closed) => return,
            },
            _ = tick.tick() => sweep(&core).await,
        }
    }
}
