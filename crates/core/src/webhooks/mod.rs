//! Upstream's Cluster and ClusterClass admission webhooks (`internal/webhooks`), served over
//! HTTPS by the host and called by any API server: the embedded one and kube-apiserver alike.
//!
//! What the CRD schemas cannot say is checked here, against other objects: a topology's
//! variables against its class's schemas (and defaulted from them, so the defaults persist on
//! the Cluster), its MachineDeployment classes, the version rules of an upgrade, and whether a
//! class change keeps the templates compatible. The messages, field paths and the webhook
//! names are upstream's, so what `kubectl apply` prints is what Cluster API users know.

mod cluster;
mod clusterclass;
mod refusal;

use capw_api::cluster::Cluster;
use capw_api::clusterclass::ClusterClass;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::{Api, Client};
use refusal::Refusal;
use serde_json::{Value, json};
use std::sync::Arc;
use tracing::Instrument;

/// The defaulting webhook of Cluster, at upstream's path.
pub const MUTATE_CLUSTER: &str = "/mutate-cluster-x-k8s-io-v1beta2-cluster";
/// The validating webhook of Cluster.
pub const VALIDATE_CLUSTER: &str = "/validate-cluster-x-k8s-io-v1beta2-cluster";
/// The validating webhook of ClusterClass.
pub const VALIDATE_CLUSTERCLASS: &str = "/validate-cluster-x-k8s-io-v1beta2-clusterclass";

/// The upstream names of the configurations, so a real cluster's are replaced, not doubled.
pub const MUTATING_CONFIGURATION: &str = "capi-mutating-webhook-configuration";
/// See [`MUTATING_CONFIGURATION`].
pub const VALIDATING_CONFIGURATION: &str = "capi-validating-webhook-configuration";

/// What the webhooks read: Clusters, classes, and the objects a topology owns.
#[derive(Clone)]
pub struct Webhooks {
    client: Client,
    resolver: Arc<capw_reconcile::external::Resolver>,
}

impl Webhooks {
    pub fn new(client: Client) -> Self {
        let resolver = capw_reconcile::external::Resolver::new(client.clone());
        Webhooks { client, resolver }
    }

    /// Answers one `AdmissionReview` sent to `path`.
    pub async fn review(&self, path: &str, body: &[u8]) -> Value {
        let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(body) {
            Ok(r) => r,
            Err(e) => {
                return respond(AdmissionResponse::invalid(format!(
                    "the body is not an AdmissionReview: {e}"
                )));
            }
        };
        let request: AdmissionRequest<DynamicObject> = match review.try_into() {
            Ok(r) => r,
            Err(e) => {
                return respond(AdmissionResponse::invalid(format!(
                    "the AdmissionReview has no request: {e}"
                )));
            }
        };
        let span = tracing::info_span!("webhook", path, kind = %request.kind.kind, name = %request.name, operation = ?request.operation);
        let answer = async {
            match path {
                MUTATE_CLUSTER => self.default_cluster(&request).await,
                VALIDATE_CLUSTER => self.validate_cluster(&request).await,
                VALIDATE_CLUSTERCLASS => self.validate_class(&request).await,
                other => Err(Refusal::bad_request(format!(
                    "no webhook is served at {other}"
                ))),
            }
        }
        .instrument(span)
        .await;
        let response = AdmissionResponse::from(&request);
        respond(match answer {
            Ok(a) => a.into_response(response),
            Err(r) => r.into_response(response),
        })
    }

    async fn default_cluster(
        &self,
        req: &AdmissionRequest<DynamicObject>,
    ) -> Result<Allowed, Refusal> {
        let Some(obj) = &req.object else {
            return Ok(Allowed::default());
        };
        let original = serde_json::to_value(obj).map_err(Refusal::decode)?;
        let mut cluster: Cluster =
            serde_json::from_value(original.clone()).map_err(Refusal::decode)?;
        let old = old_cluster(req)?;
        cluster::default(self, &mut cluster, old.as_ref()).await?;
        // Only what defaulting changes goes back (the version's `v` and the variables): a
        // round trip through the types must not patch anything else.
        let mut base = original.clone();
        if let Some(t) = &cluster.spec.topology
            && let Some(b) = base
                .pointer_mut("/spec/topology")
                .and_then(Value::as_object_mut)
        {
            b.insert("version".into(), json!(t.version));
            if !t.variables.is_empty() {
                b.insert(
                    "variables".into(),
                    serde_json::to_value(&t.variables).map_err(Refusal::decode)?,
                );
            }
        }
        let patch = json_patch::diff(&original, &base);
        Ok(Allowed {
            patch: (!patch.0.is_empty()).then_some(patch),
            warnings: vec![],
        })
    }

