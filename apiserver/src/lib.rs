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

pub mod builtin;
pub mod controllers;
pub mod core;
pub mod http;
pub mod kubeconfig;
pub mod meta;
pub mod patch;
pub mod registry;
pub mod schema;
pub mod selector;
pub mod status;
pub mod store;
pub mod table;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub use crate::core::Core;
pub use controllers::ControllerConfig;
pub use http::HttpSettings;
pub use store::StoreConfig;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The data directory could not be created or written.
    #[error("data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The database could not be opened.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source} (is another server using the port? pick another with --listen)")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The initial namespaces could not be created.
    #[error("bootstrapping namespaces: {0}")]
    Bootstrap(#[from] status::ApiError),
}

/// Everything the server needs to start.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    /// Keep everything in memory (workload clusters of the in-memory provider, benchmarks).
    pub in_memory: bool,
    pub listen: SocketAddr,
    /// The bearer token; when unset, the token in `DATA_DIR/token` is reused or a new one made.
    pub token: Option<String>,
    pub store: StoreConfig,
    pub http: HttpSettings,
    pub controllers: ControllerConfig,
}

impl Config {
    /// A server on `127.0.0.1:0` with its data in `data_dir`.
    pub fn ephemeral(data_dir: impl Into<PathBuf>) -> Self {
        Config {
            data_dir: data_dir.into(),
            in_memory: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            store: StoreConfig::default(),
            http: HttpSettings::default(),
            controllers: ControllerConfig::default(),
        }
    }
}

/// A running server. Dropping it stops it.
pub struct Server {
    addr: SocketAddr,
    token: String,
    kubeconfig: PathBuf,
    app: Arc<http::App>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ServerError + '_ {
    move |source| ServerError::DataDir { path: path.to_path_buf(), source }
}

fn load_or_make_token(dir: &Path) -> Result<String, ServerError> {
    let path = dir.join("token");
    if let Ok(t) = std::fs::read_to_string(&path)
        && !t.trim().is_empty()
    {
        return Ok(t.trim().to_string());
    }
    let token = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    kubeconfig::write_private(&path, &token).map_err(io_err(&path))?;
    Ok(token)
}

impl Server {
    /// Opens the store, starts the built-in controllers and serves HTTP.
    pub async fn start(config: Config) -> Result<Server, ServerError> {
        std::fs::create_dir_all(&config.data_dir).map_err(io_err(&config.data_dir))?;
        let token = match config.token.clone() {
            Some(t) => t,
            None => load_or_make_token(&config.data_dir)?,
        };
        let store = store::Store::open((!config.in_memory).then_some(config.data_dir.as_path()), config.store.clone())?;
        let core = Arc::new(Core::new(store));
        controllers::crd::install_all(&core);
        core.ensure_initial_namespaces().await?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServerError::Bind { addr: config.listen, source })?;
        let addr = listener.local_addr().map_err(|source| ServerError::Bind { addr: config.listen, source })?;
        let kubeconfig = config.data_dir.join("kubeconfig");
        kubeconfig::write_private(&kubeconfig, &kubeconfig::render(&format!("http://{addr}"), &token))
            .map_err(io_err(&kubeconfig))?;
        let app = Arc::new(http::App::new(core.clone(), token.clone(), addr.to_string(), config.http.clone()));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let router = http::router(app.clone());
        let mut tasks = controllers::spawn_all(core, config.controllers.clone());
        tasks.push(tokio::spawn(async move {
            let serve = axum::serve(listener, router).with_graceful_shutdown(async {
                let _ = rx.await;
            });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "HTTP server stopped");
            }
        }));
        tracing::info!(%addr, kubeconfig = %kubeconfig.display(), "capw-apiserver serving");
        Ok(Server { addr, token, kubeconfig, app, shutdown: Some(tx), tasks })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn core(&self) -> &Arc<Core> {
        &self.app.core
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
