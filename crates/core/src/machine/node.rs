//! `reconcileNode`: find the workload Node by providerID, set `nodeRef` and `nodeInfo`, sync
//! the labels and annotations core owns onto it, drop the uninitialized taint, and mirror its
//! health into `NodeReady` and `NodeHealthy`.

use super::Scope;
use super::phases::provider_id;
use crate::context::CoreCtx;
use crate::error::ReconcileError;
use capw_api::common::names::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL};
use capw_api::contract::conditions;
use capw_api::contract::conditions::{reasons, types};
use capw_api::machine::MachineNodeReference;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const UNINITIALIZED_TAINT: &str = "node.cluster.x-k8s.io/uninitialized";
/// While waiting for a Node, look again this often (the remote cache's watch, in upstream).
/// A new Node is usually there within a second of its machine booting.
const NODE_POLL: Duration = Duration::from_millis(500);

/// Machine labels core copies onto the Node.
fn synced_label(key: &str) -> bool {
    let domain = key.split('/').next().unwrap_or_default();
    key.starts_with("node-role.kubernetes.io/")
        || domain == "node-restriction.kubernetes.io"
        || domain.ends_with(".node-restriction.kubernetes.io")
        || domain == "node.cluster.x-k8s.io"
        || domain.ends_with(".node.cluster.x-k8s.io")
}

fn set_node_conditions(scope: &mut Scope, status: &str, reason: &str, message: &str) {
    let generation = scope.generation();
    for t in [types::NODE_READY, types::NODE_HEALTHY] {
        conditions::set(
            &mut scope.status.conditions,
            t,
            status,
            reason,
            message,
            generation,
        );
    }
}

pub(super) async fn reconcile_node(scope: &mut Scope, ctx: &CoreCtx) -> Result<(), ReconcileError> {
    let Some(pid) = provider_id(scope) else {
        set_node_conditions(
            scope,
            "Unknown",
            reasons::NODE_DOES_NOT_EXIST,
            "waiting for the infrastructure provider to report spec.providerID",
        );
        return Ok(());
    };
    let ns = scope.ns();
    let cluster = scope.machine.spec.cluster_name.clone();
    let client = match ctx
        .remotes
        .client(&ctx.secrets, &ctx.clusters, &ns, &cluster)
        .await
    {
        Ok(c) => c,
        Err(e) => {
            let reason = match e {
                capw_reconcile::remote::RemoteError::Refused { .. } => reasons::KUBECONFIG_REFUSED,
                _ => reasons::NODE_INSPECTION_FAILED,
            };
            set_node_conditions(scope, "Unknown", reason, &e.to_string());
            scope.requeue_after(NODE_POLL);
            return Ok(());
        }
    };
    let nodes: Api<Node> = Api::all(client);
    let list = match nodes.list(&ListParams::default()).await {
        Ok(l) => l,
        Err(e) => {
            set_node_conditions(
                scope,
                "Unknown",
                reasons::NODE_INSPECTION_FAILED,
                &format!("the workload cluster {ns}/{cluster} did not answer: {e}"),
            );
            scope.requeue_after(NODE_POLL);
            return Ok(());
        }
    };
    let Some(node) = list
        .items
        .into_iter()
        .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid.as_str()))
    else {
        if scope.status.node_ref.is_some() {
            set_node_conditions(
                scope,
                "False",
                reasons::NODE_DELETED,
                "the Node of this Machine was deleted",
            );
        } else {
            set_node_conditions(
                scope,
                "Unknown",
                reasons::NODE_DOES_NOT_EXIST,
                &format!("Waiting for a Node with spec.providerID {pid} to exist"),
            );
        }
        scope.requeue_after(NODE_POLL);
        return Ok(());
    };
    let node_name = node.name_any();
    if scope.status.node_ref.as_ref().map(|r| r.name.as_str()) != Some(node_name.as_str()) {
        scope.status.node_ref = Some(MachineNodeReference {
            name: node_name.clone(),
        });
        ctx.event(
            &super::object_ref(&scope.machine),
            false,
            "SuccessfulSetNodeRef",
            node_name.clone(),
        )
        .await;
    }
    if let Some(info) = node.status.as_ref().and_then(|s| s.node_info.as_ref())
        && let Ok(serde_json::Value::Object(map)) = serde_json::to_value(info)
    {
        let info: BTreeMap<String, String> = map
            .into_iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k, s.to_string())))
            .collect();
        scope.status.node_info = Some(info);
    }
    sync_node(scope, &nodes, &node).await?;
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == types::READY));
    match ready.map(|c| c.status.as_str()) {
        Some("True") => set_node_conditions(scope, "True", types::NODE_READY, ""),
        Some("False") => set_node_conditions(
            scope,
            "False",
            reasons::NODE_NOT_READY,
            &ready.and_then(|c| c.message.clone()).unwrap_or_default(),
        ),
        _ => set_node_conditions(
            scope,
            "Unknown",
            reasons::NODE_READY_UNKNOWN,
            "the Node reports no Ready condition",
        ),
    }
    Ok(())
}

