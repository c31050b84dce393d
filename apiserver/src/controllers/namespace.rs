//! The namespace controller: empties a terminating namespace (honouring finalizers), reports
//! what remains in its conditions, then releases the `kubernetes` finalizer.

use super::{ControllerConfig, delete, mutate};
use crate::core::{Core, Propagation};
use crate::meta;
use crate::store::{EventType, ObjKey};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

const MANAGER: &str = "namespace-controller";

async fn reconcile(core: &Core, name: &str) {
    let key = ObjKey::new("/namespaces", "", name);
    let Some(ns) = core.store.get(&key) else {
        return;
    };
    if !meta::is_deleting(&ns) {
        return;
    }
    let content = core.store.resources_in_namespace(name);
    for k in &content {
        let deleting = core.store.get(k).is_some_and(|o| meta::is_deleting(&o));
        if !deleting && let Err(e) = delete(core, k, Propagation::Background).await {
            tracing::warn!(namespace = %name, object = %k.name, error = %e, "could not delete namespace content");
        }
    }
    let remaining = core.store.resources_in_namespace(name);
    let (status, reason, message) = if remaining.is_empty() {
        (
            "False",
            "ContentDeleted",
            "All content successfully deleted".to_string(),
        )
    } else {
        (
            "True",
            "SomeResourcesRemain",
            format!(
                "Some content in the namespace has finalizers remaining: {} objects",
                remaining.len()
            ),
        )
    };
    let done = remaining.is_empty();
    let update = move |mut o: Value| {
        let same = o
            .pointer("/status/conditions/0/status")
            .and_then(Value::as_str)
            == Some(status)
            && o.pointer("/status/conditions/0/message")
                .and_then(Value::as_str)
                == Some(message.as_str());
        if !same {
            o["status"]["conditions"] = json!([{"type": "NamespaceContentRemaining", "status": status,
                "reason": reason, "message": message, "lastTransitionTime": meta::now_rfc3339()}]);
        }
        Ok(o)
    };
    if let Err(e) = mutate(core, &key, "status", MANAGER, update).await {
        tracing::warn!(namespace = %name, error = %e, "could not update namespace status");
    }
    if done {
        let finalize = |mut o: Value| {
            o["spec"]["finalizers"] = json!([]);
            Ok(o)
        };
        // The `finalize` subresource in kube-apiserver; here a spec write by the controller.
        if let Err(e) = mutate(core, &key, "", MANAGER, finalize).await {
            tracing::warn!(namespace = %name, error = %e, "could not finalize namespace");
        }
    }
}

async fn sweep(core: &Core) {
    for ns in core.store.list("/namespaces", None).0 {
        if meta::is_deleting(&ns) {
            reconcile(core, meta::str_field(&ns, "name")).await;
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
                Ok(ev) if &*ev.key.gr == "/namespaces" && ev.kind != EventType::Deleted => {
                    reconcile(&core, &ev.key.name).await;
                }
                Ok(ev) if ev.kind == EventType::Deleted && !ev.key.ns.is_empty() => {
                    reconcile(&core, &ev.key.ns).await;
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => sweep(&core).await,
                Err(RecvError::Closed) => return,
            },
            _ = tick.tick() => sweep(&core).await,
        }
    }
}
