//! kube-controller-manager's pod garbage collector, for orphaned Pods only: a Pod bound to a
//! Node that no longer exists is deleted. Workload API servers need it: a node agent's mirror
//! Pods (`kube-apiserver-<node>`) would otherwise outlive the Nodes a rollout removes. The
//! terminated-Pod threshold and the unscheduled terminating Pods kube also collects do not
//! arise here: nothing runs or schedules Pods.

use super::{ControllerConfig, delete};
use crate::core::{Core, Propagation};
use crate::meta;
use crate::store::{EventType, ObjKey};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

/// Deletes the Pods bound to `node` (all bound Pods whose Node is gone when `node` is None).
async fn collect(core: &Core, node: Option<&str>) {
    let (pods, _) = core.store.list("/pods", None);
    for pod in pods {
        let Some(bound) = pod.pointer("/spec/nodeName").and_then(Value::as_str) else {
            continue;
        };
        let orphaned = match node {
            Some(n) => bound == n,
            None => core.store.get(&ObjKey::new("/nodes", "", bound)).is_none(),
        };
        if !orphaned || meta::is_deleting(&pod) {
            continue;
        }
        let key = ObjKey::new(
            "/pods",
            pod.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            meta::str_field(&pod, "name"),
        );
        if let Err(e) = delete(core, &key, Propagation::Background).await {
            tracing::warn!(pod = %key.name, node = %bound, error = %e, "pod GC could not delete an orphaned pod");
        }
    }
}

pub async fn run(core: Arc<Core>, config: ControllerConfig) {
    let Ok((_, mut rx, _)) = core.store.subscribe(core.store.current_rv()) else {
        return;
    };
    collect(&core, None).await;
    let mut tick = tokio::time::interval(config.resync);
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) if &*ev.key.gr == "/nodes" && ev.kind == EventType::Deleted => {
                    collect(&core, Some(&ev.key.name)).await;
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => collect(&core, None).await,
                Err(RecvError::Closed) => return,
            },
            _ = tick.tick() => collect(&core, None).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::core::Op;
    use crate::{Config, Server};
    use serde_json::json;

    /// A Pod bound to a deleted Node goes; one bound to a live Node and an unbound one stay.
    #[tokio::test]
    async fn pods_of_deleted_nodes_are_collected() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let server = Server::start(Config::ephemeral(dir.path()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let core = server.core();
        let opts = super::super::internal_opts("test");
        let nodes = core
            .registry
            .get("", "v1", "nodes")
            .unwrap_or_else(|| panic!("nodes"));
        let pods = core
            .registry
            .get("", "v1", "pods")
            .unwrap_or_else(|| panic!("pods"));
        for n in ["a", "b"] {
            core.write(
                &nodes,
                "",
                n,
                "",
                Op::Create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}})),
                &opts,
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        }
        for (pod, node) in [("on-a", Some("a")), ("on-b", Some("b")), ("unbound", None)] {
            let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": "kube-system"},
                "spec": {"containers": [{"name": "c", "image": "i:1"}]}});
            if let Some(n) = node {
                p["spec"]["nodeName"] = json!(n);
            }
            core.write(&pods, "kube-system", pod, "", Op::Create(p), &opts)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        core.delete(&nodes, "", "a", &Default::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let names = || {
            let (list, _) = core.store.list("/pods", Some("kube-system"));
            let mut n: Vec<String> = list
                .iter()
                .map(|p| crate::meta::str_field(p, "name").to_string())
                .collect();
            n.sort();
            n
        };
        for _ in 0..100 {
            if names() == ["on-b", "unbound"] {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("pods left: {:?}", names());
    }
}
