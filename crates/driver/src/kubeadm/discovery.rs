//! CABPK's `reconcileDiscovery` and bootstrap-token upkeep, for `KubeadmConfig`s: the host's
//! part of the kubeadm bootstrap provider, because it needs the workload cluster and writes a
//! Secret there, which plugins never do.
//!
//! Once the control plane is initialized, a joining config gets what is empty of
//! `spec.joinConfiguration.discovery.bootstrapToken` filled, as upstream writes it back:
//! `apiServerEndpoint` from the Cluster, `caCertHashes` (the cluster CA's SPKI pin) and `token`,
//! a new bootstrap token whose `kube-system/bootstrap-token-<id>` Secret is created in the
//! workload cluster with a 15-minute expiration. The bootstrap component reads them from the
//! spec, like CABPK's templates.
//!
//! Upkeep, until the config's Machine has a Node: the Secret's expiration is pushed out to
//! now + TTL once it is within 5/6 of the TTL, and the config is looked at every TTL/3, as
//! upstream does. Then the token is left to expire: the node authenticates with the client
//! certificate it got with it, and the workload's token cleaner deletes it. One capw
//! deviation: a Secret that is gone before that (each capw control-plane machine keeps its own
//! store, so a control-plane roll can start a store without it) is created again with the
//! same token. Another: a Machine whose Node was deleted after it joined (`NodeDeleted`) gets
//! its token kept again, for a simulated VM that boots anew on a host that took over.

use crate::scope::Scope;
use crate::{DriverError, KindCtx};
use capw_api::cluster::Cluster;
use capw_api::common::names::CONTROL_PLANE_LABEL;
use capw_api::contract::conditions::reasons;
use capw_api::machine::Machine;
use capw_apiserver::bootstrap_token as bt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::Duration;

/// CABPK's `DefaultTokenTTL`.
pub const TOKEN_TTL: Duration = Duration::from_secs(15 * 60);
/// How often a config with a token is looked at again (upstream's `TokenTTL / 3`).
pub const UPKEEP_EVERY: Duration = Duration::from_secs(TOKEN_TTL.as_secs() / 3);
const DISCOVERY: &str = "/spec/joinConfiguration/discovery";

/// What the caller does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Call the plugin as usual.
    Call,
    /// Call the plugin, and look at the config again within this time.
    CallAndRequeue(Duration),
    /// The spec was just filled with this merge patch (also in the scope): call the plugin
    /// with the config as it will be once written, so the join data is made in this reconcile,
    /// as CABPK does, and look at it again for the token's upkeep.
    CallFilled(Value),
}

/// Whether a Secret expiring at `expiration` is due for a refresh at `now`: within 5/6 of
/// the TTL of expiring, as upstream's `shouldRefresh`.
pub(crate) fn refresh_due(expiration: Option<jiff::Timestamp>, now: jiff::Timestamp) -> bool {
    let Some(e) = expiration else {
        return false;
    };
    let left = e.as_second() - now.as_second();
    left < (TOKEN_TTL.as_secs() * 5 / 6) as i64
}

