//! `capw-apiserver`: an embedded, Kubernetes-compatible management API.
//!
//! It serves the subset of kube-apiserver that controllers built on `kube`, `kubectl` and the
//! Python client use (discovery, built-in kinds, CustomResourceDefinitions with structural
//! schemas, every patch type, server-side apply, watch, finalizers and garbage collection),
//! stores objects durably in redb, and requires the bearer token it writes into its kubeconfig.
//!
//! ```no_run
//! # async fn demo() -> Result<(), capw_apiserver::ServerError> {
//! let server = capw_apiserver::Server::start(capw_apiserver::Config::ephemeral("/tmp/capw")).await?;
//! println!("kubeconfig at {}", server.kubeconfig_path().display());
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub(crate) mod admission;
pub mod auth;
pub mod bootstrap_token;
pub(crate) mod builtin;
pub(crate) mod controllers;
pub mod core;
pub(crate) mod http;
pub mod kubeconfig;
pub(crate) mod meta;
pub(crate) mod patch;
pub(crate) mod protobuf;
pub(crate) mod registry;
pub(crate) mod schema;
pub(crate) mod selector;
pub mod status;
pub mod store;
pub(crate) mod table;
pub mod tls;
pub mod values;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub use crate::core::Core;
pub use controllers::ControllerConfig;
/// The signer name of kubelet client certificate requests, which this server approves and signs.
pub use controllers::csrsigning::KUBELET_CLIENT as KUBELET_CLIENT_SIGNER;
pub use http::HttpSettings;
pub use http::discovery::{KubernetesVersion, KubernetesVersionError};
pub use store::StoreConfig;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The data directory could not be created or written.
    #[error("cannot use the data directory {path}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// Why it could not be used.
        #[source]
        source: std::io::Error,
    },
    /// The database could not be opened.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// The listen address could not be bound.
    #[error(
        "cannot listen on {addr} (is another server using the port? pick another with --listen)"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why binding failed.
        #[source]
        source: std::io::Error,
    },
    /// The TLS certificate authority or serving certificate could not be set up.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The initial namespaces could not be created.
    #[error("bootstrapping the initial namespaces failed")]
    Bootstrap(#[from] status::ApiError),
    /// The `--token-auth-file` could not be read.
    #[error(transparent)]
    TokenFile(#[from] auth::token_file::TokenFileError),
    /// The ServiceAccount signing key could not be made or read.
    #[error(transparent)]
    ServiceAccount(#[from] auth::service_account::ServiceAccountError),
}

/// Everything the server needs to start.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the database, the CA, the token and the kubeconfig are kept.
    pub data_dir: PathBuf,
    /// Keep everything in memory (workload clusters of the in-memory provider, benchmarks).
    pub in_memory: bool,
    /// The HTTPS listen address; port 0 picks a free one.
    pub listen: SocketAddr,
    /// The bearer token; when unset, the token in `DATA_DIR/token` is reused or a new one made.
    pub token: Option<String>,
    /// A CA (certificate PEM, key PEM) to sign the serving certificate with, instead of the one
    /// kept in the data directory: a workload cluster's CA, handed over by its bootstrap data.
    pub ca: Option<(String, String)>,
    /// Storage tuning.
    pub store: StoreConfig,
    /// Watch and request limits.
    pub http: HttpSettings,
    /// The built-in controllers' timing.
    pub controllers: ControllerConfig,
    /// The Kubernetes version `/version` reports: a workload control plane's, as its machine
    /// was asked for. capw's own API level when unset.
    pub kubernetes_version: Option<http::discovery::KubernetesVersion>,
    /// Names and addresses the serving certificate covers besides loopback and the listen
    /// address: kubeadm's `apiServer.certSANs`, the control-plane endpoint, the node's name.
    pub sans: Vec<String>,
    /// How users' requests are authorized (`--authorization-mode`).
    pub authorization: auth::Mode,
    /// More users, by token (`--token-auth-file`).
    pub token_auth_file: Option<PathBuf>,
    /// The shortest lifetime a TokenRequest may ask for (kube: 10 minutes).
    pub min_token_expiration: Duration,
}

impl Config {
    /// A server on `127.0.0.1:0` with its data in `data_dir`.
    pub fn ephemeral(data_dir: impl Into<PathBuf>) -> Self {
        Config {
            data_dir: data_dir.into(),
            in_memory: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            ca: None,
            store: StoreConfig::default(),
            http: HttpSettings::default(),
            controllers: ControllerConfig::default(),
            kubernetes_version: None,
            sans: Vec::new(),
            authorization: auth::Mode::AlwaysAllow,
            token_auth_file: None,
            min_token_expiration: Duration::from_secs(600),
        }
    }
}

/// A running server. Dropping it stops it.
pub struct Server {
    addr: SocketAddr,
    ca_pem: String,
    token: String,
    kubeconfig: PathBuf,
    app: Arc<http::App>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The user and groups a verified client certificate names.
fn subject(der: &rustls::pki_types::CertificateDer<'_>) -> http::ClientCertificate {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return http::ClientCertificate::default();
    };
    let subject = cert.subject();
    http::ClientCertificate {
        common_name: subject
            .iter_common_name()
            .find_map(|a| a.as_str().ok().map(String::from))
            .unwrap_or_default(),
        organizations: subject
            .iter_organization()
            .filter_map(|a| a.as_str().ok().map(String::from))
            .collect(),
    }
}

/// Accepts TLS connections until `stop` fires, then drops every open connection (which also
/// ends long-running watches).
async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: axum::Router,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let service = hyper_util::service::TowerToHyperService::new(router.clone());
                conns.spawn(async move {
                    let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    // rustls verified the chain to the CA during the handshake; a connection
                    // that presented a certificate is authenticated by it.
                    let certified = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| subject(c));
                    let io = hyper_util::rt::TokioIo::new(tls);
                    use hyper::service::Service as _;
                    let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                        if let Some(cert) = &certified {
                            req.extensions_mut().insert(cert.clone());
                        }
                        service.call(req)
                    });
                    if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            _ = &mut stop => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ServerError + '_ {
    move |source| ServerError::DataDir {
        path: path.to_path_buf(),
        source,
    }
}