/// Labels, annotations and the uninitialized taint; patched only when something differs.
async fn sync_node(scope: &Scope, nodes: &Api<Node>, node: &Node) -> Result<(), ReconcileError> {
    let m = &scope.machine;
    let mut labels: BTreeMap<String, String> = m
        .labels()
        .iter()
        .filter(|(k, _)| synced_label(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if m.labels().contains_key(CONTROL_PLANE_LABEL) {
        labels.insert(
            "node-role.kubernetes.io/control-plane".into(),
            String::new(),
        );
    }
    let owner = m
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .or_else(|| m.owner_references().first());
    let mut annotations = BTreeMap::from([
        (CLUSTER_NAME_LABEL.to_string(), m.spec.cluster_name.clone()),
        ("cluster.x-k8s.io/cluster-namespace".to_string(), scope.ns()),
        ("cluster.x-k8s.io/machine".to_string(), m.name_any()),
    ]);
    if let Some(o) = owner {
        annotations.insert("cluster.x-k8s.io/owner-kind".into(), o.kind.clone());
        annotations.insert("cluster.x-k8s.io/owner-name".into(), o.name.clone());
    }
    let keys: Vec<&str> = labels.keys().map(String::as_str).collect();
    annotations.insert(
        "cluster.x-k8s.io/labels-from-machine".into(),
        keys.join(","),
    );
    let have_labels = node.labels();
    let have_ann = node.annotations();
    let previously: Vec<String> = have_ann
        .get("cluster.x-k8s.io/labels-from-machine")
        .map(|s| {
            s.split(',')
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let stale: Vec<&String> = previously
        .iter()
        .filter(|k| !labels.contains_key(*k) && have_labels.contains_key(*k))
        .collect();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let has_taint = taints.iter().any(|t| t.key == UNINITIALIZED_TAINT);
    let labels_ok = labels.iter().all(|(k, v)| have_labels.get(k) == Some(v)) && stale.is_empty();
    let ann_ok = annotations.iter().all(|(k, v)| have_ann.get(k) == Some(v));
    if labels_ok && ann_ok && !has_taint {
        return Ok(());
    }
    let mut label_patch = serde_json::Map::new();
    for (k, v) in &labels {
        label_patch.insert(k.clone(), json!(v));
    }
    for k in stale {
        label_patch.insert(k.clone(), serde_json::Value::Null);
    }
    let mut patch = json!({"metadata": {"labels": label_patch, "annotations": annotations}});
    if has_taint {
        let kept: Vec<_> = taints
            .into_iter()
            .filter(|t| t.key != UNINITIALIZED_TAINT)
            .collect();
        patch["spec"] = json!({"taints": kept});
    }
    nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_node_domains_are_synced() {
        assert!(super::synced_label("node-role.kubernetes.io/worker"));
        assert!(super::synced_label("node.cluster.x-k8s.io/pool"));
        assert!(super::synced_label("a.node-restriction.kubernetes.io/x"));
        assert!(!super::synced_label("app"));
        assert!(!super::synced_label("cluster.x-k8s.io/cluster-name"));
    }
}
