//! `capw:host/aws`: signed AWS Query API calls for cloud providers.
//!
//! The component names a service, an API version, an action and its parameters; the host
//! checks the action against the plugin's grant, encodes the call, signs it with SigV4 using
//! credentials the component never sees, sends it to the service's endpoint, retries throttling
//! and server errors, caps the answer, and returns AWS's status, request id and XML. The
//! component cannot name a host, a port, a header or a credential: the only way out of the
//! sandbox this opens is the granted actions of the granted services at their configured
//! endpoints (SECURITY.md, "aws").
//!
//! Why not raw `wasi:http` with a signing hook: the grant would be an authority, not an action
//! list, and every guest would carry an HTTP client. The reference (`aws-provider.md` §4)
//! measured both; this is its recommendation.

mod actions;
mod credentials;
mod endpoint;
mod glue;
mod send;

pub use credentials::{CredentialSource, Credentials};
pub use endpoint::Environment;
pub use send::{Answer, Policy};

use crate::host::HostState;
use capw_api::wasmprovider::{AwsCredentialSource, AwsGrant, AwsSecretRef};
use std::collections::{BTreeMap, BTreeSet};
use wasmtime::component::{HasSelf, Linker};

/// Its short name.
pub const NAME: &str = "aws";

/// `capw:host/aws`; its grant's options are the WasmProvider's `spec.aws`, read into an
/// [`AwsPermit`].
pub struct AwsCapability;

impl super::HostCapability for AwsCapability {
    fn name(&self) -> &'static str {
        NAME
    }
    fn interface(&self) -> &'static str {
        "capw:host/aws@0.2.0"
    }
    fn link(&self, l: &mut Linker<HostState>) -> wasmtime::Result<()> {
        crate::bindings::aws::add_to_linker::<HostState, HasSelf<HostState>>(l, |s| s)
    }
    fn grant(
        &self,
        spec: &capw_api::wasmprovider::WasmProviderSpec,
        grants: &mut super::Grants,
    ) -> Result<(), String> {
        let (permit, wrong) = AwsPermit::from_spec(spec.aws.as_ref());
        grants.insert(permit);
        wrong.map_or(Ok(()), Err)
    }
    fn show(
        &self,
        grants: &super::Grants,
        status: &mut capw_api::wasmprovider::WasmProviderStatus,
    ) {
        status.aws = Some(grants.get::<AwsPermit>().to_spec());
    }
}

/// Why a call got no answer (the WIT's `aws-error`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AwsError {
    #[error("{0}")]
    Denied(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Credentials(String),
    #[error("AWS is still throttling or failing after the host's retries; try again in {0} s")]
    Throttled(u32),
    #[error("{0}")]
    Unavailable(String),
    #[error("the answer is over {1} bytes, the most the host passes on; filter the call")]
    TooLarge(u64, u64),
}

/// The options of a plugin's `aws` grant, defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct AwsPermit {
    pub actions: BTreeMap<String, BTreeSet<String>>,
    /// `None`: any region.
    pub regions: Option<BTreeSet<String>>,
    pub credentials: CredentialSource,
}

impl Default for AwsPermit {
    fn default() -> Self {
        AwsPermit::from_spec(None).0
    }
}

