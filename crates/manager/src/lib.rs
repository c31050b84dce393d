//! The manager: one crate above the core controllers, the provider driver and the plugin
//! runtime, so the `capw` binary (`capw-cli`, which also holds the node-side commands) needs no
//! controller crate itself.
//!
//! Starts everything the host runs against one management API: the CRDs it owns, the plugin
//! runtime with the WasmProvider controller and the drop-in directory, the simulated cloud, the
//! core controllers (each declares its own watches in its `setup`; this iterates
//! [`capw_core::CONTROLLERS`]), and the provider driver. `capw up`, `capw run`, the tests and the benchmarks all start it here.
//! The `/healthz`, `/readyz` and `/metrics` endpoint ([`health`]) and leader election
//! ([`leader`]) come before it: only a leader starts the host.

pub mod health;
pub mod leader;
pub mod memory;
pub mod rbac;
pub mod webhooks;

pub use capw_reconcile::metrics::Metrics;
pub use leader::{Elector, LeaderElection, LeaderError};

use capw_api::cluster::Cluster;
use capw_api::machine::Machine;
use capw_core::context::Concurrency;
use capw_driver::Driver;
pub use capw_reconcile::connect_to::ConnectTo;
use capw_reconcile::external::Resolver;

use capw_reconcile::events::BoundedRecorder;
use capw_reconcile::remote;
use capw_runtime::capabilities::aws::{
    AwsBackend, Environment as AwsEnvironment, Policy as AwsPolicy,
};
use capw_runtime::capabilities::sim_cloud::{SimCloud, SimSettings};
use capw_runtime::{Registry, Runtime};
use capw_runtime::{dropin, wasmprovider};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error("installing CRD {name}: {source}")]
    Crd { name: String, source: kube::Error },
    #[error("creating the plugin directory {path}: {source}")]
    PluginDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Engine(#[from] capw_runtime::engine::EngineError),
    #[error(transparent)]
    Webhooks(#[from] webhooks::WebhookError),
    #[error("the AWS capability cannot start: {0}")]
    Aws(String),
    #[error("cannot serve metrics on {addr}: {source}")]
    Metrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A client per component of the host, each carrying its own identity (kube's
/// impersonation of the component's ServiceAccount), so the API server's RBAC and audit tell
/// them apart.
#[derive(Clone)]
pub struct Identities {
    /// The core controllers (and the reads of referenced objects they share with the driver).
    pub core: Client,
    /// The provider driver.
    pub driver: Client,
    /// The plugin runtime: WasmProviders, the drop-in directory, `capw:host/aws`'s Secrets.
    pub runtime: Client,
}

impl std::fmt::Debug for Identities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identities").finish_non_exhaustive()
    }
}

/// The ServiceAccounts the components act as: `capw manifests` makes them, and the host's own
/// account may impersonate only these.
pub const COMPONENT_ACCOUNTS: [&str; 3] = ["capw-core", "capw-driver", "capw-plugin-runtime"];

/// How to run the host.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub plugins: PathBuf,
    pub cache_dir: PathBuf,
    pub sim: SimSettings,
    /// The host's instruments; [`health::serve`] renders them.
    pub metrics: Arc<Metrics>,
    /// Where the Cluster and ClusterClass admission webhooks are served (and registered with
    /// the API server); `None` serves and registers none.
    pub webhooks: Option<SocketAddr>,
    /// The Service in front of the host's replicas, when the webhooks are reached through one.
    pub webhook_service: Option<webhooks::ServiceRef>,
    pub cluster_concurrency: u16,
    pub machine_concurrency: u16,
    /// How often the drop-in directory is scanned when no change was reported (the fallback of
    /// the file watcher).
    pub dropin_interval: Duration,
    /// The `AWS_*` environment `capw:host/aws` takes endpoints, region and (for grants that
    /// name no Secret) credentials from: the process's, unless a test gives its own.
    pub aws: AwsEnvironment,
    /// Where workload APIs are dialled instead of their endpoints (`capw sim ec2` writes it).
    pub connect_to: ConnectTo,
    /// Per-component clients; `None` runs every component with the host's client.
    pub identities: Option<Identities>,
}

impl HostConfig {
    pub fn new(plugins: PathBuf, cache_dir: PathBuf) -> Self {
        HostConfig {
            plugins,
            cache_dir,
            sim: SimSettings::default(),
            metrics: Arc::new(Metrics::default()),
            webhooks: None,
            webhook_service: None,
            cluster_concurrency: 50,
            machine_concurrency: 100,
            dropin_interval: Duration::from_secs(10),
            aws: AwsEnvironment::from_process(),
            connect_to: ConnectTo::default(),
            identities: None,
        }
    }
}

