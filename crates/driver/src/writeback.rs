//! Writing a plugin's typed result back (DESIGN.md §5): contract fields in spec and status,
//! the status patch and conditions, the bootstrap data Secret, `<cluster>-kubeconfig`, and the
//! control plane's Machines. Each write happens only when it changes something.

use super::change::{Address, Change, Endpoint, FailureDomain, Field, VersionReplicas};
use super::context::Around;
use super::kubeadm;
use super::scope::Scope;
use super::{DriverError, KindCtx};
use capw_api::common::names::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL};
use capw_api::contract::{conditions, fields};
use capw_runtime::plugin::{BootstrapStatus, ClusterStatus, ControlPlaneStatus, MachineStatus};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

pub(super) enum Result {
    InfraCluster(ClusterStatus),
    InfraMachine(MachineStatus),
    Bootstrap(BootstrapStatus),
    ControlPlane(ControlPlaneStatus),
}

pub(super) fn set_condition(
    status: &mut Value,
    type_: &str,
    s: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let mut list = super::condition_list(status);
    conditions::set(&mut list, type_, s, reason, message, generation);
    if !status.is_object() {
        *status = json!({});
    }
    status["conditions"] = serde_json::to_value(list).unwrap_or(Value::Null);
}

/// Applies the common part of a result: the status patch (contract fields are set after it,
/// so it cannot override them) and the conditions.
fn common(
    obj: &DynamicObject,
    c: &capw_runtime::plugin::Common,
) -> std::result::Result<Value, DriverError> {
    let mut status = obj
        .data
        .get("status")
        .filter(|s| s.is_object())
        .cloned()
        .unwrap_or(json!({}));
    if let Some(p) = &c.status_patch {
        let patch: Value = serde_json::from_str(p)
            .map_err(|e| DriverError::Invalid(format!("status-patch: {e}")))?;
        json_patch::merge(&mut status, &patch);
    }
    for cond in &c.conditions {
        set_condition(
            &mut status,
            &cond.type_,
            cond.status.as_str(),
            &cond.reason,
            &cond.message,
            obj.metadata.generation,
        );
    }
    Ok(status)
}

/// The Kubernetes versions the control plane's Machines run, lowest first, with how many run
/// each: upstream's `status.versions`. What runs, not what the spec asks for.
fn observed_versions(machines: &[capw_api::machine::Machine]) -> Vec<(String, usize)> {
    // A version that does not parse sorts first, by its text.
    let key = |v: &str| semver::Version::parse(v.trim_start_matches('v')).ok();
    let mut counts: BTreeMap<(Option<semver::Version>, String), usize> = BTreeMap::new();
    for v in machines.iter().filter_map(|m| m.spec.version.as_deref()) {
        *counts.entry((key(v), v.to_string())).or_default() += 1;
    }
    counts.into_iter().map(|((_, v), n)| (v, n)).collect()
}

fn sticky(status: &Value, field: &str, now: bool) -> bool {
    now || status
        .pointer(&format!("/initialization/{field}"))
        .and_then(Value::as_bool)
        == Some(true)
}

fn requeue(c: &capw_runtime::plugin::Common) -> Action {
    match c.requeue_after_seconds {
        Some(s) => Action::requeue(Duration::from_secs(u64::from(s.max(1)))),
        None => Action::requeue(Duration::from_secs(600)),
    }
}