impl AwsPermit {
    /// The grant in force, and the first thing wrong with `spec.aws` (`spec.aws.FIELD: why`).
    pub fn from_spec(g: Option<&AwsGrant>) -> (Self, Option<String>) {
        let g = g.cloned().unwrap_or_default();
        let mut wrong = None;
        let actions = match g.actions {
            Some(map) => {
                for (service, list) in &map {
                    if !actions::SERVICES.contains(&service.as_str()) {
                        wrong.get_or_insert(format!(
                            "spec.aws.actions.{service}: the host knows no endpoint for this service; it knows {}",
                            actions::SERVICES.join(", ")
                        ));
                    }
                    if let Some(bad) = list.iter().find(|a| !is_action(a)) {
                        wrong.get_or_insert(format!(
                            "spec.aws.actions.{service}: {bad:?} is not a Query API action name (letters and digits, starting upper case, like RunInstances)"
                        ));
                    }
                }
                map.into_iter()
                    .map(|(s, l)| (s, l.into_iter().collect()))
                    .collect()
            }
            None => actions::DEFAULT
                .iter()
                .map(|(s, l)| (s.to_string(), l.iter().map(|a| a.to_string()).collect()))
                .collect(),
        };
        if let Some(bad) = g.regions.iter().flatten().find(|r| !endpoint::is_region(r)) {
            wrong.get_or_insert(format!(
                "spec.aws.regions: {bad:?} is not a region name (like us-east-1)"
            ));
        }
        let credentials = match g.credentials.and_then(|c| c.secret_ref) {
            None => CredentialSource::Environment,
            Some(r) => {
                if r.namespace.is_empty() || r.name.is_empty() {
                    wrong.get_or_insert(
                        "spec.aws.credentials.secretRef: needs both namespace and name".into(),
                    );
                }
                CredentialSource::Secret {
                    namespace: r.namespace,
                    name: r.name,
                }
            }
        };
        (
            AwsPermit {
                actions,
                regions: g.regions.map(|r| r.into_iter().collect()),
                credentials,
            },
            wrong,
        )
    }

    pub fn to_spec(&self) -> AwsGrant {
        AwsGrant {
            actions: Some(
                self.actions
                    .iter()
                    .map(|(s, l)| (s.clone(), l.iter().cloned().collect()))
                    .collect(),
            ),
            regions: self.regions.as_ref().map(|r| r.iter().cloned().collect()),
            credentials: Some(AwsCredentialSource {
                secret_ref: match &self.credentials {
                    CredentialSource::Environment => None,
                    CredentialSource::Secret { namespace, name } => Some(AwsSecretRef {
                        namespace: namespace.clone(),
                        name: name.clone(),
                    }),
                },
            }),
        }
    }

