//! Clients for workload clusters, built from the `<cluster>-kubeconfig` Secret the control plane
//! provider wrote (upstream's ClusterCache, without the cache: a Machine reads its Node by
//! providerID when it reconciles). Nothing in the Secret is trusted: the kubeconfig must pass
//! [`crate::kubeconfig::sanitize`] against the Cluster's endpoint, and the client is built from
//! what that returns.
//!
//! The clients live as long as their cluster, but their connections do not: a workload API is
//! asked a few questions while its Machines change, then nothing for minutes. kube's default
//! client keeps every connection it opened, each with its read buffers, TLS state and dispatch
//! task on both ends, so a thousand quiet clusters held a thousand idle connections. Here at
//! most one connection per cluster stays open, for [`IDLE`]. kube's `ClientBuilder` takes no
//! pool settings, so the stack is assembled from kube's own layers around a configured hyper
//! client, over kube's TLS configuration with a session cache sized for one server.

use crate::connect_to::ConnectTo;
use capw_api::cluster::Cluster;
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use k8s_openapi::api::core::v1::Secret;
use kube::client::{Body, ConfigExt};
use kube::config::KubeConfigOptions;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Config};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tower::{BoxError, ServiceBuilder};

/// How long an unused connection to a workload API stays open.
const IDLE: Duration = Duration::from_secs(5);
/// How long a workload API may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a workload API may take to answer.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error(
        "Secret {0} does not exist yet, or lacks the label cluster.x-k8s.io/cluster-name; the control plane provider writes it"
    )]
    Missing(String),
    #[error("Secret {0} has no key `value` holding a kubeconfig")]
    NoValue(String),
    #[error("Secret {0} does not hold a usable kubeconfig: {1}")]
    Invalid(String, String),
    #[error("Secret {secret} was refused: {error}")]
    Refused {
        secret: String,
        error: crate::kubeconfig::KubeconfigError,
    },
}

/// Clients by `namespace/cluster`, rebuilt when the Secret changes.
#[derive(Default)]
pub struct Remotes {
    clients: Mutex<HashMap<String, (String, Client)>>,
    connect_to: ConnectTo,
}

impl Remotes {
    /// Clients that dial workload APIs where `connect_to` routes them.
    pub fn new(connect_to: ConnectTo) -> Self {
        Remotes {
            clients: Mutex::default(),
            connect_to,
        }
    }

    /// The client of a workload cluster. `secrets` caches the Secrets labelled with a cluster
    /// name: upstream requires that label on `<cluster>-kubeconfig` for the same reason.
    pub async fn client(
        &self,
        secrets: &Store<Secret>,
        clusters: &Store<Cluster>,
        ns: &str,
        cluster: &str,
    ) -> Result<Client, RemoteError> {
        let name = format!("{cluster}-kubeconfig");
        let secret = secrets
            .get(&ObjectRef::new(&name).within(ns))
            .ok_or_else(|| RemoteError::Missing(format!("{ns}/{name}")))?;
        let endpoint = clusters
            .get(&ObjectRef::new(cluster).within(ns))
            .and_then(|c| c.spec.control_plane_endpoint.clone());
        let route = endpoint.as_ref().and_then(|e| {
            let port = u16::try_from(e.port).ok()?;
            self.connect_to.route(&e.host, port)
        });
        // A moved endpoint or route invalidates the client as much as a changed Secret does.
        let rv = format!(
            "{}@{:?}>{:?}",
            secret.metadata.resource_version.clone().unwrap_or_default(),
            endpoint.as_ref().map(|e| (&e.host, e.port)),
            route
        );
        let key = format!("{ns}/{cluster}");
        if let Some((seen, c)) = self
            .clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            && *seen == rv
        {
            return Ok(c.clone());
        }
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .ok_or_else(|| RemoteError::NoValue(format!("{ns}/{name}")))?;
        let invalid = |e: String| RemoteError::Invalid(format!("{ns}/{name}"), e);
        let text = String::from_utf8(bytes.0.clone()).map_err(|e| invalid(e.to_string()))?;
        let kc = crate::kubeconfig::sanitize(&text, endpoint.as_ref()).map_err(|error| {
            RemoteError::Refused {
                secret: format!("{ns}/{name}"),
                error,
            }
        })?;
        let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| invalid(e.to_string()))?;
        if let (Some(e), Some((addr, port))) = (endpoint.as_ref(), route) {
            // The kubeconfig's server is the endpoint (sanitize checked it): dial the route,
            // and verify the certificate for the endpoint's name.
            let url = format!("https://{addr}:{port}");
            config.cluster_url = url.parse().map_err(|e| invalid(format!("{url}: {e}")))?;
            config.tls_server_name.get_or_insert_with(|| e.host.clone());
        }
        let client = pooled(config).map_err(|e| invalid(e.to_string()))?;
        self.clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (rv, client.clone()));
        Ok(client)
    }

    /// Forgets a deleted cluster's client, and with it its connection.
    pub fn forget(&self, ns: &str, cluster: &str) {
        self.clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&format!("{ns}/{cluster}"));
    }
}

/// A client over a connection pool that keeps one idle connection per workload API for
/// [`IDLE`], with kube's base-URI and authentication layers.
fn pooled(config: Config) -> Result<Client, BoxError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let mut tls = config.rustls_client_config()?;
    // A client talks to one API server: room for that one name's session tickets, where
    // rustls' default preallocates 256 names' worth (about 28 KB per client).
    tls.resumption = rustls::client::Resumption::in_memory_sessions(1);
    let mut https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        https = https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(
            rustls::pki_types::ServerName::try_from(name.clone())?,
        ));
    }
    let mut connector = TimeoutConnector::new(https.enable_http1().wrap_connector(http));
    connector.set_read_timeout(Some(READ_TIMEOUT));
    let pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(IDLE)
        .pool_max_idle_per_host(1)
        .pool_timer(TokioTimer::new())
        .build::<_, Body>(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .map_err(BoxError::from)
        .service(pool);
    Ok(Client::new(service, config.default_namespace))
}
