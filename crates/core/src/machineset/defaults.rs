//! Upstream's MachineSet defaulting webhook, in-process (`capi-lifecycle.md` §2.1): replicas
//! (from the autoscaler's annotations, else 1), the selector (`set-name`) when empty, the
//! cluster-name label on the selector and the template, the `v` of the version, and
//! `deletion.order: Random`. The reconcile acts on the defaulted spec at once and writes the
//! defaults back once, so `kubectl get -o yaml` shows what the controller uses.

use super::deletion_order::RANDOM;
use crate::error::ReconcileError;
use crate::naming::label_value;
use capw_api::common::names::{CLUSTER_NAME_LABEL, SET_NAME_LABEL};
use capw_api::machineset::{
    MachineSet, MachineSetDeletionSpec, MachineSetSpec, MachineTemplateSpec,
};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use std::collections::BTreeMap;

pub const AUTOSCALER_MIN: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";
pub const AUTOSCALER_MAX: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";

/// Upstream's replicas default: the autoscaler's min size when both of its annotations are
/// set, else 1.
pub fn replicas(annotations: &BTreeMap<String, String>) -> i32 {
    let min = annotations.get(AUTOSCALER_MIN).and_then(|v| v.parse().ok());
    let max: Option<i32> = annotations.get(AUTOSCALER_MAX).and_then(|v| v.parse().ok());
    match (min, max) {
        (Some(min), Some(_)) => min,
        _ => 1,
    }
}

/// The cluster-name label on the selector and the template labels, and the `v` prefix of
/// the version: what both the MachineSet and the MachineDeployment defaulting do.
pub fn template_and_selector(
    cluster: &str,
    selector: &mut capw_api::common::LabelSelector,
    template: &mut MachineTemplateSpec,
) {
    selector
        .match_labels
        .insert(CLUSTER_NAME_LABEL.into(), cluster.into());
    template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .insert(CLUSTER_NAME_LABEL.into(), cluster.into());
    if let Some(v) = template.spec.version.as_mut()
        && !v.is_empty()
        && !v.starts_with('v')
    {
        *v = format!("v{v}");
    }
}

pub fn defaulted(ms: &MachineSet) -> MachineSetSpec {
    let mut s = ms.spec.clone();
    if s.replicas.is_none() {
        s.replicas = Some(replicas(ms.annotations()));
    }
    if s.selector.match_labels.is_empty() && s.selector.match_expressions.is_empty() {
        let v = label_value(&ms.name_any());
        s.selector
            .match_labels
            .insert(SET_NAME_LABEL.into(), v.clone());
        s.template
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .insert(SET_NAME_LABEL.into(), v);
    }
    let cluster = s.cluster_name.clone();
    template_and_selector(&cluster, &mut s.selector, &mut s.template);
    if s.deletion.as_ref().and_then(|d| d.order.as_ref()).is_none() {
        s.deletion = Some(MachineSetDeletionSpec {
            order: Some(RANDOM.into()),
        });
    }
    s
}

/// The merge patch that writes the defaults (and the cluster-name label) when the stored
/// object lacks them; for MachineSets and MachineDeployments alike.
pub fn patch<K, S>(obj: &K, stored: &S, defaulted: &S, cluster: &str) -> Option<serde_json::Value>
where
    K: kube::Resource,
    S: serde::Serialize + PartialEq,
{
    let labelled = obj.labels().get(CLUSTER_NAME_LABEL).map(String::as_str) == Some(cluster);
    if stored == defaulted && labelled {
        return None;
    }
    Some(serde_json::json!({
        "metadata": {"labels": {CLUSTER_NAME_LABEL: cluster}},
        "spec": defaulted,
    }))
}

/// Writes [`patch`] when there is one.
pub async fn write<K, S>(
    api: &Api<K>,
    obj: &K,
    stored: &S,
    defaulted: &S,
    cluster: &str,
) -> Result<(), ReconcileError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize + PartialEq,
{
    if let Some(patch) = patch(obj, stored, defaulted, cluster) {
        api.patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_as_upstreams_webhook() {
        let ms: MachineSet = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineSet",
            "metadata": {"name": "ms"},
            "spec": {"clusterName": "c", "selector": {"matchLabels": null},
                "template": {"spec": {"clusterName": "c", "version": "1.30.0",
                    "infrastructureRef": {"apiGroup": "i", "kind": "K", "name": "n"}}}},
        }))
        .unwrap();
        let s = defaulted(&ms);
        assert_eq!(s.replicas, Some(1));
        assert_eq!(
            s.selector
                .match_labels
                .get(SET_NAME_LABEL)
                .map(String::as_str),
            Some("ms")
        );
        assert_eq!(
            s.selector
                .match_labels
                .get(CLUSTER_NAME_LABEL)
                .map(String::as_str),
            Some("c")
        );
        assert!(s.selector.matches(&s.template.labels()));
        assert_eq!(s.template.spec.version.as_deref(), Some("v1.30.0"));
        assert_eq!(s.deletion.unwrap().order.as_deref(), Some(RANDOM));
        let annotated = BTreeMap::from([
            (AUTOSCALER_MIN.to_string(), "2".to_string()),
            (AUTOSCALER_MAX.to_string(), "5".to_string()),
        ]);
        assert_eq!(replicas(&annotated), 2);
    }
}