    /// Refuses what the grant does not allow, naming the field that would allow it.
    fn check(
        &self,
        plugin: &str,
        region: &str,
        service: &str,
        action: &str,
    ) -> Result<(), AwsError> {
        let Some(allowed) = self.actions.get(service) else {
            return Err(AwsError::Denied(format!(
                "service {service:?} is not granted to plugin {plugin}: its WasmProvider's spec.aws.actions lists {}",
                self.actions.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        };
        if !allowed.contains(action) {
            return Err(AwsError::Denied(format!(
                "action {service}:{action} is not granted to plugin {plugin}: add it to its WasmProvider's spec.aws.actions.{service}"
            )));
        }
        if let Some(regions) = &self.regions
            && !regions.contains(region)
        {
            return Err(AwsError::Denied(format!(
                "region {region} is not granted to plugin {plugin}: its WasmProvider's spec.aws.regions allows {}",
                regions.iter().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        Ok(())
    }
}

/// `RunInstances`: what AWS names actions with.
fn is_action(a: &str) -> bool {
    a.len() <= 64
        && a.starts_with(|c: char| c.is_ascii_uppercase())
        && a.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Parameters that would carry a signature, a credential or the call's own identity.
fn reserved(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "action"
        || n == "version"
        || n.starts_with("x-amz-")
        || n.starts_with("signature")
        || n == "awsaccesskeyid"
        || n == "securitytoken"
        || n == "timestamp"
        || n == "expires"
}

/// Form-encodes as the AWS SDKs do (Python's `quote_plus`): everything but RFC 3986's
/// unreserved characters is percent-encoded, a space is `+`. A verifier that re-encodes the
/// parsed form to check the signature (moto does) then sees the bytes that were signed;
/// `form_urlencoded` leaves `*` bare and would fail it.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else if b == b' ' {
            out.push('+');
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The most bytes of parameters one call may send (UserData is at most 16 KiB on EC2; a
/// RunInstances is well under this).
const MAX_PARAMS: usize = 256 << 10;

/// One Query API call as the component asked for it.
#[derive(Debug, Clone)]
pub struct Call {
    pub region: String,
    pub service: String,
    pub version: String,
    pub action: String,
    pub params: Vec<(String, String)>,
}

/// The process-wide side: the environment's endpoints and credentials, the Secret reader and
/// the connection pool.
pub struct AwsBackend {
    env: Environment,
    client: Option<kube::Client>,
    store: credentials::CredentialStore,
    sender: send::Sender,
    metrics: Option<std::sync::Arc<capw_reconcile::metrics::Metrics>>,
}

impl AwsBackend {
    /// With the process's environment; `client` reads Secret credential sources.
    pub fn new(client: Option<kube::Client>) -> Result<Self, AwsError> {
        Self::with(Environment::from_process(), client, Policy::default())
    }

    pub fn with(
        env: Environment,
        client: Option<kube::Client>,
        policy: Policy,
    ) -> Result<Self, AwsError> {
        Ok(AwsBackend {
            env,
            client,
            store: Default::default(),
            sender: send::Sender::new(policy)?,
            metrics: None,
        })
    }

    /// Counts every call in `metrics` (`capw_aws_calls_total`).
    pub fn with_metrics(
        mut self,
        metrics: std::sync::Arc<capw_reconcile::metrics::Metrics>,
    ) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Checks, signs and sends `call` for `plugin` under `permit`.
    pub async fn call(
        &self,
        plugin: &str,
        permit: &AwsPermit,
        call: Call,
    ) -> Result<Answer, AwsError> {
        let (service, action) = (call.service.clone(), call.action.clone());
        let answer = self.checked_call(plugin, permit, call).await;
        if let Some(m) = &self.metrics {
            let status = answer.as_ref().ok().map(|a| a.status);
            m.aws_call(plugin, &service, &action, status);
        }
        answer
    }

    async fn checked_call(
        &self,
        plugin: &str,
        permit: &AwsPermit,
        call: Call,
    ) -> Result<Answer, AwsError> {
        let region = match call.region.as_str() {
            "" => self.env.region().map(str::to_string).ok_or_else(|| {
                AwsError::Invalid(
                    "the call names no region and the host's environment has no AWS_REGION".into(),
                )
            })?,
            r => r.to_string(),
        };
        if !endpoint::is_region(&region) {
            return Err(AwsError::Invalid(format!(
                "{region:?} is not a region name (like us-east-1)"
            )));
        }
        permit.check(plugin, &region, &call.service, &call.action)?;
        if !call
            .version
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'-')
            || call.version.is_empty()
        {
            return Err(AwsError::Invalid(format!(
                "API version {:?} is not a date like 2016-11-15",
                call.version
            )));
        }
        if let Some((bad, _)) = call
            .params
            .iter()
            .find(|(k, _)| reserved(k) || k.is_empty())
        {
            return Err(AwsError::Invalid(format!(
                "parameter {bad:?} is reserved: the host sets Action, Version and the signature itself"
            )));
        }
        let body = std::iter::once(("Action", call.action.as_str()))
            .chain(std::iter::once(("Version", call.version.as_str())))
            .chain(call.params.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        if body.len() > MAX_PARAMS {
            return Err(AwsError::Invalid(format!(
                "the parameters are {} bytes encoded, over the {MAX_PARAMS} a call may send",
                body.len()
            )));
        }
        let url = endpoint::endpoint(&self.env, &call.service, &call.version, &region)?;
        let creds = self
            .store
            .get(&permit.credentials, &self.env, self.client.as_ref())
            .await?;
        let answer = self
            .sender
            .send(
                &url,
                &region,
                &call.service,
                body.into(),
                &creds,
                &permit.credentials,
            )
            .await;
        tracing::debug!(
            plugin,
            service = %call.service,
            action = %call.action,
            %region,
            status = answer.as_ref().map(|a| a.status).ok(),
            "aws call"
        );
        answer
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn grant(json: serde_json::Value) -> (AwsPermit, Option<String>) {
        AwsPermit::from_spec(Some(&serde_json::from_value(json).unwrap()))
    }

    #[test]
    fn parameters_are_encoded_as_the_sdks_encode_them() {
        assert_eq!(
            encode("capa-ami-ubuntu-24.04-?1.33.4-*"),
            "capa-ami-ubuntu-24.04-%3F1.33.4-%2A"
        );
        assert_eq!(encode("a b+c/d=~:"), "a+b%2Bc%2Fd%3D~%3A");
    }

    #[test]
    fn the_default_grant_is_capas_actions_from_the_environment() {
        let p = AwsPermit::default();
        assert_eq!(p.credentials, CredentialSource::Environment);
        assert!(p.actions["ec2"].contains("RunInstances"));
        assert!(p.actions["elasticloadbalancing"].contains("RegisterTargets"));
        assert!(!p.actions.contains_key("iam"));
        assert!(p.check("aws", "us-east-1", "ec2", "RunInstances").is_ok());
        let e = p
            .check("aws", "us-east-1", "ec2", "CreateKeyPair")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "action ec2:CreateKeyPair is not granted to plugin aws: add it to its WasmProvider's spec.aws.actions.ec2"
        );
        let e = p
            .check("aws", "us-east-1", "iam", "CreateUser")
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("service \"iam\" is not granted to plugin aws"),
            "{e}"
        );
        assert_eq!(
            AwsPermit::from_spec(Some(&p.to_spec())).0,
            p,
            "status round-trips"
        );
    }

    #[test]
    fn a_grant_names_what_is_wrong_with_it() {
        let (_, wrong) = grant(serde_json::json!({"actions": {"s3": ["GetObject"]}}));
        assert!(
            wrong
                .unwrap()
                .starts_with("spec.aws.actions.s3: the host knows no endpoint")
        );
        let (_, wrong) = grant(serde_json::json!({"actions": {"ec2": ["run instances"]}}));
        assert!(wrong.unwrap().contains("is not a Query API action name"));
        let (_, wrong) = grant(serde_json::json!({"regions": ["us-east-1", "evil.example"]}));
        assert!(
            wrong
                .unwrap()
                .starts_with("spec.aws.regions: \"evil.example\"")
        );
        let (p, wrong) = grant(serde_json::json!({
            "regions": ["eu-west-1"],
            "credentials": {"secretRef": {"namespace": "capa", "name": "creds"}}
        }));
        assert_eq!(wrong, None);
        assert_eq!(
            p.credentials,
            CredentialSource::Secret {
                namespace: "capa".into(),
                name: "creds".into()
            }
        );
        assert!(p.check("aws", "us-east-1", "ec2", "RunInstances").is_err());
    }

    #[tokio::test]
    async fn reserved_parameters_and_bad_regions_are_refused_before_anything_is_sent() {
        // No endpoint listens at port 9: a call that got past the checks would say so.
        let env = Environment::from_pairs([
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
        ]);
        let policy = Policy {
            attempts: 1,
            ..Policy::default()
        };
        let b = AwsBackend::with(env, None, policy).unwrap();
        let p = AwsPermit::default();
        let call = |region: &str, params: Vec<(&str, &str)>| Call {
            region: region.into(),
            service: "ec2".into(),
            version: "2016-11-15".into(),
            action: "DescribeVpcs".into(),
            params: params
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        };
        for name in [
            "Action",
            "X-Amz-Security-Token",
            "SignatureVersion",
            "AWSAccessKeyId",
        ] {
            let e = b
                .call("aws", &p, call("us-east-1", vec![(name, "x")]))
                .await
                .unwrap_err();
            assert!(matches!(e, AwsError::Invalid(_)), "{name}: {e}");
        }
        let e = b.call("aws", &p, call("", vec![])).await.unwrap_err();
        assert!(e.to_string().contains("no AWS_REGION"), "{e}");
        let e = b
            .call("aws", &p, call("us-east-1.evil.com", vec![]))
            .await
            .unwrap_err();
        assert!(matches!(e, AwsError::Invalid(_)), "{e}");
        let e = b
            .call("aws", &p, call("us-east-1", vec![]))
            .await
            .unwrap_err();
        assert!(
            matches!(e, AwsError::Unavailable(_)),
            "it got as far as the wire: {e}"
        );
    }
}
