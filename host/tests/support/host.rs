//! The in-process test environment: a real `capw apiserver` child over HTTPS, the host's
//! controllers and plugin runtime in the test's own process (so a test reads its metrics and
//! driver directly), a plugin directory of real components, and a HOME for kubectl.

#![allow(dead_code)]

use super::ApiServer;
use capw_manager::{self as manager, Host, HostConfig};
use capw_runtime::capabilities::sim_cloud::SimSettings;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub struct Env {
    pub api: ApiServer,
    pub client: Client,
    pub host: Host,
    pub kubeconfig: PathBuf,
    pub home: PathBuf,
    /// The kinds `kubectl get` prints beside the host's status line when a wait times out.
    pub dump: &'static str,
    pub dir: tempfile::TempDir,
}

/// The bundled in-memory stack: bootstrap, control plane and in-memory infrastructure, the
/// last granted the simulated cloud.
pub const BUNDLED_INMEMORY: &[(&str, &str)] = &[
    ("bootstrap", "bootstrap.wasm"),
    ("control-plane", "control-plane.wasm"),
    ("inmemory", "inmemory.wasm"),
];

/// The in-memory provider's manifest in the bundled stack.
pub const SIM_CLOUD: &[(&str, &str)] = &[("inmemory", "capabilities: [sim-cloud]\n")];

/// A host whose plugin directory holds `plugins` (file stem → component in target/plugins)
/// and `manifests` (file stem → NAME.yaml). Simulated machines boot in 100 ms and join in
/// 200 ms, and the drop-in directory is scanned every 200 ms, so a test waits on the host's
/// logic rather than on its timers.
pub async fn start(plugins: &[(&str, &str)], manifests: &[(&str, &str)]) -> Env {
    start_configured(plugins, manifests, |_| {}).await
}

/// [`start`], with the host's configuration changed by `configure` first.
pub async fn start_configured(
    plugins: &[(&str, &str)],
    manifests: &[(&str, &str)],
    configure: impl FnOnce(&mut HostConfig),
) -> Env {
    // RUST_LOG=capw_core=debug,capw_driver=debug shows the host's reconciles when a test fails.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().expect("tempdir");
    let api = ApiServer::start(&dir.path().join("api"));
    let client = super::kube_client(&api.kubeconfig).await;
    let pdir = dir.path().join("plugins");
    std::fs::create_dir_all(&pdir).expect("plugins dir");
    for (stem, file) in plugins {
        std::fs::copy(super::plugin(file), pdir.join(format!("{stem}.wasm"))).expect("copy");
    }
    for (stem, yaml) in manifests {
        std::fs::write(pdir.join(format!("{stem}.yaml")), yaml).expect("manifest");
    }
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let host = launch(&client, dir.path(), configure).await;
    Env {
        kubeconfig: api.kubeconfig.clone(),
        api,
        client,
        host,
        home,
        dump: "",
        dir,
    }
}

/// A host on `client` with the tests' configuration for `dir`, changed by `configure`.
async fn launch(
    client: &Client,
    dir: &std::path::Path,
    configure: impl FnOnce(&mut HostConfig),
) -> Host {
    let mut config = test_config(dir);
    configure(&mut config);
    manager::start(client.clone(), config)
        .await
        .expect("host starts")
}

/// The tests' host configuration for the plugin directory and cache under `dir`.
fn test_config(dir: &std::path::Path) -> HostConfig {
    let mut config = HostConfig::new(dir.join("plugins"), dir.join("cache"));
    config.sim = SimSettings {
        boot_delay: Duration::from_millis(100),
        node_delay: Duration::from_millis(200),
    };
    config.dropin_interval = Duration::from_millis(200);
    config
}

impl Env {
    /// Stops the host and starts a new one on the same API server and plugin directory, as a
    /// restarted process would (nothing of the old one's memory is kept).
    pub async fn restart(self, configure: impl FnOnce(&mut HostConfig)) -> Env {
        let Env {
            api,
            client,
            host,
            kubeconfig,
            home,
            dump,
            dir,
        } = self;
        drop(host);
        let host = launch(&client, dir.path(), configure).await;
        Env {
            api,
            client,
            host,
            kubeconfig,
            home,
            dump,
            dir,
        }
    }