/// A running host.
pub struct Host {
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    pub sim: Arc<SimCloud>,
    pub driver: Arc<Driver>,
    pub clusters: Store<Cluster>,
    pub machines: Store<Machine>,
    /// Where the admission webhooks are served, when they are.
    pub webhooks_addr: Option<SocketAddr>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Host {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Installs the host's own CRDs (server-side apply) and waits until they are established.
pub async fn install_crds(client: &Client) -> Result<(), ManagerError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, crd) in capw_api::crds() {
        let name = crd.name_any();
        api.patch(
            &name,
            &PatchParams::apply("capw-host").force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(|source| ManagerError::Crd {
            name: name.clone(),
            source,
        })?;
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            &name,
            kube::runtime::conditions::is_crd_established(),
        );
        let _ = tokio::time::timeout(Duration::from_secs(10), established).await;
    }
    Ok(())
}

fn reporter(name: &str) -> Reporter {
    Reporter {
        controller: name.into(),
        instance: std::env::var("HOSTNAME").ok(),
    }
}

/// The kinds the host's controllers reconcile: each core controller's, and the plugin
/// runtime's WasmProvider. Provider kinds belong to their plugins (the driver).
pub fn owned_kinds() -> Vec<&'static str> {
    let mut kinds: Vec<_> = capw_core::CONTROLLERS
        .iter()
        .filter_map(|c| c.owns)
        .collect();
    kinds.push(wasmprovider::OWNS);
    kinds
}

/// Starts the host; it runs until the returned `Host` is dropped.
pub async fn start(client: Client, config: HostConfig) -> Result<Host, ManagerError> {
    std::fs::create_dir_all(&config.plugins).map_err(|source| ManagerError::PluginDir {
        path: config.plugins.clone(),
        source,
    })?;
    install_crds(&client).await?;
    let mut tasks = vec![];
    // Before any controller writes a Cluster: the configurations of an earlier run name a
    // port and CA that are gone.
    let webhooks_addr = match config.webhooks {
        Some(addr) => Some(
            webhooks::start(
                client.clone(),
                config
                    .identities
                    .as_ref()
                    .map_or_else(|| client.clone(), |i| i.core.clone()),
                addr,
                config.webhook_service.clone(),
                &mut tasks,
            )
            .await?,
        ),
        None => None,
    };
    let metrics = config.metrics.clone();
    let ids = config.identities.clone().unwrap_or_else(|| Identities {
        core: client.clone(),
        driver: client.clone(),
        runtime: client.clone(),
    });
    let runtime = Arc::new(Runtime::new(&config.cache_dir)?);
    let sim = SimCloud::new(config.sim.clone());
    runtime.engine.services.backends.provide(sim.clone());
    let aws = AwsBackend::with(
        config.aws.clone(),
        Some(ids.runtime.clone()),
        AwsPolicy::default(),
    )
    .map_err(|e| ManagerError::Aws(e.to_string()))?
    .with_metrics(metrics.clone());
    runtime.engine.services.backends.provide(Arc::new(aws));
    let registry = Arc::new(Registry::default());
    let wp = Arc::new(wasmprovider::Ctx {
        claims: Default::default(),
        client: ids.runtime.clone(),
        plugins_dir: config.plugins.clone(),
        runtime,
        registry: registry.clone(),
        recorder: BoundedRecorder::new(ids.runtime.clone(), wasmprovider::reporter()),
        skeleton: capw_reconcile::skeleton::Skeleton::new(
            "wasmprovider",
            wasmprovider::FINALIZER,
            metrics.clone(),
        ),
    });
    tasks.push(tokio::spawn(wasmprovider::run(wp)));
    tasks.push(tokio::spawn(dropin::run(
        ids.runtime.clone(),
        config.plugins.clone(),
        config.dropin_interval,
    )));

    let resolver = Resolver::new(ids.core.clone());
    // One client per workload cluster, shared by core and the provider driver.
    let remotes = Arc::new(remote::Remotes::new(config.connect_to.clone()));
    let (core, feeds) = capw_core::caches::start(
        capw_core::caches::Shared {
            client: ids.core.clone(),
            resolver: resolver.clone(),
            remotes: remotes.clone(),
            recorder: BoundedRecorder::new(ids.core.clone(), reporter("capw-core")),
            metrics: metrics.clone(),
        },
        &mut tasks,
    );
    let concurrency = Concurrency {
        clusters: config.cluster_concurrency,
        machines: config.machine_concurrency,
    };
    let controllers: Vec<_> = capw_core::CONTROLLERS
        .iter()
        .map(|c| (c.setup)(&core, &feeds, &concurrency))
        .collect();
    let driver = Driver::new(
        ids.driver.clone(),
        registry.clone(),
        resolver,
        capw_driver::Caches {
            clusters: core.clusters.clone(),
            machines: core.machines.clone(),
            machines_by_cluster: core.index.machines.clone(),
            secrets: core.secrets.clone(),
            machine_changes: feeds.machines.clone(),
            cluster_changes: feeds.clusters.clone(),
            remotes,
        },
        BoundedRecorder::new(ids.driver.clone(), reporter("capw-driver")),
        metrics.clone(),
    );
    {
        // One task waits for the caches: kube's `Store::wait_until_ready` wakes only the waiter
        // that polled it last, so the driver and the controllers must not wait side by side.
        let (core, driver) = (core.clone(), driver.clone());
        tasks.push(tokio::spawn(async move {
            core.wait_until_ready().await;
            futures::future::join(futures::future::join_all(controllers), driver.run()).await;
        }));
    }
    Ok(Host {
        registry,
        metrics,
        sim,
        driver,
        clusters: core.clusters.clone(),
        machines: core.machines.clone(),
        webhooks_addr,
        tasks,
    })
}

