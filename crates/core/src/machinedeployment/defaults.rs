//! Upstream's MachineDeployment defaulting webhook, in-process (`capi-lifecycle.md` §3.1):
//! replicas, the selector (`deployment-name`) when empty, the cluster-name label on the
//! selector and the template, the `v` of the version, the rollout strategy (RollingUpdate with
//! maxSurge 1 and maxUnavailable 0) and `deletion.order: Random`. Written back once, by
//! `machineset::defaults::write`.

use super::rollout::{ON_DELETE, ROLLING_UPDATE};
use crate::machineset::deletion_order::RANDOM;
use capw_api::common::IntOrString;
use capw_api::common::names::DEPLOYMENT_NAME_LABEL;
use capw_api::machinedeployment::{
    MachineDeployment, MachineDeploymentRollout, MachineDeploymentRolloutStrategy,
    MachineDeploymentSpec, RollingUpdate,
};
use capw_api::machineset::MachineSetDeletionSpec;
use kube::ResourceExt;

pub fn defaulted(md: &MachineDeployment) -> MachineDeploymentSpec {
    use crate::machineset::defaults as ms;
    let mut s = md.spec.clone();
    if s.replicas.is_none() {
        s.replicas = Some(ms::replicas(md.annotations()));
    }
    if s.selector.match_labels.is_empty() && s.selector.match_expressions.is_empty() {
        s.selector
            .match_labels
            .insert(DEPLOYMENT_NAME_LABEL.into(), md.name_any());
        s.template
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .insert(DEPLOYMENT_NAME_LABEL.into(), md.name_any());
    }
    let cluster = s.cluster_name.clone();
    ms::template_and_selector(&cluster, &mut s.selector, &mut s.template);
    let rollout = s
        .rollout
        .get_or_insert_with(MachineDeploymentRollout::default);
    let strategy = rollout
        .strategy
        .get_or_insert_with(MachineDeploymentRolloutStrategy::default);
    let kind = strategy.type_.get_or_insert_with(|| ROLLING_UPDATE.into());
    if kind != ON_DELETE {
        let ru = strategy
            .rolling_update
            .get_or_insert_with(RollingUpdate::default);
        ru.max_surge.get_or_insert(IntOrString::Int(1));
        ru.max_unavailable.get_or_insert(IntOrString::Int(0));
    }
    if s.deletion.as_ref().and_then(|d| d.order.as_ref()).is_none() {
        s.deletion = Some(MachineSetDeletionSpec {
            order: Some(RANDOM.into()),
        });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_as_upstreams_webhook() {
        let md: MachineDeployment = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "md"},
            "spec": {"clusterName": "c",
                "template": {"spec": {"clusterName": "c", "version": "v1.30.0",
                    "infrastructureRef": {"apiGroup": "i", "kind": "K", "name": "n"}}}},
        }))
        .unwrap();
        let s = defaulted(&md);
        assert_eq!(s.replicas, Some(1));
        assert_eq!(
            s.selector
                .match_labels
                .get(DEPLOYMENT_NAME_LABEL)
                .map(String::as_str),
            Some("md")
        );
        assert!(s.selector.matches(&s.template.labels()));
        let ru = s.rollout.unwrap().strategy.unwrap();
        assert_eq!(ru.type_.as_deref(), Some(ROLLING_UPDATE));
        let ru = ru.rolling_update.unwrap();
        assert_eq!(ru.max_surge, Some(IntOrString::Int(1)));
        assert_eq!(ru.max_unavailable, Some(IntOrString::Int(0)));
        // OnDelete gets no rolling update settings.
        let mut od = md.clone();
        od.spec.rollout =
            Some(serde_json::from_value(json!({"strategy": {"type": "OnDelete"}})).unwrap());
        assert!(
            defaulted(&od)
                .rollout
                .unwrap()
                .strategy
                .unwrap()
                .rolling_update
                .is_none()
        );
    }
}