    /// Waits until the driver serves `n` kinds (a plugin serves one kind or more).
    pub async fn serving(&self, what: &str, n: usize) {
        self.eventually(what, 60, || async {
            (self.host.driver.driven().len() >= n).then_some(())
        })
        .await;
    }

    /// `kubectl ARGS` as the test's user; a failure fails the test with what kubectl printed.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, text) = super::kubectl(&self.kubeconfig, &self.home, args, stdin);
        assert!(ok, "kubectl {args:?} failed: {text}");
        text
    }

    /// [`super::eventually`], printing the host's status line, its reconcile counts and the
    /// `dump` kinds on a time-out.
    pub async fn eventually<T, F, Fut>(&self, what: &str, secs: u64, f: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let state = || {
            let counts: Vec<String> = [
                "cluster",
                "machine",
                "machineset",
                "machinedeployment",
                "machinehealthcheck",
            ]
            .iter()
            .map(|c| format!("{c} {}", self.host.metrics.reconcile_count(c)))
            .collect();
            let objects = if self.dump.is_empty() {
                String::new()
            } else {
                let args = ["get", self.dump, "-o", "yaml"];
                super::kubectl(&self.kubeconfig, &self.home, &args, None).1
            };
            format!(
                "{}\nreconciles: {}\n{objects}",
                self.host.status_line(),
                counts.join(", ")
            )
        };
        super::eventually(what, secs, state, f).await
    }

    pub fn dynamic(&self, group: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        super::dynamic(&self.client, group, kind, plural)
    }
}

/// The objects a resilience check looks at: each kind's name and API.
pub type Kinds<'a> = [(&'a str, Api<DynamicObject>)];

/// An object's owner references as (kind, name, controller), sorted.
fn owners(o: &DynamicObject) -> Vec<(String, String, bool)> {
    let mut v: Vec<_> = o
        .owner_references()
        .iter()
        .map(|r| (r.kind.clone(), r.name.clone(), r.controller == Some(true)))
        .collect();
    v.sort();
    v
}

impl Env {
    /// Strips every finalizer of the objects of `kinds` that `pick` selects, and waits until
    /// every one of them has its finalizers back. Returns how many objects had one.
    pub async fn strip_finalizers(
        &self,
        kinds: &Kinds<'_>,
        pick: impl Fn(&str, &DynamicObject) -> bool,
    ) -> usize {
        let mut stripped = 0;
        for (kind, api) in kinds {
            for o in api.list(&ListParams::default()).await.expect("list").items {
                if o.finalizers().is_empty() || !pick(kind, &o) {
                    continue;
                }
                let patch = json!({"metadata": {"finalizers": null}});
                api.patch(
                    &o.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .expect("strip finalizers");
                stripped += 1;
            }
        }
        self.eventually("every finalizer to be rebuilt", 60, || async {
            for (kind, api) in kinds {
                for o in api.list(&ListParams::default()).await.ok()?.items {
                    if pick(kind, &o) && o.finalizers().is_empty() {
                        return None;
                    }
                }
            }
            Some(())
        })
        .await;
        stripped
    }

    /// Wipes the owner references of the objects of `kinds` that `pick` selects (each must
    /// have one), and waits until each has the same ones again. Returns how many were wiped.
    pub async fn wipe_owners(
        &self,
        kinds: &Kinds<'_>,
        pick: impl Fn(&str, &DynamicObject) -> bool,
    ) -> usize {
        let mut before = BTreeMap::new();
        for (kind, api) in kinds {
            for o in api.list(&ListParams::default()).await.expect("list").items {
                if !pick(kind, &o) {
                    continue;
                }
                assert!(
                    !o.owner_references().is_empty(),
                    "{kind} {} has no owner",
                    o.name_any()
                );
                before.insert(format!("{kind}/{}", o.name_any()), owners(&o));
                let patch = json!({"metadata": {"ownerReferences": null}});
                api.patch(
                    &o.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .expect("wipe owners");
            }
        }
        self.eventually("every owner reference to be rebuilt", 60, || async {
            for (kind, api) in kinds {
                for o in api.list(&ListParams::default()).await.ok()?.items {
                    if pick(kind, &o)
                        && before.get(&format!("{kind}/{}", o.name_any())) != Some(&owners(&o))
                    {
                        return None;
                    }
                }
            }
            Some(())
        })
        .await;
        before.len()
    }
}
