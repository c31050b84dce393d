//! Serving the core's admission webhooks (`capw_core::webhooks`) over HTTPS and registering
//! them with the management API, as a provider's manager and cert-manager do together
//! upstream.
//!
//! Beside `capw up` the host makes a CA at every start and registers its own URL. In a cluster
//! (`--webhook-service NAMESPACE/NAME`) the replicas sit behind a Service and must present
//! certificates one caBundle verifies, so they share a CA kept in the Secret `NAME-cert` in
//! that namespace, as cert-controller's rotator does: the first replica makes it, each replica
//! signs its own serving certificate for the Service's names with it, and the configurations
//! name the Service and carry the bundle. The CA is replaced once its `capw.dev/rotate-after`
//! time has passed; the bundle then holds the new CA and the old one, so replicas still
//! serving with the old CA stay trusted until they load the new one (each looks again every
//! few minutes).

use capw_core::webhooks::{self, Webhooks};
pub use capw_core::webhooks::{Endpoint, configurations};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("making the webhook certificate: {0}")]
    Certificate(#[from] capw_apiserver::tls::TlsError),
    #[error("cannot serve the admission webhooks on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("registering the {name} webhook configuration: {source}")]
    Register { name: String, source: kube::Error },
    #[error("the webhook CA Secret {namespace}/{name}: {source}")]
    Secret {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("the webhook CA Secret {0} kept changing under this host; try again")]
    Contended(String),
    #[error("--webhook-service {0:?}: expected NAMESPACE/NAME or NAMESPACE/NAME:PORT")]
    Service(String),
}

/// The Service in front of the host's replicas in a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    pub port: u16,
}

impl std::str::FromStr for ServiceRef {
    type Err = WebhookError;

    /// `NAMESPACE/NAME`, or `NAMESPACE/NAME:PORT` (443 by default, as kube's).
    fn from_str(s: &str) -> Result<Self, WebhookError> {
        let bad = || WebhookError::Service(s.to_string());
        let (namespace, rest) = s.split_once('/').ok_or_else(bad)?;
        let (name, port) = match rest.split_once(':') {
            Some((n, p)) => (n, p.parse().map_err(|_| bad())?),
            None => (rest, 443),
        };
        if namespace.is_empty() || name.is_empty() {
            return Err(bad());
        }
        Ok(ServiceRef {
            namespace: namespace.into(),
            name: name.into(),
            port,
        })
    }
}

impl ServiceRef {
    /// The names a client in the cluster dials it by.
    fn dns_names(&self) -> Vec<String> {
        let (n, ns) = (&self.name, &self.namespace);
        vec![
            format!("{n}.{ns}.svc"),
            format!("{n}.{ns}.svc.cluster.local"),
            format!("{n}.{ns}"),
            n.clone(),
        ]
    }

    fn secret(&self) -> String {
        format!("{}-cert", self.name)
    }
}

/// When a shared CA is replaced.
const ROTATE_AFTER: &str = "capw.dev/rotate-after";
/// How long a shared CA serves before it is replaced.
const CA_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// How often a replica looks for a rotated CA.
const RELOAD_EVERY: Duration = Duration::from_secs(300);

/// The CA to sign with, and the bundle the configurations carry.
#[derive(Debug, Clone, PartialEq)]
struct Ca {
    cert: String,
    key: String,
    bundle: String,
}

