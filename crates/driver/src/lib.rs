//! The provider driver: every kind an Active plugin serves gets a controller here. For each
//! object it gathers the context the WIT asks for (`context.rs`), calls the plugin's current
//! version, checks its result (`policy.rs`), maps it to one typed change (`change.rs`) and writes
//! it back as contract fields, status, Secrets and Machines (`writeback.rs`, `machines.rs`), once
//! per reconcile (`scope.rs`). What upstream's kubeadm controllers do beyond the contract
//! is in `kubeadm/`, keyed by kind. It owns the provider finalizer, calls `delete` until the
//! plugin reports done, respects pause, records the plugin version that last reconciled an
//! object, and turns a failed call into a condition with backoff.

mod change;
mod context;
mod finalizer;
mod kubeadm;
mod machines;
mod policy;
mod scope;
mod wake;
mod writeback;

use capw_api::cluster::Cluster;
use capw_api::common::names::{CONTROL_PLANE_NAME_LABEL, PLUGIN_VERSION_ANNOTATION};
use capw_api::contract::conditions::{reasons, types};
use capw_api::machine::Machine;
use capw_reconcile::events::BoundedRecorder;
use capw_reconcile::external::{Marks, Resolver};
use capw_reconcile::fanout::Fanout;
use capw_reconcile::metrics::{CallOutcome, Metrics};
use capw_reconcile::relevance;
use capw_reconcile::skeleton::{Failure, Skeleton, finalizer_wait};
use capw_runtime::plugin::{CallError, KindRole, ProviderFailure};
use capw_runtime::{Context, Registry};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Why one driver reconcile did not finish.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    External(#[from] capw_reconcile::external::ExternalError),
    /// The object or one it needs is not in a state the plugin can be called with.
    #[error("{0}")]
    Invalid(String),
    /// The plugin is no longer loaded.
    #[error("plugin {0} is not loaded")]
    Unloaded(String),
    /// Not a failure: deletion waits for the plugin or for owned Machines.
    #[error("{0}")]
    Waiting(String, Duration),
    #[error("finalizer: {0}")]
    Finalizer(Box<kube::runtime::finalizer::Error<DriverError>>),
}

impl Failure for DriverError {
    fn wait_time(&self) -> Option<Duration> {
        match self {
            DriverError::Waiting(_, d) => Some(*d),
            DriverError::Finalizer(f) => finalizer_wait(f),
            _ => None,
        }
    }

    fn finalizer(e: kube::runtime::finalizer::Error<Self>) -> Self {
        DriverError::Finalizer(Box::new(e))
    }
}

/// The contract role of a served kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    InfraCluster,
    InfraMachine,
    BootstrapConfig,
    ControlPlane,
}

impl Role {
    /// The role the plugin declared; `None` for templates, which the host only clones.
    fn of(declared: &KindRole) -> Option<Role> {
        Some(match declared {
            KindRole::InfrastructureCluster => Role::InfraCluster,
            KindRole::InfrastructureMachine => Role::InfraMachine,
            KindRole::BootstrapConfig => Role::BootstrapConfig,
            KindRole::ControlPlane(_) => Role::ControlPlane,
            KindRole::InfrastructureClusterTemplate(_)
            | KindRole::InfrastructureMachineTemplate(_)
            | KindRole::InfrastructureMachinePoolTemplate(_)
            | KindRole::BootstrapConfigTemplate(_)
            | KindRole::ControlPlaneTemplate(_) => return None,
        })
    }

    /// Whether the object belongs to a Machine (rather than directly to a Cluster).
    fn machine_scoped(self) -> bool {
        matches!(self, Role::InfraMachine | Role::BootstrapConfig)
    }
}

