//! kube-controller-manager's CSR approver and signer, for client certificates.
//!
//! - **Approving** (`csrapproving`): a request for `kubernetes.io/kube-apiserver-client-kubelet`
//!   is approved when it is a kubelet's (CN `system:node:<name>`, O exactly `system:nodes`,
//!   usages only `digital signature`, `key encipherment` and `client auth`, with `client auth`)
//!   and its requester is a bootstrapper (`system:bootstrappers`), the same node renewing, or an
//!   administrator. Anything else waits for `kubectl certificate approve`.
//! - **Signing** (`csrsigning`): an approved request for that signer or for
//!   `kubernetes.io/kube-apiserver-client` gets a client certificate signed by the cluster CA,
//!   valid for `spec.expirationSeconds` (at least 10 minutes) or one year, kube's
//!   `--cluster-signing-duration`. A request that does not parse is marked `Failed`.
//!
//! Runs only on servers that hold their CA key.

use super::{ControllerConfig, mutate};
use crate::core::Core;
use crate::meta;
use crate::store::{EventType, ObjKey};
use base64::Engine;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// The signer of kubelet client certificates.
pub const KUBELET_CLIENT: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of other API client certificates (manual approval only).
pub const API_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
const STORAGE: &str = "certificates.k8s.io/certificatesigningrequests";
const MANAGER: &str = "certificatesigningrequest-signing-controller";
const DEFAULT_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
const MIN_DURATION: Duration = Duration::from_secs(600);

fn has_condition(csr: &Value, kind: &str) -> bool {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] != "False")
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

fn request_pem(csr: &Value) -> Option<String> {
    let b64 = csr.pointer("/spec/request")?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    String::from_utf8(bytes).ok()
}

/// Why a kubelet client request is not auto-approved, or `None` when it is.
pub(crate) fn kubelet_refusal(csr: &Value) -> Option<String> {
    if csr.pointer("/spec/signerName").and_then(Value::as_str) != Some(KUBELET_CLIENT) {
        return Some("not a kubelet client certificate request".into());
    }
    let Some((cn, orgs)) = request_pem(csr)
        .as_deref()
        .and_then(crate::tls::csr_subject)
    else {
        return Some("spec.request is not a signed PEM certificate request".into());
    };
    if !cn.starts_with("system:node:") || orgs != ["system:nodes"] {
        return Some(format!(
            "the subject must be CN=system:node:<name>, O=system:nodes (got CN={cn}, O={orgs:?})"
        ));
    }
    let usages = strings(csr.pointer("/spec/usages"));
    let allowed = ["digital signature", "key encipherment", "client auth"];
    if !usages.iter().any(|u| u == "client auth")
        || usages.iter().any(|u| !allowed.contains(&u.as_str()))
    {
        return Some(format!(
            "spec.usages must include client auth and only {allowed:?}"
        ));
    }
    let user = csr
        .pointer("/spec/username")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let groups = strings(csr.pointer("/spec/groups"));
    let may = groups
        .iter()
        .any(|g| g == "system:bootstrappers" || g == "system:masters")
        || user == cn;
    (!may).then(|| format!("{user} may not request a certificate for {cn}"))
}

async fn handle(core: &Core, csr: &Value, ca: &(String, String)) {
    if meta::is_deleting(csr)
        || csr.pointer("/status/certificate").is_some()
        || has_condition(csr, "Denied")
        || has_condition(csr, "Failed")
    {
        return;
    }
    let key = ObjKey::new(STORAGE, "", meta::str_field(csr, "name"));
    let now = jiff::Timestamp::now().to_string();
    let condition = |kind: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": "True", "reason": reason, "message": message,
            "lastUpdateTime": now, "lastTransitionTime": now})
    };
    let signer = csr
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut add = vec![];
    if !has_condition(csr, "Approved") {
        if kubelet_refusal(csr).is_some() {
            return;
        }
        add.push(condition(
            "Approved",
            "AutoApproved",
            "Auto approving kubelet client certificate after SubjectAccessReview.",
        ));
    }
    let mut certificate = None;
    if signer == KUBELET_CLIENT || signer == API_CLIENT {
        let validity = csr
            .pointer("/spec/expirationSeconds")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_DURATION, |s| {
                Duration::from_secs(s).clamp(MIN_DURATION, DEFAULT_DURATION)
            });
        match request_pem(csr)
            .ok_or_else(|| "spec.request is not base64 PEM".to_string())
            .and_then(|pem| {
                crate::tls::sign_client_csr(&pem, &ca.0, &ca.1, validity).map_err(|e| e.to_string())
            }) {
            Ok(pem) => certificate = Some(base64::engine::general_purpose::STANDARD.encode(pem)),
            Err(e) => add.push(condition("Failed", "SignerValidationFailure", &e)),
        }
    }
    if add.is_empty() && certificate.is_none() {
        return;
    }
    let result = mutate(core, &key, "status", MANAGER, move |mut obj| {
        let conditions = obj["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        obj["status"]["conditions"] = json!(conditions.into_iter().chain(add).collect::<Vec<_>>());
        if let Some(c) = certificate {
            obj["status"]["certificate"] = json!(c);
        }
        Ok(obj)
    })
    .await;
    if let Err(e) = result {
        tracing::warn!(csr = %key.name, error = %e, "the CSR signer could not write the result");
    }
}

async fn sweep(core: &Core, ca: &(String, String)) {
    let (all, _) = core.store.list(STORAGE, None);
    for csr in all {
        handle(core, &csr, ca).await;
    }
}

/// Approves and signs until the process ends; `ca` is the CA certificate and key (PEM).
pub async fn run(core: Arc<Core>, config: ControllerConfig, ca: Arc<(String, String)>) {
    if !config.enabled {
        return;
    }
    let Ok((_, mut rx, _)) = core.store.subscribe(core.store.current_rv()) else {
        return;
    };
    sweep(&core, &ca).await;
    let mut tick = tokio::time::interval(config.resync.max(Duration::from_secs(1)));
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) if &*ev.key.gr == STORAGE && ev.kind != EventType::Deleted => {
                    if let Some(csr) = core.store.get(&ev.key) {
                        handle(&core, &csr, &ca).await;
                    }
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => sweep(&core, &ca).await,
                Err(RecvError::Closed) => return,
            },
            _ = tick.tick() => sweep(&core, &ca).await,
        }
    }
}