/// Serves the webhooks on `addr` and registers them; returns the address served. `client`
/// registers them and keeps the CA; the webhooks read what they check (ClusterClasses,
/// Clusters) through `lookups`, the core's identity.
pub async fn start(
    client: Client,
    lookups: Client,
    addr: SocketAddr,
    service: Option<ServiceRef>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<SocketAddr, WebhookError> {
    let ca = match &service {
        None => {
            let (cert, key) = capw_apiserver::tls::generate_ca()?;
            Ca {
                bundle: cert.clone(),
                cert,
                key,
            }
        }
        Some(svc) => shared_ca(&client, svc).await?,
    };
    let sans = match &service {
        None => vec![addr.ip().to_string(), "localhost".to_string()],
        Some(svc) => svc.dns_names(),
    };
    let tls = capw_apiserver::tls::from_ca(&ca.cert, &ca.key, &sans)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| WebhookError::Listen { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| WebhookError::Listen { addr, source })?;
    let hooks = Arc::new(Webhooks::new(lookups));
    let current = Arc::new(RwLock::new(tls.server_config));
    tasks.push(tokio::spawn(serve(listener, current.clone(), hooks)));
    let endpoint = match &service {
        None => Endpoint::Url(format!("https://{bound}")),
        Some(svc) => Endpoint::Service {
            namespace: svc.namespace.clone(),
            name: svc.name.clone(),
            port: svc.port,
        },
    };
    register(&client, &endpoint, &ca.bundle).await?;
    if let Some(svc) = service {
        tasks.push(tokio::spawn(reload(
            client, svc, endpoint, ca, sans, current,
        )));
    }
    tracing::info!(%bound, "admission webhooks served and registered");
    Ok(bound)
}

fn field(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()?
        .get(key)
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
}

/// The CA the replicas share, made or rotated here when none is current.
async fn shared_ca(client: &Client, svc: &ServiceRef) -> Result<Ca, WebhookError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &svc.namespace);
    let name = svc.secret();
    let failed = |source| WebhookError::Secret {
        namespace: svc.namespace.clone(),
        name: name.clone(),
        source,
    };
    for _ in 0..5 {
        let now = jiff::Timestamp::now();
        let current = api.get_opt(&name).await.map_err(failed)?;
        let old = current.as_ref().and_then(|s| {
            let cert = field(s, "ca.crt")?;
            let key = field(s, "ca.key")?;
            let bundle = field(s, "ca-bundle.crt").unwrap_or_else(|| cert.clone());
            Some(Ca { cert, key, bundle })
        });
        let due = current
            .as_ref()
            .and_then(|s| s.metadata.annotations.as_ref()?.get(ROTATE_AFTER).cloned())
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .is_some_and(|t| t <= now);
        if let Some(ca) = &old
            && !due
        {
            return Ok(ca.clone());
        }
        // Named by the time it was made, as kubelet names its self-signed CAs, and made unique:
        // a bundle's verifier finds each CA by its name.
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let (cert, key) = capw_apiserver::tls::generate_ca_named(&format!(
            "capw-webhook-ca@{}-{}",
            now.as_second(),
            &suffix[..8]
        ))?;
        // The old CA stays in the bundle: replicas still serving with it stay trusted.
        let bundle = match &old {
            Some(o) => format!("{cert}{}", o.cert),
            None => cert.clone(),
        };
        let rotate_after = now
            .checked_add(jiff::SignedDuration::try_from(CA_LIFETIME).unwrap_or_default())
            .unwrap_or(now);
        let data = BTreeMap::from([
            ("ca.crt".to_string(), ByteString(cert.clone().into_bytes())),
            ("ca.key".to_string(), ByteString(key.clone().into_bytes())),
            (
                "ca-bundle.crt".to_string(),
                ByteString(bundle.clone().into_bytes()),
            ),
        ]);
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(svc.namespace.clone()),
                resource_version: current
                    .as_ref()
                    .and_then(|s| s.metadata.resource_version.clone()),
                annotations: Some(BTreeMap::from([(
                    ROTATE_AFTER.to_string(),
                    rotate_after.to_string(),
                )])),
                ..Default::default()
            },
            data: Some(data),
            type_: Some("Opaque".into()),
            ..Default::default()
        };
        let written = match &current {
            Some(_) => api.replace(&name, &PostParams::default(), &secret).await,
            None => api.create(&PostParams::default(), &secret).await,
        };
        match written {
            Ok(_) => {
                tracing::info!(secret = %name, rotated = old.is_some(), "made the webhook CA the replicas share");
                return Ok(Ca { cert, key, bundle });
            }
            // Another replica wrote it first: take theirs.
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(failed(e)),
        }
    }
    Err(WebhookError::Contended(name))
}

/// Looks for a rotated CA every few minutes: serves with it and registers its bundle.
async fn reload(
    client: Client,
    svc: ServiceRef,
    endpoint: Endpoint,
    mut ca: Ca,
    sans: Vec<String>,
    current: Arc<RwLock<Arc<tokio_rustls::rustls::ServerConfig>>>,
) {
    loop {
        tokio::time::sleep(RELOAD_EVERY).await;
        let next = match shared_ca(&client, &svc).await {
            Ok(next) => next,
            Err(e) => {
                tracing::warn!(error = %e, "looking for a rotated webhook CA failed");
                continue;
            }
        };
        if next == ca {
            continue;
        }
        match capw_apiserver::tls::from_ca(&next.cert, &next.key, &sans) {
            Ok(tls) => {
                if let Ok(mut c) = current.write() {
                    *c = tls.server_config;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the rotated webhook CA cannot sign");
                continue;
            }
        }
        if let Err(e) = register(&client, &endpoint, &next.bundle).await {
            tracing::warn!(error = %e, "registering the rotated webhook CA failed");
        }
        ca = next;
    }
}

async fn register(client: &Client, endpoint: &Endpoint, ca: &str) -> Result<(), WebhookError> {
    for config in webhooks::configurations(endpoint, ca) {
        let kind = config["kind"].as_str().unwrap_or_default().to_string();
        let name = config["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", &kind);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
        api.patch(
            &name,
            &PatchParams::apply("capw").force(),
            &Patch::Apply(&config),
        )
        .await
        .map_err(|source| WebhookError::Register { name, source })?;
    }
    Ok(())
}

async fn serve(
    listener: tokio::net::TcpListener,
    current: Arc<RwLock<Arc<tokio_rustls::rustls::ServerConfig>>>,
    hooks: Arc<Webhooks>,
) {
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "webhook accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(config) = current.read().map(|c| c.clone()) else {
            continue;
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let hooks = hooks.clone();
        tokio::spawn(async move {
            let Ok(Ok(tls)) =
                tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
            else {
                return;
            };
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let hooks = hooks.clone();
                    async move {
                        use http_body_util::BodyExt;
                        let path = req.uri().path().to_string();
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let answer = hooks.review(&path, &body).await;
                        let bytes = serde_json::to_vec(&answer).unwrap_or_default();
                        hyper::Response::builder()
                            .header("content-type", "application/json")
                            .body(http_body_util::Full::new(bytes::Bytes::from(bytes)))
                    }
                });
            let io = hyper_util::rt::TokioIo::new(tls);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(error = %e, "webhook connection ended with an error");
            }
        });
    }
}