pub(super) fn controller_ref(kctx: &KindCtx, obj: &DynamicObject) -> OwnerReference {
    OwnerReference {
        api_version: kctx.ar.api_version.clone(),
        kind: kctx.ar.kind.clone(),
        name: obj.name_any(),
        uid: obj.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// What became of a Secret the host writes for an object.
enum Written {
    /// The Secret holds the data, under this object's control.
    Stored,
    /// A Secret of that name exists that this object does not control: it is left as it is.
    Foreign(String),
}

/// Creates the Secret controlled by `obj`, or replaces its data when `replace` and it differs.
///
/// A Secret of that name that `obj` does not control is never adopted, read or written, as
/// upstream's CABPK refuses a data Secret it did not create: names come from plugins (a
/// control plane names its Machines, and their bootstrap configs and data Secrets after
/// them), so a name may be another cluster's `<cluster>-token` or `<cluster>-kubeconfig`.
async fn ensure_secret(
    kctx: &KindCtx,
    obj: &DynamicObject,
    name: &str,
    cluster: &str,
    data: BTreeMap<String, String>,
    replace: bool,
) -> std::result::Result<Written, DriverError> {
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(kctx.driver.client.clone(), &ns);
    let bytes: BTreeMap<String, ByteString> = data
        .into_iter()
        .map(|(k, v)| (k, ByteString(v.into_bytes())))
        .collect();
    let cached = kctx
        .driver
        .caches
        .secrets
        .get(&ObjectRef::new(name).within(&ns))
        .map(|s| (*s).clone());
    let existing = match cached {
        Some(s) => s,
        None => {
            let mut s = Secret {
                data: Some(bytes.clone()),
                type_: Some("cluster.x-k8s.io/secret".into()),
                ..Default::default()
            };
            s.metadata.name = Some(name.into());
            s.metadata.labels = Some(BTreeMap::from([(
                CLUSTER_NAME_LABEL.to_string(),
                cluster.to_string(),
            )]));
            s.metadata.owner_references = Some(vec![controller_ref(kctx, obj)]);
            match api.create(&PostParams::default(), &s).await {
                Ok(_) => return Ok(Written::Stored),
                Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(name).await? {
                    Some(s) => s,
                    None => return Ok(Written::Stored),
                },
                Err(e) => return Err(e.into()),
            }
        }
    };
    let uid = obj.metadata.uid.as_deref().unwrap_or_default();
    let controlled = existing
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && !uid.is_empty() && o.uid == uid);
    if !controlled {
        return Ok(Written::Foreign(format!(
            "Secret {ns}/{name} exists and is not controlled by {} {}: the host never adopts a Secret it did not create, so it neither reads nor writes it; delete or rename that Secret if it is stale, or give this object another name",
            kctx.ar.kind,
            obj.name_any()
        )));
    }
    if replace && existing.data.as_ref() != Some(&bytes) {
        let patch = json!({"data": bytes});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(Written::Stored)
}

/// Maps a checked result to one typed [`Change`] and lays it into the reconcile's scope (spec
/// fields and status), and makes the other objects it asks for (the bootstrap data Secret,
/// `<cluster>-kubeconfig`, Machines).
pub(super) async fn write(
    obj: &DynamicObject,
    kctx: &KindCtx,
    scope: &mut Scope,
    around: &Around,
    result: Result,
) -> std::result::Result<Action, DriverError> {
    let old = obj.data.get("status").cloned().unwrap_or(json!({}));
    let cluster = around
        .cluster
        .as_ref()
        .map(|c| c.name_any())
        .unwrap_or_default();
    let endpoint = |ep: &capw_runtime::plugin::ApiEndpoint| Endpoint {
        host: ep.host.clone(),
        port: ep.port,
    };
    let mut change = Change::default();
    let (mut status, action) = match result {
        Result::InfraCluster(r) => {
            let status = common(obj, &r.common)?;
            change.spec.control_plane_endpoint = r.control_plane_endpoint.as_ref().map(endpoint);
            change.status.initialization.provisioned =
                Some(sticky(&old, "provisioned", r.provisioned));
            if !r.failure_domains.is_empty() {
                change.status.failure_domains = Field::Set(
                    r.failure_domains
                        .iter()
                        .map(|f| FailureDomain {
                            name: f.name.clone(),
                            control_plane: f.control_plane,
                            attributes: f.attributes.iter().cloned().collect(),
                        })
                        .collect(),
                );
            }
            (status, requeue(&r.common))
        }
        Result::InfraMachine(r) => {
            let status = common(obj, &r.common)?;
            if let Some(pid) = r.provider_id.as_ref().filter(|p| !p.is_empty()) {
                // The provider ID is set once: a later, different one is ignored.
                let current = obj
                    .data
                    .pointer(fields::PROVIDER_ID)
                    .and_then(Value::as_str);
                if current.is_none_or(str::is_empty) {
                    change.spec.provider_id = Some(pid.clone());
                }
            }
            change.status.initialization.provisioned =
                Some(sticky(&old, "provisioned", r.provisioned));
            if !r.addresses.is_empty() {
                change.status.addresses = Field::Set(
                    r.addresses
                        .iter()
                        .map(|a| Address {
                            type_: a.type_.clone(),
                            address: a.address.clone(),
                        })
                        .collect(),
                );
            }
            if let Some(fd) = &r.failure_domain {
                change.status.failure_domain = Field::Set(fd.clone());
            }
            if r.interruptible {
                change.status.interruptible = Field::Set(true);
            }
            (status, requeue(&r.common))
        }
        Result::Bootstrap(r) => {
            let mut status = common(obj, &r.common)?;
            if let Some(data) = &r.data {
                // The Secret is named after the config: deterministic, as `clusterctl move` needs.
                let name = obj.name_any();
                // As CABPK's `storeBootstrapData`, a Secret of ours that exists already is
                // updated until the status records it: a host that stopped between the two
                // writes left data made with a bootstrap token that only its own workload
                // cluster knew. Once recorded, a Machine may have booted from it: it stays.
                let recorded = sticky(&old, "dataSecretCreated", false);
                let written = ensure_secret(
                    kctx,
                    obj,
                    &name,
                    &cluster,
                    BTreeMap::from([
                        ("value".to_string(), data.value.clone()),
                        ("format".to_string(), data.format.as_str().to_string()),
                    ]),
                    !recorded,
                )
                .await?;
                match written {
                    Written::Stored => {
                        change.status.data_secret_name = Field::Set(name);
                        change.status.initialization.data_secret_created = Some(true);
                    }
                    Written::Foreign(why) => {
                        set_condition(
                            &mut status,
                            conditions::types::DATA_SECRET_AVAILABLE,
                            "False",
                            conditions::reasons::DATA_SECRET_NOT_OWNED,
                            &why,
                            obj.metadata.generation,
                        );
                        change.status.data_secret_name = Field::Remove;
                        change.status.initialization.data_secret_created = Some(false);
                        kctx.event(
                            obj,
                            None,
                            true,
                            conditions::reasons::DATA_SECRET_NOT_OWNED,
                            why,
                        )
                        .await;
                    }
                }
            }
            // Upstream's KubeadmConfig and KubeadmControlPlane report it; infrastructure kinds
            // are left alone, as their CRDs may not declare it.
            change.status.observed_generation = generation(obj);
            let action = match around.requeue_within {
                // The bootstrap token's upkeep needs a look within this time.
                Some(d) => {
                    let asked = r.common.requeue_after_seconds.map(u64::from);
                    Action::requeue(asked.map_or(d, |s| d.min(Duration::from_secs(s.max(1)))))
                }
                None => requeue(&r.common),
            };
            (status, action)
        }
        Result::ControlPlane(r) => {
            let status = common(obj, &r.common)?;
            change.spec.control_plane_endpoint = r.endpoint.as_ref().map(endpoint);
            if let Some(kc) = &r.kubeconfig
                && !cluster.is_empty()
                && let Written::Foreign(why) = ensure_secret(
                    kctx,
                    obj,
                    &format!("{cluster}-kubeconfig"),
                    &cluster,
                    BTreeMap::from([("value".to_string(), kc.clone())]),
                    true,
                )
                .await?
            {
                // Upstream's KCP rotates only the kubeconfig it controls; one made by someone
                // else is theirs (and checked like any other before the host uses it).
                tracing::debug!(%why, "kubeconfig Secret left alone");
            }
            let kubeadm = kubeadm::Kind::of(&kctx.ar) == Some(kubeadm::Kind::ControlPlane);
            let was = sticky(&old, "controlPlaneInitialized", false);
            // Other control-plane kinds are taken at their word (a hosted control plane runs
            // no kubeadm).
            let initialized = was
                || (r.initialized
                    && (!kubeadm || kubeadm::config_map::initialized(kctx, obj, &cluster).await));
            change.status.initialization.control_plane_initialized = Some(initialized);
            if initialized && kubeadm {
                kubeadm::config_map::roll_version(kctx, obj, &cluster, around).await;
            }
            // The workload cluster is not watched: look again soon.
            let recheck = r.initialized && !initialized;
            // The host knows both: the labels it puts on the Machines it creates, and the
            // versions they run. A plugin's word on either would be a claim, not an observation.
            change.status.selector = Field::Set(format!(
                "{CLUSTER_NAME_LABEL}={cluster},{CONTROL_PLANE_LABEL}"
            ));
            let versions = observed_versions(&around.owned_machines);
            // `version` is the deprecated field upstream fills from `versions[0]`.
            (change.status.version, change.status.versions) = match versions.first() {
                Some((v, _)) => (
                    Field::Set(v.clone()),
                    Field::Set(
                        versions
                            .iter()
                            .map(|(version, replicas)| VersionReplicas {
                                version: version.clone(),
                                replicas: *replicas,
                            })
                            .collect(),
                    ),
                ),
                None => (Field::Remove, Field::Remove),
            };
            change.status.observed_generation = generation(obj);
            // Observed, not reported: every Machine the control plane owns, as upstream counts.
            change.status.replicas = Field::Set(around.owned_machines.len());
            change.status.ready_replicas = Field::Set(r.replicas.ready);
            change.status.available_replicas = Field::Set(r.replicas.available);
            change.status.up_to_date_replicas = Field::Set(r.replicas.up_to_date);
            super::machines::create(kctx, obj, around, &r.machines_to_create).await?;
            super::machines::delete(kctx, obj, around, &r.machines_to_delete).await?;
            super::machines::clear_recovered(kctx, obj, around).await?;
            let action = if recheck {
                Action::requeue(Duration::from_millis(500))
            } else {
                requeue(&r.common)
            };
            (status, action)
        }
    };
    change.apply(scope, &mut status)?;
    kctx.succeeded(obj, &mut status);
    scope.status = status;
    Ok(action)
}

/// `metadata.generation`, for `status.observedGeneration`.
fn generation(obj: &DynamicObject) -> Field<i64> {
    obj.metadata.generation.map_or(Field::Remove, Field::Set)
}

#[cfg(test)]
mod tests {
    #[test]
    fn merge_follows_rfc7386() {
        let mut t = serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}});
        json_patch::merge(
            &mut t,
            &serde_json::json!({"a": null, "b": {"c": 5}, "e": [1]}),
        );
        assert_eq!(t, serde_json::json!({"b": {"c": 5, "d": 3}, "e": [1]}));
    }

    /// Versions sort as versions (v1.9 before v1.10), lowest first, with their counts.
    #[test]
    fn observed_versions_are_lowest_first_with_counts() {
        let machine = |v: &str| -> capw_api::machine::Machine {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": {"name": v}, "spec": {"clusterName": "c", "version": v,
                    "bootstrap": {}, "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "n"}}}))
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let ms = ["v1.10.0", "v1.9.3", "v1.10.0"].map(machine);
        assert_eq!(
            super::observed_versions(&ms),
            [("v1.9.3".to_string(), 1), ("v1.10.0".to_string(), 2)]
        );
        assert!(super::observed_versions(&[]).is_empty());
    }
}