fn expiration_from(now: jiff::Timestamp) -> String {
    let at = now + jiff::SignedDuration::from_secs(TOKEN_TTL.as_secs() as i64);
    // RFC 3339 in UTC, whole seconds, as Go's time.RFC3339.
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn token_secret(token: &str, now: jiff::Timestamp) -> Option<Secret> {
    let (id, secret) = bt::parse(token)?;
    let data = bt::secret_data(id, secret, &expiration_from(now))
        .into_iter()
        .map(|(k, v)| (k, ByteString(v.into_bytes())))
        .collect();
    Some(Secret {
        metadata: ObjectMeta {
            name: Some(bt::secret_name(id)),
            namespace: Some(bt::NAMESPACE.into()),
            ..Default::default()
        },
        type_: Some(bt::SECRET_TYPE.into()),
        data: Some(data),
        ..Default::default()
    })
}

/// Fills the discovery and keeps the token alive; see the module doc.
pub(crate) async fn reconcile(
    kctx: &KindCtx,
    obj: &DynamicObject,
    scope: &mut Scope,
    cluster: Option<&Cluster>,
    machine: Option<&Machine>,
    ca_cert: Option<&str>,
) -> Result<Next, DriverError> {
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Next::Call);
    }
    let (Some(cluster), Some(machine)) = (cluster, machine) else {
        return Ok(Next::Call);
    };
    let discovery = obj.data.pointer(DISCOVERY);
    let file = discovery
        .and_then(|d| d.pointer("/file/kubeConfigPath"))
        .and_then(Value::as_str)
        .is_some_and(|p| !p.is_empty());
    if file || machine.metadata.deletion_timestamp.is_some() {
        return Ok(Next::Call);
    }
    let field = |name: &str| {
        discovery
            .and_then(|d| d.pointer(&format!("/bootstrapToken/{name}")))
            .cloned()
    };
    let token = field("token")
        .and_then(|t| t.as_str().map(str::to_string))
        .filter(|t| !t.is_empty());
    let initialized = cluster
        .status
        .as_ref()
        .and_then(|s| s.initialization.as_ref())
        .and_then(|i| i.control_plane_initialized)
        == Some(true);
    let data_created = obj
        .data
        .pointer("/status/initialization/dataSecretCreated")
        .and_then(Value::as_bool)
        == Some(true);
    let control_plane = machine.labels().contains_key(CONTROL_PLANE_LABEL);
    // The first control-plane Machine runs kubeadm init, which needs no token; data already
    // made is never made again, so only a token it carries needs upkeep.
    let fill = !data_created && initialized;
    // A Node deleted after it joined (NodeDeleted) may come back from the same Machine: the
    // in-memory provider's VMs live in the host, and boot and join again on the host that
    // leads next, so the token is kept for them.
    let joined = machine.status.as_ref().is_some_and(|s| {
        s.node_ref.is_some()
            && !s
                .conditions
                .iter()
                .any(|c| c.reason == reasons::NODE_DELETED)
    });
    if (token.is_none() || joined) && !fill {
        return Ok(Next::Call);
    }
    let ns = cluster.namespace().unwrap_or_default();
    let caches = &kctx.driver.caches;
    let client = match caches
        .remotes
        .client(&caches.secrets, &caches.clusters, &ns, &cluster.name_any())
        .await
    {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(error = %e, "no workload client yet for the bootstrap token");
            return Ok(Next::CallAndRequeue(Duration::from_secs(10)));
        }
    };
    let secrets: Api<Secret> = Api::namespaced(client, bt::NAMESPACE);
    let now = jiff::Timestamp::now();
    if let Some(token) = &token {
        upkeep(&secrets, token, now).await?;
        if !fill {
            return Ok(Next::CallAndRequeue(UPKEEP_EVERY));
        }
    }
    // Fill only what is empty, as upstream: a user's own endpoint, hashes or token stay.
    let mut patch = serde_json::Map::new();
    let endpoint = cluster
        .spec
        .control_plane_endpoint
        .as_ref()
        .filter(|e| !e.host.is_empty() && e.port > 0);
    if field("apiServerEndpoint")
        .and_then(|v| v.as_str().map(str::is_empty))
        .unwrap_or(true)
    {
        let Some(e) = endpoint else {
            // Upstream requeues after 10 s while the endpoint is not valid.
            return Ok(Next::CallAndRequeue(Duration::from_secs(10)));
        };
        let address = if e.host.contains(':') {
            format!("[{}]:{}", e.host, e.port)
        } else {
            format!("{}:{}", e.host, e.port)
        };
        patch.insert("apiServerEndpoint".into(), json!(address));
    }
    let hashes_empty = field("caCertHashes")
        .and_then(|v| v.as_array().map(Vec::is_empty))
        .unwrap_or(true);
    let mut hashed = false;
    if hashes_empty && let Some(pin) = ca_cert.and_then(capw_apiserver::tls::spki_sha256) {
        patch.insert("caCertHashes".into(), json!([pin]));
        hashed = true;
    }
    if token.is_none() {
        let new = bt::generate();
        create(&secrets, &new, now).await?;
        patch.insert("token".into(), json!(new));
    }
    if hashes_empty && !hashed && field("unsafeSkipCAVerification").is_none() {
        patch.insert("unsafeSkipCAVerification".into(), json!(true));
    }
    if patch.is_empty() {
        return Ok(if token.is_some() {
            Next::CallAndRequeue(UPKEEP_EVERY)
        } else {
            Next::Call
        });
    }
    tracing::info!(config = %obj.name_any(), control_plane, "filling the join discovery");
    let spec = json!({"joinConfiguration": {"discovery": {"bootstrapToken": patch}}});
    scope.merge_spec(&spec);
    Ok(Next::CallFilled(spec))
}