fn load_or_make_token(dir: &Path) -> Result<String, ServerError> {
    let path = dir.join("token");
    if let Ok(t) = std::fs::read_to_string(&path)
        && !t.trim().is_empty()
    {
        return Ok(t.trim().to_string());
    }
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    kubeconfig::write_private(&path, &token).map_err(io_err(&path))?;
    Ok(token)
}

/// The data directory holds every Secret (in the store), the CA key and the admin token: the
/// directory is 0700 and each file in it 0600, whatever the umask made them.
fn make_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

impl Server {
    /// Opens the store, starts the built-in controllers and serves HTTP.
    pub async fn start(config: Config) -> Result<Server, ServerError> {
        std::fs::create_dir_all(&config.data_dir).map_err(io_err(&config.data_dir))?;
        let token = match config.token.clone() {
            Some(t) => t,
            None => load_or_make_token(&config.data_dir)?,
        };
        let store = store::Store::open(
            (!config.in_memory).then_some(config.data_dir.as_path()),
            config.store.clone(),
        )?;
        let core = Arc::new(Core::new(store));
        controllers::crd::install_all(&core);
        core.ensure_initial_namespaces().await?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServerError::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?;
        let mut sans = vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
            "::1".to_string(),
        ];
        if !addr.ip().is_unspecified() && !addr.ip().is_loopback() {
            sans.push(addr.ip().to_string());
        }
        for s in &config.sans {
            if !s.is_empty() && !sans.contains(s) {
                sans.push(s.clone());
            }
        }
        let tls = match &config.ca {
            Some((crt, key)) => tls::from_ca(crt, key, &sans)?,
            None => tls::load_or_create(&config.data_dir, sans)?,
        };
        let kubeconfig = config.data_dir.join("kubeconfig");
        let host = if addr.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        } else {
            addr
        };
        kubeconfig::write_private(
            &kubeconfig,
            &kubeconfig::render(&format!("https://{host}"), &tls.ca_pem, &token),
        )
        .map_err(io_err(&kubeconfig))?;
        make_private(&config.data_dir).map_err(io_err(&config.data_dir))?;
        let users = match &config.token_auth_file {
            Some(path) => auth::token_file::read(path)?,
            None => Default::default(),
        };
        let signer = auth::service_account::Signer::load_or_create(
            (!config.in_memory).then_some(config.data_dir.as_path()),
        )?;
        let app = Arc::new(http::App::new(
            core.clone(),
            token.clone(),
            host.to_string(),
            config.http.clone(),
            auth::Auth {
                mode: config.authorization,
                users,
                signer,
                min_token_expiration: config.min_token_expiration,
            },
        ));
        if let Some(v) = config.kubernetes_version.clone() {
            app.set_kubernetes_version(v);
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let router = http::router(app.clone());
        let mut tasks = controllers::spawn_all(core.clone(), config.controllers.clone());
        tasks.push(tokio::spawn(controllers::csrsigning::run(
            core,
            config.controllers.clone(),
            Arc::new((tls.ca_pem.clone(), tls.ca_key_pem.clone())),
        )));
        tasks.push(tokio::spawn(serve(
            listener,
            tokio_rustls::TlsAcceptor::from(tls.server_config),
            router,
            rx,
        )));
        tracing::info!(%addr, kubeconfig = %kubeconfig.display(), "capw-apiserver serving");
        Ok(Server {
            addr: host,
            ca_pem: tls.ca_pem,
            token,
            kubeconfig,
            app,
            shutdown: Some(tx),
            tasks,
        })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's `https://` URL.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The PEM of the CA that signed the serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The bearer token every request must carry.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The kubeconfig written for this server.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The shared state, for in-process writes that skip HTTP.
    pub fn core(&self) -> &Arc<Core> {
        &self.app.core
    }

    /// Requests served so far.
    pub fn request_count(&self) -> u64 {
        self.app.request_count()
    }

    /// Watches currently streaming (falls back to its baseline when clients disconnect).
    pub fn active_watches(&self) -> usize {
        self.app.active_watches.load(Ordering::Relaxed)
    }

    /// Stops serving and the controllers; waits briefly for in-flight requests.
    pub async fn shutdown(mut self) {
        self.stop().await;
    }

    async fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.app.closing.send_replace(true);
        self.app.core.store.close().await;
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
        }
    }
}

