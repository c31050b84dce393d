//! The workload cluster's `kube-system/kubeadm-config`, which `kubeadm init` uploads: upstream's
//! KubeadmControlPlane reads it to know the control plane is initialized, and rewrites its
//! Kubernetes version before a roll.

use crate::KindCtx;
use crate::context::Around;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// Upstream's KubeadmControlPlane is initialized once `kube-system/kubeadm-config` exists in
/// the workload cluster, which `kubeadm init` uploads: the host looks there before it records
/// a KubeadmControlPlane's claim.
pub(crate) async fn initialized(kctx: &KindCtx, obj: &DynamicObject, cluster: &str) -> bool {
    let ns = obj.namespace().unwrap_or_default();
    let caches = &kctx.driver.caches;
    let client = match caches
        .remotes
        .client(&caches.secrets, &caches.clusters, &ns, cluster)
        .await
    {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(error = %e, "no workload client yet");
            return false;
        }
    };
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client, "kube-system");
    match config_maps.get_opt("kubeadm-config").await {
        Ok(found) => found.is_some(),
        Err(e) => {
            tracing::debug!(error = %e, "reading kube-system/kubeadm-config failed");
            false
        }
    }
}

/// KCP's first rollout step (`updateKubeadmConfigMap`): once a control-plane Machine runs
/// another version than `spec.version`, the workload's `kube-system/kubeadm-config` names the
/// version the control plane rolls to, before the first Machine is replaced, as upstream.
/// Steady state costs nothing: the ConfigMap is read only while a Machine is outdated. A
/// failure is retried with the next reconcile; the roll itself does not wait for it.
pub(crate) async fn roll_version(
    kctx: &KindCtx,
    obj: &DynamicObject,
    cluster: &str,
    around: &Around,
) {
    let Some(want) = obj.data.pointer("/spec/version").and_then(Value::as_str) else {
        return;
    };
    let rolling = around.owned_machines.iter().any(|m| {
        m.metadata.deletion_timestamp.is_none() && m.spec.version.as_deref() != Some(want)
    });
    if !rolling {
        return;
    }
    let ns = obj.namespace().unwrap_or_default();
    let caches = &kctx.driver.caches;
    let Ok(client) = caches
        .remotes
        .client(&caches.secrets, &caches.clusters, &ns, cluster)
        .await
    else {
        return;
    };
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client, "kube-system");
    let current = match config_maps.get_opt("kubeadm-config").await {
        Ok(Some(cm)) => cm,
        Ok(None) => return,
        Err(e) => {
            tracing::debug!(error = %e, "reading kube-system/kubeadm-config failed");
            return;
        }
    };
    let Some(updated) = current
        .data
        .as_ref()
        .and_then(|d| d.get("ClusterConfiguration"))
        .and_then(|cc| capw_kubeadm::with_kubernetes_version(cc, want))
    else {
        return;
    };
    let patch = json!({
        "metadata": {"resourceVersion": current.metadata.resource_version},
        "data": {"ClusterConfiguration": updated},
    });
    match config_maps
        .patch(
            "kubeadm-config",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => tracing::info!(
            version = want,
            "kubeadm-config names the version the control plane rolls to"
        ),
        Err(e) => tracing::debug!(error = %e, "updating kube-system/kubeadm-config failed"),
    }
}