async fn create(
    secrets: &Api<Secret>,
    token: &str,
    now: jiff::Timestamp,
) -> Result<(), DriverError> {
    let Some(secret) = token_secret(token, now) else {
        return Err(DriverError::Invalid(
            "spec.joinConfiguration.discovery.bootstrapToken.token is not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16})"
                .into(),
        ));
    };
    match secrets.create(&PostParams::default(), &secret).await {
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        r => r.map(|_| ()).map_err(DriverError::from),
    }
}

/// Keeps the token's Secret in the workload cluster and its expiration ahead.
async fn upkeep(
    secrets: &Api<Secret>,
    token: &str,
    now: jiff::Timestamp,
) -> Result<(), DriverError> {
    let Some((id, _)) = bt::parse(token) else {
        // A user's own token in another shape is theirs to keep.
        return Ok(());
    };
    let Some(current) = secrets.get_opt(&bt::secret_name(id)).await? else {
        return create(secrets, token, now).await;
    };
    let stored = serde_json::to_value(&current).unwrap_or_default();
    if refresh_due(bt::expiration(&stored), now) {
        let body = json!({"stringData": {"expiration": expiration_from(now)}});
        secrets
            .patch(
                &bt::secret_name(id),
                &PatchParams::default(),
                &Patch::Merge(&body),
            )
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn a_token_is_refreshed_within_five_sixths_of_its_ttl() {
        let now = at("2026-01-01T00:00:00Z");
        // 15 min TTL: refreshed once less than 12.5 min are left.
        assert!(!refresh_due(Some(at("2026-01-01T00:15:00Z")), now));
        assert!(!refresh_due(Some(at("2026-01-01T00:12:30Z")), now));
        assert!(refresh_due(Some(at("2026-01-01T00:12:29Z")), now));
        assert!(refresh_due(Some(at("2025-12-31T23:00:00Z")), now));
        assert!(!refresh_due(None, now));
        assert_eq!(expiration_from(now), "2026-01-01T00:15:00Z");
    }

    #[test]
    fn the_secret_is_cabpks() {
        let now = at("2026-01-01T00:00:00Z");
        let s = token_secret("abcdef.0123456789abcdef", now).unwrap_or_else(|| panic!("none"));
        assert_eq!(s.metadata.name.as_deref(), Some("bootstrap-token-abcdef"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(s.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
        let data = s.data.unwrap_or_default();
        let get = |k: &str| String::from_utf8_lossy(&data[k].0).into_owned();
        assert_eq!(get("token-id"), "abcdef");
        assert_eq!(get("token-secret"), "0123456789abcdef");
        assert_eq!(get("expiration"), "2026-01-01T00:15:00Z");
        assert_eq!(get("usage-bootstrap-authentication"), "true");
        assert_eq!(get("usage-bootstrap-signing"), "true");
        assert_eq!(
            get("auth-extra-groups"),
            "system:bootstrappers:kubeadm:default-node-token"
        );
        assert!(token_secret("not-a-token", now).is_none());
    }
}