impl Host {
    /// One line for `capw up`'s live status.
    pub fn status_line(&self) -> String {
        let plugins: Vec<String> = self
            .registry
            .names()
            .iter()
            .filter_map(|n| {
                self.registry
                    .get(n)
                    .map(|s| format!("{n} {}", s.current().metadata.version))
            })
            .collect();
        summary(&self.clusters.state(), &self.machines.state(), &plugins)
    }
}

/// The status line of [`Host::status_line`]: phases as the objects' status reports them, so a
/// Cluster counts as provisioned only once core observed it so.
fn summary(clusters: &[Arc<Cluster>], machines: &[Arc<Machine>], plugins: &[String]) -> String {
    let provisioned = clusters
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Provisioned"))
        .count();
    let running = machines
        .iter()
        .filter(|m| m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count();
    format!(
        "clusters {provisioned}/{} provisioned · machines {running}/{} running · plugins: {}",
        clusters.len(),
        machines.len(),
        if plugins.is_empty() {
            "none yet".to_string()
        } else {
            plugins.join(", ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crd_kind_has_one_controller_that_owns_it() {
        let owned = owned_kinds();
        for (file, crd) in capw_api::crds() {
            let kind = crd.spec.names.kind.as_str();
            assert_eq!(
                owned.iter().filter(|k| **k == kind).count(),
                1,
                "{file}: {kind} needs exactly one controller (capw_core::CONTROLLERS or the runtime's)"
            );
        }
        assert_eq!(owned.len(), capw_api::crds().len(), "{owned:?}");
    }

    fn with_phase<K: serde::de::DeserializeOwned>(kind: &str, name: &str, phase: &str) -> Arc<K> {
        let spec = match kind {
            "Cluster" => serde_json::json!({}),
            _ => serde_json::json!({"clusterName": "c", "bootstrap": {},
                "infrastructureRef": {"apiGroup": "g", "kind": "K", "name": "n"}}),
        };
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind,
                "metadata": {"name": name, "namespace": "default"},
                "spec": spec, "status": {"phase": phase}}))
            .unwrap_or_else(|e| panic!("{kind}: {e}")),
        )
    }

    #[test]
    fn the_status_line_counts_observed_phases() {
        let clusters: Vec<Arc<Cluster>> = vec![
            with_phase("Cluster", "a", "Provisioned"),
            with_phase("Cluster", "b", "Provisioning"),
        ];
        let machines: Vec<Arc<Machine>> = vec![
            with_phase("Machine", "m1", "Running"),
            with_phase("Machine", "m2", "Running"),
            with_phase("Machine", "m3", "Provisioned"),
        ];
        assert_eq!(
            summary(
                &clusters,
                &machines,
                &["inmemory v1".into(), "docker v2".into()]
            ),
            "clusters 1/2 provisioned · machines 2/3 running · plugins: inmemory v1, docker v2"
        );
        assert_eq!(
            summary(&[], &[], &[]),
            "clusters 0/0 provisioned · machines 0/0 running · plugins: none yet"
        );
    }

    /// A client for an address nothing listens on: a request fails at once.
    fn unreachable_client() -> Client {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("{e}"));
        let url = format!("http://127.0.0.1:{port}")
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        Client::try_from(kube::Config::new(url)).unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn a_plugin_directory_that_cannot_be_made_is_named_before_anything_starts() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap_or_else(|e| panic!("{e}"));
        let plugins = file.join("plugins");
        let err = start(
            unreachable_client(),
            HostConfig::new(plugins.clone(), dir.path().join("cache")),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("started with an impossible plugin directory"));
        assert!(
            matches!(&err, ManagerError::PluginDir { path, .. } if *path == plugins),
            "{err}"
        );
        assert!(err.to_string().contains("a-file/plugins"), "{err}");
    }

    #[tokio::test]
    async fn an_unreachable_api_fails_the_start_naming_the_first_crd() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let err = start(
            unreachable_client(),
            HostConfig::new(dir.path().join("plugins"), dir.path().join("cache")),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("started without an API server"));
        let first = capw_api::crds()
            .first()
            .map(|(_, crd)| crd.name_any())
            .unwrap_or_default();
        assert!(
            matches!(&err, ManagerError::Crd { name, .. } if *name == first),
            "{err}"
        );
        assert!(
            dir.path().join("plugins").is_dir(),
            "the plugin directory is made first"
        );
    }
}