/// The host's caches the driver reads instead of the API.
pub struct Caches {
    pub clusters: Store<Cluster>,
    pub machines: Store<Machine>,
    /// The Machines by cluster: a control plane's Machines without scanning every Machine.
    pub machines_by_cluster: Arc<capw_reconcile::by_cluster::ByCluster<Machine>>,
    pub secrets: Store<k8s_openapi::api::core::v1::Secret>,
    /// Machine and Cluster changes, after the stores above have them.
    pub machine_changes: Arc<Fanout<Machine>>,
    pub cluster_changes: Arc<Fanout<Cluster>>,
    /// Workload cluster clients: what a control plane claims about its cluster is checked there.
    pub remotes: Arc<capw_reconcile::remote::Remotes>,
}

pub struct Driver {
    pub client: Client,
    pub registry: Arc<Registry>,
    pub resolver: Arc<Resolver>,
    pub caches: Caches,
    pub recorder: BoundedRecorder,
    pub metrics: Arc<Metrics>,
    running: Mutex<HashMap<String, (String, tokio::task::JoinHandle<()>)>>,
    /// Control-plane Machines created or deleted that the Machine cache does not show yet.
    expectations: capw_reconcile::expectations::Expectations,
    /// Holds a provider object's waiting reason until it has stood for [`PROVIDER_PACE`].
    pace: capw_reconcile::pace::Pace,
}

/// How long a provider's new waiting reason stands before it is written: the change of state
/// that often follows within it carries it instead (`capw_reconcile::pace::Pace`).
const PROVIDER_PACE: Duration = Duration::from_secs(2);

/// While a waiting reason is held, the object is looked at again within this, as often as a
/// plugin polling a step that is about to end asks to (the in-memory VM: every second).
const PACE_RECHECK: Duration = Duration::from_secs(1);

/// One served kind.
struct KindCtx {
    driver: Arc<Driver>,
    plugin: String,
    ar: ApiResource,
    role: Role,
    /// The shared reconcile skeleton: span, finalizer, metrics and the retry of failed
    /// reconciles.
    skeleton: Skeleton,
    /// Consecutive failed plugin calls per object (`PluginCallSucceeded=False`), for their
    /// retry delay; a failed call is recorded as a condition, not a failed reconcile.
    failures: capw_reconcile::backoff::Failures,
    /// Which of the kind's changes wake the driver.
    wakes: wake::Wakes,
}

fn plural_of(crds: &[String], group: &str, kind: &str) -> Option<String> {
    crds.iter().find_map(|text| {
        let v: Value = serde_json::from_str(text)
            .or_else(|_| serde_yaml::from_str(text))
            .ok()?;
        (v.pointer("/spec/group")?.as_str()? == group
            && v.pointer("/spec/names/kind")?.as_str()? == kind)
            .then(|| {
                v.pointer("/spec/names/plural")?
                    .as_str()
                    .map(str::to_string)
            })?
    })
}

impl Driver {
    pub fn new(
        client: Client,
        registry: Arc<Registry>,
        resolver: Arc<Resolver>,
        caches: Caches,
        recorder: BoundedRecorder,
        metrics: Arc<Metrics>,
    ) -> Arc<Driver> {
        Arc::new(Driver {
            client,
            registry,
            resolver,
            caches,
            recorder,
            metrics,
            running: Mutex::new(HashMap::new()),
            expectations: Default::default(),
            pace: capw_reconcile::pace::Pace::new(PROVIDER_PACE),
        })
    }