    async fn validate_cluster(
        &self,
        req: &AdmissionRequest<DynamicObject>,
    ) -> Result<Allowed, Refusal> {
        if req.operation == Operation::Delete {
            return Ok(Allowed::default());
        }
        let Some(obj) = &req.object else {
            return Ok(Allowed::default());
        };
        let cluster: Cluster =
            serde_json::from_value(serde_json::to_value(obj).map_err(Refusal::decode)?)
                .map_err(Refusal::decode)?;
        let old = old_cluster(req)?;
        cluster::validate(self, &cluster, old.as_ref()).await
    }

    async fn validate_class(
        &self,
        req: &AdmissionRequest<DynamicObject>,
    ) -> Result<Allowed, Refusal> {
        let decode = |o: &Option<DynamicObject>| -> Result<Option<ClusterClass>, Refusal> {
            o.as_ref()
                .map(|o| serde_json::to_value(o).and_then(serde_json::from_value))
                .transpose()
                .map_err(Refusal::decode)
        };
        let (new, old) = (decode(&req.object)?, decode(&req.old_object)?);
        match (new, old) {
            (None, Some(old)) => clusterclass::validate_delete(self, &old).await,
            (Some(new), old) => clusterclass::validate(self, &new, old.as_ref()).await,
            (None, None) => Ok(Allowed::default()),
        }
    }

    fn clusters(&self, ns: &str) -> Api<Cluster> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn classes(&self, ns: &str) -> Api<ClusterClass> {
        Api::namespaced(self.client.clone(), ns)
    }
}

fn old_cluster(req: &AdmissionRequest<DynamicObject>) -> Result<Option<Cluster>, Refusal> {
    req.old_object
        .as_ref()
        .map(|o| serde_json::to_value(o).and_then(serde_json::from_value))
        .transpose()
        .map_err(Refusal::decode)
}

/// An admitted request: the patch defaulting made and the warnings to show.
#[derive(Default)]
pub(crate) struct Allowed {
    patch: Option<json_patch::Patch>,
    warnings: Vec<String>,
}

impl Allowed {
    fn into_response(self, mut response: AdmissionResponse) -> AdmissionResponse {
        if !self.warnings.is_empty() {
            response.warnings = Some(self.warnings);
        }
        match self.patch {
            Some(p) => response.clone().with_patch(p).unwrap_or(response),
            None => response,
        }
    }
}

fn respond(response: AdmissionResponse) -> Value {
    serde_json::to_value(response.into_review()).unwrap_or_else(|e| json!({"error": e.to_string()}))
}

/// How the API server reaches the webhooks: a URL (the host beside `capw up`), or the
/// Service in front of the host's replicas in a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Url(String),
    Service {
        namespace: String,
        name: String,
        port: u16,
    },
}

/// The webhook configurations that send Cluster and ClusterClass writes to `endpoint`,
/// trusting `ca_pem` (one CA, or several during a rotation); upstream's names, rules and
/// policies.
pub fn configurations(endpoint: &Endpoint, ca_pem: &str) -> [Value; 2] {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let hook = |name: &str, path: &str, resource: &str, operations: &[&str]| {
        let client_config = match endpoint {
            Endpoint::Url(base) => json!({"url": format!("{base}{path}"), "caBundle": ca}),
            Endpoint::Service {
                namespace,
                name,
                port,
            } => json!({"service": {"namespace": namespace, "name": name, "path": path,
                "port": port}, "caBundle": ca}),
        };
        json!({
            "name": name,
            "clientConfig": client_config,
            "rules": [{"apiGroups": ["cluster.x-k8s.io"], "apiVersions": ["v1beta2"],
                       "operations": operations, "resources": [resource]}],
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1", "v1beta1"],
        })
    };
    [
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": MUTATING_CONFIGURATION},
            "webhooks": [hook("default.cluster.cluster.x-k8s.io", MUTATE_CLUSTER, "clusters", &["CREATE", "UPDATE"])],
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": VALIDATING_CONFIGURATION},
            "webhooks": [
                hook("validation.cluster.cluster.x-k8s.io", VALIDATE_CLUSTER, "clusters", &["CREATE", "UPDATE", "DELETE"]),
                hook("validation.clusterclass.cluster.x-k8s.io", VALIDATE_CLUSTERCLASS, "clusterclasses", &["CREATE", "UPDATE", "DELETE"]),
            ],
        }),
    ]
}