/// An in-memory API server on a listener the caller already bound, with a CA the caller owns:
/// what a simulated workload cluster serves. No data directory, no kubeconfig, no controllers.
pub struct InMemoryServer {
    /// The shared state, for in-process writes that skip HTTP.
    pub core: Arc<Core>,
    app: Arc<http::App>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    signer: tokio::task::JoinHandle<()>,
}

impl InMemoryServer {
    /// Presents `v` at `/version`: the simulated control plane's machines were booted for it.
    pub fn set_kubernetes_version(&self, v: http::discovery::KubernetesVersion) {
        self.app.set_kubernetes_version(v);
    }

    /// Serves on `listener` with a serving certificate signed by the caller's CA for loopback
    /// and `extra_sans`, requiring `token`.
    pub async fn start(
        listener: tokio::net::TcpListener,
        ca_pem: &str,
        ca_key_pem: &str,
        token: String,
        extra_sans: &[String],
    ) -> Result<InMemoryServer, ServerError> {
        let addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            source,
        })?;
        // A workload API holds a few Nodes and namespaces, and a host may run a thousand of
        // them: the default watch queue alone (16,384 preallocated slots) would be most of
        // each one's memory. A watcher that falls 256 events behind is closed and re-lists.
        let config = StoreConfig {
            retention: 1_000,
            watch_queue: 256,
            ..StoreConfig::default()
        };
        let store = store::Store::open(None, config)?;
        let core = Arc::new(Core::new(store));
        controllers::crd::install_all(&core);
        core.ensure_initial_namespaces().await?;
        let mut sans = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        sans.extend(
            extra_sans
                .iter()
                .filter(|s| !sans.contains(s))
                .cloned()
                .collect::<Vec<_>>(),
        );
        let tls = tls::from_ca(ca_pem, ca_key_pem, &sans)?;
        // A session cache preallocates 256 slots (30 KB) per server; the host's clients keep
        // their connections open, so a workload API resumes no sessions.
        let mut server_config = Arc::unwrap_or_clone(tls.server_config);
        server_config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        let app = Arc::new(http::App::new(
            core.clone(),
            token,
            addr.to_string(),
            HttpSettings::default(),
            auth::Auth {
                mode: auth::Mode::AlwaysAllow,
                users: Default::default(),
                signer: auth::service_account::Signer::load_or_create(None)?,
                min_token_expiration: Duration::from_secs(600),
            },
        ));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        // A workload cluster's nodes get their client certificates from its CA.
        let signer = tokio::spawn(controllers::csrsigning::run(
            core.clone(),
            ControllerConfig::default(),
            Arc::new((tls.ca_pem.clone(), tls.ca_key_pem.clone())),
        ));
        let task = tokio::spawn(serve(
            listener,
            tokio_rustls::TlsAcceptor::from(Arc::new(server_config)),
            http::router(app.clone()),
            rx,
        ));
        Ok(InMemoryServer {
            core,
            app,
            shutdown: Some(tx),
            task,
            signer,
        })
    }
}

impl Drop for InMemoryServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.app.closing.send_replace(true);
        self.task.abort();
        self.signer.abort();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.app.closing.send_replace(true);
        for t in &self.tasks {
            t.abort();
        }
    }
}