    /// Starts controllers for newly served kinds and stops those of unloaded plugins.
    fn sync(self: &Arc<Self>) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        // Kind.group → (plugin name, its current version, the served kind, role).
        let mut wanted = HashMap::new();
        for name in self.registry.names() {
            let Some(slot) = self.registry.get(&name) else {
                continue;
            };
            let p = slot.current();
            for k in &p.metadata.kinds {
                if let Some(role) = Role::of(&k.role) {
                    let key = format!("{}.{}", k.kind, k.group);
                    // A kind an admin moved is served by the plugin it was moved to only.
                    if self.registry.owner(&key).is_some_and(|o| o != name) {
                        continue;
                    }
                    wanted.insert(key, (name.clone(), p.clone(), k.clone(), role));
                }
            }
        }
        running.retain(|key, (plugin, task)| {
            let keep = wanted.get(key).is_some_and(|(p, ..)| p == plugin) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        // Objects the host creates of a driven kind are born with what the driver's first
        // write would put on them (`Resolver::mark`), in the version serving them now.
        let marks = wanted
            .iter()
            .filter(|(key, (plugin, ..))| running.get(*key).is_some_and(|(p, _)| p == plugin))
            .map(|(_, (plugin, p, k, _))| {
                let marks = Marks {
                    finalizer: provider_finalizer(&k.kind, &k.group),
                    version: format!("{plugin}/{}", p.metadata.version),
                };
                ((k.group.clone(), k.kind.clone()), marks)
            })
            .collect();
        self.resolver.serve(marks);
        for (key, (plugin, p, k, role)) in wanted {
            if running.contains_key(&key) {
                continue;
            }
            // Parsing the plugin's CRDs happens once per kind started, not on every pass.
            let Some(plural) = plural_of(&p.metadata.crds, &k.group, &k.kind) else {
                continue;
            };
            let ar = ApiResource {
                api_version: format!("{}/{}", k.group, k.version),
                group: k.group,
                version: k.version,
                kind: k.kind,
                plural,
            };
            tracing::info!(kind = %key, %plugin, "driving kind");
            let skeleton = Skeleton::new(
                ar.kind.to_lowercase(),
                provider_finalizer(&ar.kind, &ar.group),
                self.metrics.clone(),
            );
            let kctx = Arc::new(KindCtx {
                driver: self.clone(),
                plugin: plugin.clone(),
                wakes: wake::Wakes::new(skeleton.finalizer.clone()),
                skeleton,
                ar,
                role,
                failures: Default::default(),
            });
            running.insert(key, (plugin, tokio::spawn(run_kind(kctx))));
        }
    }

    /// Keeps the set of driven kinds in step with the loaded plugins until the process ends.
    /// Start it once the shared caches are ready, as controller-runtime waits for its caches to
    /// sync: a control plane reconciled against an empty Machine cache (a new leader's, still
    /// listing) would create its Machines again.
    pub async fn run(self: Arc<Self>) {
        loop {
            self.sync();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Kinds being driven, as `Kind.group`.
    pub fn driven(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        v.sort();
        v
    }
}

/// The finalizer the driver puts on the objects of a kind it serves.
fn provider_finalizer(kind: &str, group: &str) -> String {
    format!("{}.{group}", kind.to_lowercase())
}

fn same_kind(r: &capw_api::common::ContractVersionedObjectReference, ar: &ApiResource) -> bool {
    r.kind == ar.kind && r.api_group == ar.group
}

/// The changes a provider object's reconcile depends on, from the host's shared caches (so the
/// reconcile reads them there): status updates of Machines and Clusters (there are many) do not
/// wake every provider object.
fn relevant_changes<K>(
    fanout: &Fanout<K>,
    relevance: fn(&K) -> Option<u64>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Clone + Send + Sync + 'static,
{
    use kube::runtime::WatchStreamExt;
    tokio_stream::wrappers::UnboundedReceiverStream::new(fanout.subscribe())
        .map(|k| Ok((*k).clone()))
        .predicate_filter(relevance, Default::default())
}

type Objects = futures::stream::BoxStream<'static, Result<DynamicObject, watcher::Error>>;

/// The kind's objects and their changes: from core's cache of the kind (`external::Resolver`)
/// when it resolves the kind to the same resource the plugin serves, so the host keeps one
/// reflector and one copy of each provider object; otherwise (a plugin version serving another
/// version than the CRD's contract label names, until the host restarts) from a reflector
/// of the driver's own.
async fn objects(kctx: &KindCtx) -> (Store<DynamicObject>, Objects) {
    use kube::runtime::WatchStreamExt;
    let ar = &kctx.ar;
    let resolver = &kctx.driver.resolver;
    if let Ok(r) = resolver.resolve(&ar.group, &ar.kind).await
        && r.ar == *ar
    {
        let (store, changes) = resolver.share(&r);
        return (store, changes.map(|o| Ok((*o).clone())).boxed());
    }
    let api: Api<DynamicObject> = Api::all_with(kctx.driver.client.clone(), ar);
    let writer = kube::runtime::reflector::store::Writer::new(ar.clone());
    let reader = writer.as_reader();
    let stream = kube::runtime::reflector(
        writer,
        watcher(api, watcher::Config::default())
            .modify(capw_reconcile::trim::for_cache::<DynamicObject>),
    )
    .default_backoff()
    .touched_objects()
    .boxed();
    (reader, stream)
}

async fn run_kind(kctx: Arc<KindCtx>) {
    let ar = kctx.ar.clone();
    let (reader, objects) = objects(&kctx).await;
    // The object's own status writes (the driver's) do not wake it again, nor does adding its
    // finalizer (the reconcile that adds it goes on, `finalizer.rs`), nor the echo of its own
    // spec write (`wake.rs`).
    let own = {
        let kctx = kctx.clone();
        objects
            .filter(move |o| std::future::ready(o.as_ref().map_or(true, |o| kctx.wakes.wakes(o))))
    };
    let mut c = Controller::for_stream_with(own, reader, ar.clone()).with_config(
        // Core adopts, labels and patches provider objects in quick succession: a short debounce
        // folds those into one plugin call.
        Config::default()
            .concurrency(64)
            .debounce(Duration::from_millis(100)),
    );
    let (ar1, ar2) = (ar.clone(), ar.clone());
    match kctx.role {
        Role::InfraMachine | Role::BootstrapConfig => {
            let role = kctx.role;
            c = c.watches_stream(
                relevant_changes(
                    &kctx.driver.caches.machine_changes,
                    if role == Role::InfraMachine {
                        relevance::machine_for_infrastructure
                    } else {
                        relevance::machine_for_bootstrap
                    },
                ),
                move |m: Machine| {
                    let r = if role == Role::InfraMachine {
                        Some(m.spec.infrastructure_ref.clone())
                    } else {
                        m.spec.bootstrap.config_ref.clone()
                    };
                    r.filter(|r| same_kind(r, &ar1)).map(|r| {
                        ObjectRef::new_with(&r.name, ar1.clone())
                            .within(&m.namespace().unwrap_or_default())
                    })
                },
            );
            // The provider objects of a Cluster's Machines follow its pause and initialization.
            let machines = kctx.driver.caches.machines.clone();
            let by_cluster = kctx.driver.caches.machines_by_cluster.clone();
            let ar3 = ar.clone();
            c = c.watches_stream(
                relevant_changes(
                    &kctx.driver.caches.cluster_changes,
                    if role == Role::InfraMachine {
                        relevance::cluster_for_infrastructure
                    } else {
                        relevance::cluster_for_providers
                    },
                ),
                move |cl: Cluster| {
                    let ns = cl.namespace().unwrap_or_default();
                    // By the index: a scan of every Machine per Cluster change cost as much as
                    // the number of clusters.
                    by_cluster
                        .get(&machines, &ns, &cl.name_any())
                        .into_iter()
                        .filter_map(|m| {
                            let r = if role == Role::InfraMachine {
                                Some(m.spec.infrastructure_ref.clone())
                            } else {
                                m.spec.bootstrap.config_ref.clone()
                            };
                            r.filter(|r| same_kind(r, &ar3))
                                .map(|r| ObjectRef::new_with(&r.name, ar3.clone()).within(&ns))
                        })
                        .collect::<Vec<_>>()
                },
            );
        }
        Role::InfraCluster | Role::ControlPlane => {
            let role = kctx.role;
            c = c.watches_stream(
                relevant_changes(
                    &kctx.driver.caches.cluster_changes,
                    if role == Role::InfraCluster {
                        relevance::cluster_for_infrastructure
                    } else {
                        relevance::cluster_for_providers
                    },
                ),
                move |cl: Cluster| {
                    let r = if role == Role::InfraCluster {
                        cl.spec.infrastructure_ref.clone()
                    } else {
                        cl.spec.control_plane_ref.clone()
                    };
                    r.filter(|r| same_kind(r, &ar1)).map(|r| {
                        ObjectRef::new_with(&r.name, ar1.clone())
                            .within(&cl.namespace().unwrap_or_default())
                    })
                },
            );
            if role == Role::ControlPlane {
                c = c.watches_stream(
                    tokio_stream::wrappers::UnboundedReceiverStream::new(
                        kctx.driver.caches.machine_changes.subscribe(),
                    )
                    .map(|m| Ok((*m).clone())),
                    move |m: Machine| {
                        // By owner, or by the label the host sets when it creates the Machine
                        // (so a Machine that lost its owner is adopted back at once).
                        let owner = m
                            .owner_references()
                            .iter()
                            .find(|o| o.controller == Some(true) && o.kind == ar2.kind)
                            .map(|o| o.name.clone())
                            .or_else(|| m.labels().get(CONTROL_PLANE_NAME_LABEL).cloned());
                        owner.map(|name| {
                            ObjectRef::new_with(&name, ar2.clone())
                                .within(&m.namespace().unwrap_or_default())
                        })
                    },
                );
            }
        }
    }
    c.run(reconcile, error_policy, kctx)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(obj: Arc<DynamicObject>, kctx: Arc<KindCtx>) -> Result<Action, DriverError> {
    let ns = obj.namespace().unwrap_or_default();
    let span = tracing::info_span!("reconcile", controller = %kctx.ar.kind, plugin = %kctx.plugin, object.ref = %format!("{ns}/{}", obj.name_any()));
    let api: Api<DynamicObject> = Api::namespaced_with(kctx.driver.client.clone(), &ns, &kctx.ar);
    let obj = match finalizer::first_write(&api, obj, &kctx)
        .instrument(span.clone())
        .await?
    {
        finalizer::First::Reconcile(o) => o,
        finalizer::First::AwaitOwner => return Ok(Action::requeue(Duration::from_secs(30))),
    };
    kctx.skeleton
        .reconcile(&api, obj, span, |o| apply(o, &kctx), |o| cleanup(o, &kctx))
        .await
}

fn error_policy(obj: Arc<DynamicObject>, err: &DriverError, kctx: Arc<KindCtx>) -> Action {
    kctx.skeleton.error_policy(&*obj, err)
}

/// The outcome of a plugin call, for metrics.
fn outcome(e: &CallError) -> CallOutcome {
    match e {
        CallError::Trap(_) => CallOutcome::Trap,
        CallError::Timeout(_) => CallOutcome::Timeout,
        _ => CallOutcome::Error,
    }
}

/// How long to wait after a failed call, and the condition reason naming the failure.
fn backoff(e: &CallError, failures: u32) -> (Option<Duration>, &'static str) {
    let exp = capw_reconcile::backoff::delay(failures);
    match e {
        CallError::Timeout(_) => (Some(exp), reasons::PLUGIN_TIMEOUT),
        CallError::Trap(_) => (Some(exp), reasons::PLUGIN_TRAPPED),
        CallError::InvalidResult(_) => (Some(exp), reasons::PLUGIN_INVALID_RESULT),
        CallError::Provider(ProviderFailure::Transient {
            retry_after_seconds,
            ..
        }) => (
            Some(retry_after_seconds.map_or(exp, |s| Duration::from_secs(u64::from(s.max(1))))),
            reasons::TRANSIENT_ERROR,
        ),
        CallError::Provider(ProviderFailure::Terminal(_)) => (None, reasons::TERMINAL_ERROR),
        CallError::Provider(ProviderFailure::InvalidSpec(_)) => (None, reasons::INVALID_SPEC),
        CallError::Provider(ProviderFailure::Other(_)) => (Some(exp), reasons::PROVIDER_ERROR),
    }
}

impl KindCtx {
    fn api(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.driver.client.clone(), ns, &self.ar)
    }

    fn key(obj: &DynamicObject) -> String {
        format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
    }

    /// `related`: the second object the Event is about, as the Machine a control plane created.
    async fn event(
        &self,
        obj: &DynamicObject,
        related: Option<k8s_openapi::api::core::v1::ObjectReference>,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        capw_reconcile::events::publish(
            &self.driver.recorder,
            &capw_reconcile::events::reference(obj, &self.ar),
            related,
            warning,
            reason,
            note,
        )
        .await
    }

    /// Records a failed call as the `PluginCallSucceeded` condition and an Event; returns when
    /// to try again (`None`: when the spec changes).
    async fn failed(
        &self,
        obj: &DynamicObject,
        scope: &mut scope::Scope,
        version: &str,
        e: &CallError,
    ) -> Option<Duration> {
        let key = Self::key(obj);
        let n = self.failures.record(&key);
        let (after, reason) = backoff(e, n);
        let message = format!("plugin {} {version}: {e}", self.plugin);
        writeback::set_condition(
            &mut scope.status,
            types::PLUGIN_CALL_SUCCEEDED,
            "False",
            reason,
            &message,
            obj.metadata.generation,
        );
        if n == 1 || n.is_power_of_two() {
            self.event(obj, None, true, reason, message).await;
        }
        after
    }

    fn succeeded(&self, obj: &DynamicObject, status: &mut Value) {
        self.failures.forget(&Self::key(obj));
        let paused = status
            .pointer("/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == types::PAUSED && c["status"] == "True")
            });
        if paused {
            writeback::set_condition(
                status,
                types::PAUSED,
                "False",
                reasons::NOT_PAUSED,
                "",
                obj.metadata.generation,
            );
        }
        let had_failure = status
            .pointer("/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == types::PLUGIN_CALL_SUCCEEDED));
        if had_failure {
            writeback::set_condition(
                status,
                types::PLUGIN_CALL_SUCCEEDED,
                "True",
                reasons::SUCCEEDED,
                "",
                obj.metadata.generation,
            );
        }
    }

    /// Notes which plugin version reconciled the object (written only when it changes).
    fn record_version(&self, scope: &mut scope::Scope, version: &str) {
        scope.annotate(
            PLUGIN_VERSION_ANNOTATION,
            format!("{}/{version}", self.plugin),
        );
    }
}

/// Runs `f` against the plugin's current version, with metrics.
async fn call<T>(
    kctx: &KindCtx,
    f: impl AsyncFnOnce(&capw_runtime::slot::Slot) -> (String, Result<T, CallError>),
) -> Result<(String, Result<T, CallError>), DriverError> {
    let slot = kctx
        .driver
        .registry
        .get(&kctx.plugin)
        .ok_or_else(|| DriverError::Unloaded(kctx.plugin.clone()))?;
    let start = Instant::now();
    let (version, r) = f(&slot).await;
    kctx.driver.metrics.plugin_call(
        &slot.current().metadata.name,
        &version,
        start.elapsed(),
        r.as_ref().err().map_or(CallOutcome::Ok, outcome),
    );
    Ok((version, r))
}

/// Reconciles through one [`scope::Scope`]: whatever the phases decide is written once, at the
/// end, even when a phase failed (as upstream's deferred patch).
async fn apply(obj: Arc<DynamicObject>, kctx: &KindCtx) -> Result<Action, DriverError> {
    let mut scope = scope::Scope::new(&obj);
    let result = apply_phases(&obj, kctx, &mut scope).await;
    if scope.writes_spec() {
        kctx.wakes.expect_own_spec_write(&obj);
    }
    // A failed phase's status is written at once: it reports the failure.
    let held = if result.is_ok() {
        scope.hold_status(&kctx.driver.pace, obj.uid().as_deref())
    } else {
        None
    };
    let written = scope
        .close(&kctx.api(&obj.namespace().unwrap_or_default()))
        .await;
    let action = result?;
    written?;
    Ok(held.map_or(action, |wait| Action::requeue(wait.min(PACE_RECHECK))))
}

async fn apply_phases(
    obj: &DynamicObject,
    kctx: &KindCtx,
    scope: &mut scope::Scope,
) -> Result<Action, DriverError> {
    let around = context::gather(obj, kctx).await?;
    if around.paused {
        writeback::set_condition(
            &mut scope.status,
            types::PAUSED,
            "True",
            types::PAUSED,
            "the object or its Cluster is paused",
            obj.metadata.generation,
        );
        return Ok(Action::await_change());
    }
    if !around.owned {
        // Core sets the owner reference; that change brings the object back here.
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    if kctx.role == Role::ControlPlane && !machines::seen_what_was_written(kctx, obj) {
        // The plugin must not decide on a Machine set the cache has not caught up with.
        return Ok(Action::requeue(Duration::from_millis(250)));
    }
    let mut around = around;
    if kubeadm::Kind::of(&kctx.ar) == Some(kubeadm::Kind::Config) {
        let ca = around
            .context
            .secrets
            .iter()
            .find(|(k, _)| k == "ca.crt")
            .map(|(_, v)| v.as_str());
        match kubeadm::discovery::reconcile(
            kctx,
            obj,
            scope,
            around.cluster.as_ref(),
            around.machine.as_ref(),
            ca,
        )
        .await?
        {
            kubeadm::discovery::Next::CallFilled(spec) => {
                around.context.object = with_spec(&around.context.object, &spec)?;
                around.requeue_within = Some(kubeadm::discovery::UPKEEP_EVERY);
            }
            kubeadm::discovery::Next::CallAndRequeue(d) => around.requeue_within = Some(d),
            kubeadm::discovery::Next::Call => {}
        }
    }
    let ctx = around.context.clone();
    let result = match kctx.role {
        Role::InfraCluster => call(kctx, async |s| s.reconcile_cluster(&ctx).await)
            .await?
            .map_ok(writeback::Result::InfraCluster),
        Role::InfraMachine => call(kctx, async |s| s.reconcile_machine(&ctx).await)
            .await?
            .map_ok(writeback::Result::InfraMachine),
        Role::BootstrapConfig => call(kctx, async |s| s.reconcile_bootstrap(&ctx).await)
            .await?
            .map_ok(writeback::Result::Bootstrap),
        Role::ControlPlane => call(kctx, async |s| s.reconcile_control_plane(&ctx).await)
            .await?
            .map_ok(writeback::Result::ControlPlane),
    };
    let (version, result) = result;
    kctx.record_version(scope, &version);
    // A result that breaks a rule is refused whole: nothing of it is written.
    let result = match result {
        Ok(mut r) => match policy::check(kctx, obj, &around, &mut r).await {
            Ok(()) => Ok(r),
            Err(why) => Err(CallError::InvalidResult(why)),
        },
        Err(e) => Err(e),
    };
    match result {
        Ok(r) => writeback::write(obj, kctx, scope, &around, r).await,
        Err(e) => Ok(match kctx.failed(obj, scope, &version, &e).await {
            Some(d) => Action::requeue(d),
            None => Action::await_change(),
        }),
    }
}

/// The object's JSON as the plugin sees it, with `patch` merged into its spec: what the scope
/// writes at the end of this reconcile. A second reconcile only to show the plugin its own
/// reconcile's fill cost a status write and a round trip per joining config.
fn with_spec(object: &str, patch: &Value) -> Result<String, DriverError> {
    let invalid = |e: serde_json::Error| DriverError::Invalid(format!("object JSON: {e}"));
    let mut v: Value = serde_json::from_str(object).map_err(invalid)?;
    json_patch::merge(&mut v, &serde_json::json!({ "spec": patch }));
    serde_json::to_string(&v).map_err(invalid)
}

async fn cleanup(obj: Arc<DynamicObject>, kctx: &KindCtx) -> Result<Action, DriverError> {
    let around = context::gather(&obj, kctx).await?;
    if around.paused {
        return Err(DriverError::Waiting(
            "paused: deletion waits until the Cluster is unpaused".into(),
            Duration::from_secs(30),
        ));
    }
    if kctx.role == Role::ControlPlane {
        machines::delete_owned(kctx, &obj, &around).await?;
    }
    let ctx: Context = around.context.clone();
    let (version, r) = match kctx.role {
        Role::InfraCluster => call(kctx, async |s| s.delete_cluster(&ctx).await).await?,
        Role::InfraMachine => call(kctx, async |s| s.delete_machine(&ctx).await).await?,
        Role::BootstrapConfig => call(kctx, async |s| s.delete_bootstrap(&ctx).await).await?,
        Role::ControlPlane => call(kctx, async |s| s.delete_control_plane(&ctx).await).await?,
    };
    match r {
        Ok(d) if d.done => {
            // The finalizer goes next; a failure count must not outlive the object.
            kctx.failures.forget(&KindCtx::key(&obj));
            Ok(Action::await_change())
        }
        Ok(d) => Err(DriverError::Waiting(
            format!("plugin {} {version} is still deleting", kctx.plugin),
            Duration::from_secs(u64::from(
                d.common.requeue_after_seconds.unwrap_or(2).max(1),
            )),
        )),
        Err(e) => {
            let mut scope = scope::Scope::new(&obj);
            let after = kctx.failed(&obj, &mut scope, &version, &e).await;
            scope
                .close(&kctx.api(&obj.namespace().unwrap_or_default()))
                .await?;
            Err(DriverError::Waiting(
                e.to_string(),
                after.unwrap_or(Duration::from_secs(60)),
            ))
        }
    }
}

trait MapOk<T> {
    fn map_ok<U>(self, f: impl FnOnce(T) -> U) -> (String, Result<U, CallError>);
}

impl<T> MapOk<T> for (String, Result<T, CallError>) {
    fn map_ok<U>(self, f: impl FnOnce(T) -> U) -> (String, Result<U, CallError>) {
        (self.0, self.1.map(f))
    }
}

pub(crate) fn condition_list(status: &Value) -> Vec<capw_api::common::Condition> {
    status
        .get("conditions")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long the driver waits after a failed plugin call, and the reason it records.
    #[test]
    fn call_failure_backoff_table() {
        let t = |m: &str, s: Option<u32>| {
            CallError::Provider(ProviderFailure::Transient {
                message: m.into(),
                retry_after_seconds: s,
            })
        };
        // (error, consecutive failures, delay bounds in seconds or none, reason)
        type Case = (CallError, u32, Option<(f64, f64)>, &'static str);
        let cases: Vec<Case> = vec![
            (
                CallError::Timeout(Duration::from_secs(30)),
                1,
                Some((0.5, 1.0)),
                "PluginTimeout",
            ),
            (
                CallError::Trap("x".into()),
                3,
                Some((2.0, 4.0)),
                "PluginTrapped",
            ),
            (
                CallError::InvalidResult("x".into()),
                20,
                Some((150.0, 300.0)),
                "PluginInvalidResult",
            ),
            (t("m", Some(7)), 5, Some((7.0, 7.0)), "TransientError"),
            (t("m", Some(0)), 5, Some((1.0, 1.0)), "TransientError"),
            (t("m", None), 2, Some((1.0, 2.0)), "TransientError"),
            (
                CallError::Provider(ProviderFailure::Other("x".into())),
                1,
                Some((0.5, 1.0)),
                "ProviderError",
            ),
            (
                CallError::Provider(ProviderFailure::Terminal("x".into())),
                1,
                None,
                "TerminalError",
            ),
            (
                CallError::Provider(ProviderFailure::InvalidSpec("x".into())),
                1,
                None,
                "InvalidSpec",
            ),
        ];
        for (e, n, want, reason) in cases {
            let (delay, r) = backoff(&e, n);
            assert_eq!(r, reason, "{e}");
            match (delay, want) {
                (None, None) => {}
                (Some(d), Some((lo, hi))) => {
                    let d = d.as_secs_f64();
                    assert!(
                        (lo..=hi).contains(&d),
                        "{e} after {n} failures: {d} s not in [{lo}, {hi}]"
                    );
                }
                (d, w) => panic!("{e}: delay {d:?}, want {w:?}"),
            }
        }
    }
}
