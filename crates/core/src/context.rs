//! What the core controllers share: the client, caches of Clusters and Machines (reflectors),
//! provider kind resolution with dynamic watches, workload cluster clients, Events and metrics.

use super::error::ReconcileError;
use super::written::Trail;
use crate::caches::Feeds;
use capw_api::cluster::Cluster;
use capw_api::machine::Machine;
use capw_api::machinedeployment::MachineDeployment;
use capw_api::machinehealthcheck::MachineHealthCheck;
use capw_api::machineset::MachineSet;
use capw_reconcile::by_cluster::ByCluster;
use capw_reconcile::events::BoundedRecorder;
use capw_reconcile::events::publish;
use capw_reconcile::external::{Resolver, Tracker};
use capw_reconcile::metrics::Metrics;
use capw_reconcile::remote::Remotes;
use capw_reconcile::skeleton::Skeleton;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio_stream::wrappers::UnboundedReceiverStream;

/// A phase of a core reconcile: the apply or the cleanup side of the finalizer.
pub type Phase<K> = for<'a> fn(
    Arc<K>,
    &'a CoreCtx,
) -> futures::future::BoxFuture<'a, Result<Action, ReconcileError>>;

/// A core controller as the manager starts it: the kind it owns, and the one `setup` that
/// declares its watches on the shared caches ([`crate::caches::Feeds`]) and the mappers from a
/// change to its own objects. The future it returns runs the controller; the manager polls it
/// once [`CoreCtx::wait_until_ready`] holds.
pub struct Registration {
    /// The kind it reconciles, as its CRD names it; `None` for one that works on another's
    /// kind (the topology controller, on Clusters with a topology).
    pub owns: Option<&'static str>,
    pub setup: fn(&Arc<CoreCtx>, &Feeds, &Concurrency) -> futures::future::BoxFuture<'static, ()>,
}

/// How many objects of a kind reconcile at once.
#[derive(Debug, Clone, Copy)]
pub struct Concurrency {
    pub clusters: u16,
    /// Machines, and the sets, deployments and checks of them.
    pub machines: u16,
}

/// Reconcile requests that come from outside the shared caches (a tracker of provider objects),
/// taken once by the controller's `setup`.
pub struct Requests<K: kube::Resource> {
    tx: UnboundedSender<ObjectRef<K>>,
    rx: Mutex<Option<UnboundedReceiver<ObjectRef<K>>>>,
}

impl<K: kube::Resource> Default for Requests<K> {
    fn default() -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        Requests {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }
}

impl<K: kube::Resource + 'static> Requests<K> {
    pub(crate) fn sender(&self) -> UnboundedSender<ObjectRef<K>> {
        self.tx.clone()
    }

    /// The requests, for the one controller that reconciles `K`; a second taker gets none.
    pub(crate) fn take(&self) -> futures::stream::BoxStream<'static, ObjectRef<K>>
    where
        K::DynamicType: Send + Sync,
    {
        use futures::StreamExt;
        match self.rx.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(rx) => UnboundedReceiverStream::new(rx).boxed(),
            None => futures::stream::empty().boxed(),
        }
    }
}

/// The Cluster changes that matter to the objects of a cluster: those `relevance` hashes
/// (for most, pause and annotations; not the status the Cluster controller rewrites as its
/// Machines move).
pub(crate) fn relevant_cluster_changes(
    feeds: &Feeds,
    relevance: fn(&Cluster) -> Option<u64>,
) -> impl futures::Stream<Item = Arc<Cluster>> + Send + 'static {
    use futures::StreamExt;
    let mut seen: HashMap<(String, String), u64> = HashMap::new();
    crate::caches::watch(&feeds.clusters).filter(move |c| {
        let relevance = relevance(c).unwrap_or_default();
        let key = (c.namespace().unwrap_or_default(), c.name_any());
        futures::future::ready(seen.insert(key, relevance) != Some(relevance))
    })
}

/// Requests for the objects `of` a Cluster, on each of its [`relevant_cluster_changes`].
pub(crate) fn on_cluster_change<K>(
    ctx: &Arc<CoreCtx>,
    feeds: &Feeds,
    of: fn(&CoreCtx, &str, &str) -> Vec<Arc<K>>,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + 'static,
{
    on_cluster_change_by(
        ctx,
        feeds,
        of,
        capw_reconcile::relevance::cluster_for_machines,
    )
}

/// [`on_cluster_change`], for the Cluster changes `relevance` names.
pub(crate) fn on_cluster_change_by<K>(
    ctx: &Arc<CoreCtx>,
    feeds: &Feeds,
    of: fn(&CoreCtx, &str, &str) -> Vec<Arc<K>>,
    relevance: fn(&Cluster) -> Option<u64>,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + 'static,
{
    use futures::StreamExt;
    let ctx = ctx.clone();
    relevant_cluster_changes(feeds, relevance).flat_map(move |c| {
        let ns = c.namespace().unwrap_or_default();
        let refs: Vec<_> = of(&ctx, &ns, &c.name_any())
            .iter()
            .map(|o| ObjectRef::from_obj(&**o))
            .collect();
        futures::stream::iter(refs)
    })
}

/// What tells the Cluster and Machine controllers apart.
pub struct CoreController<K> {
    pub name: &'static str,
    pub finalizer: &'static str,
    /// Folds bursts of triggers into one reconcile and one status write.
    pub debounce: std::time::Duration,
    pub apply: Phase<K>,
    pub cleanup: Phase<K>,
}

/// Runs a core controller until the process ends. Changes of its own objects come from the
/// host's shared cache (`store` and `own`), filtered so its own status writes do not wake it
/// again; `triggers` carries requests from related objects.
pub async fn run<K>(
    ctx: Arc<CoreCtx>,
    store: Store<K>,
    own: impl futures::Stream<Item = Arc<K>> + Send + 'static,
    triggers: impl futures::Stream<Item = kube::runtime::reflector::ObjectRef<K>> + Send + 'static,
    concurrency: u16,
    c: CoreController<K>,
) where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    let own = own
        .map(|o| Ok((*o).clone()))
        .predicate_filter(capw_reconcile::relevance::metadata, Default::default());
    let (name, apply, cleanup) = (c.name, c.apply, c.cleanup);
    let skeleton = Arc::new(Skeleton::new(name, c.finalizer, ctx.metrics.clone()));
    let policy = skeleton.clone();
    kube::runtime::Controller::for_stream(own, store)
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(concurrency)
                .debounce(c.debounce),
        )
        .reconcile_on(triggers)
        .run(
            move |obj, ctx| {
                let skeleton = skeleton.clone();
                async move {
                    let ns = obj.namespace().unwrap_or_default();
                    let span = tracing::info_span!("reconcile", controller = name, object.ref = %format!("{ns}/{}", obj.name_any()));
                    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
                    skeleton
                        .reconcile(&api, obj, span, |o| apply(o, &ctx), |o| cleanup(o, &ctx))
                        .await
                }
            },
            move |obj, err, _ctx| policy.error_policy(&*obj, err),
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

pub struct CoreCtx {
    pub client: Client,
    pub resolver: Arc<Resolver>,
    pub remotes: std::sync::Arc<Remotes>,
    pub recorder: BoundedRecorder,
    pub metrics: Arc<Metrics>,
    pub clusters: Store<Cluster>,
    pub machines: Store<Machine>,
    /// The caches' objects by cluster.
    pub index: Indexes,
    /// Objects as the core controllers' own last writes returned them (read-your-writes).
    pub written: super::written::OwnWrites,
    /// Holds back status writes that only report progress (`capw_reconcile::pace`).
    pub status_pace: capw_reconcile::pace::Pace,
    pub machine_sets: Store<MachineSet>,
    pub machine_deployments: Store<MachineDeployment>,
    pub machine_health_checks: Store<MachineHealthCheck>,
    /// What MachineSets created or deleted that the Machine cache does not show yet.
    pub expectations: capw_reconcile::expectations::Expectations,
    /// Secrets labelled with a cluster name (kubeconfigs, CAs, tokens, bootstrap data).
    pub secrets: Store<k8s_openapi::api::core::v1::Secret>,
    pub cluster_tracker: Arc<Tracker<Cluster>>,
    pub machine_tracker: Arc<Tracker<Machine>>,
}

/// A progress-only status change waits until it has stood for this period, and so is written
/// at most once per period and object: counts and waiting reasons lag by at most this, while a
/// change of state is written at once and carries them. Under load a cluster's transitions
/// come seconds apart (at a thousand clusters a worker took about 50 s from creation to
/// Running, its status writes 5 to 20 s apart), so a one-second pace folded almost nothing.
pub(crate) const STATUS_PACE: std::time::Duration = std::time::Duration::from_secs(5);

impl CoreCtx {
    /// How long a reconcile holds back writing `after` over `before` for `obj`: `None` to
    /// write now, always when `pace` is off or nothing changed (see `capw_reconcile::pace`).
    pub(crate) fn hold_status<S: serde::Serialize + PartialEq>(
        &self,
        pace: bool,
        obj: &impl kube::Resource,
        before: Option<&S>,
        after: &S,
        counters: &[&str],
    ) -> Option<std::time::Duration> {
        if !pace || before == Some(after) {
            return None;
        }
        self.status_pace
            .hold(obj.meta().uid.as_deref(), before, after, counters)
    }

    /// Writes `after` as the status of `obj`, a MachineSet or MachineDeployment, over `before`
    /// (the stored one, merged), unless it is unchanged or [`Self::hold_status`] holds it back
    /// (its counters are `aggregate::COUNTERS`); notes the write in `trail` and returns how
    /// long it was held.
    pub(crate) async fn write_status_paced<K, S>(
        &self,
        api: &Api<K>,
        obj: &K,
        pace: bool,
        before: Option<&S>,
        after: &S,
        trail: &mut Trail<K>,
    ) -> Result<Option<std::time::Duration>, kube::Error>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
        S: serde::Serialize + PartialEq,
    {
        if let Some(wait) = self.hold_status(pace, obj, before, after, crate::aggregate::COUNTERS) {
            return Ok(Some(wait));
        }
        let written =
            capw_reconcile::skeleton::write_status(api, &obj.name_any(), before, after).await?;
        if let Some(written) = written {
            trail.wrote(written);
        }
        Ok(None)
    }

    /// Until every shared cache has listed the world once: controllers read the caches.
    ///
    /// Call it from one task only: kube-runtime's `wait_until_ready` keeps one waker per store,
    /// so a second task waiting on the same store at the same time may never be woken.
    pub async fn wait_until_ready(&self) {
        let _ = self.clusters.wait_until_ready().await;
        let _ = self.machines.wait_until_ready().await;
        let _ = self.machine_sets.wait_until_ready().await;
        let _ = self.machine_deployments.wait_until_ready().await;
        let _ = self.machine_health_checks.wait_until_ready().await;
        let _ = self.secrets.wait_until_ready().await;
    }

    pub async fn event(
        &self,
        obj: &k8s_openapi::api::core::v1::ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        publish(&self.recorder, obj, None, warning, reason, note).await
    }

    /// An Event about `obj` and a second object, `related`: the one it created, adopted or
    /// deleted. Each related object gets its own Event (see [`publish`]).
    pub async fn event_about(
        &self,
        obj: &k8s_openapi::api::core::v1::ObjectReference,
        related: k8s_openapi::api::core::v1::ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        publish(&self.recorder, obj, Some(related), warning, reason, note).await
    }

    /// The Machines of a cluster, from the cache.
    pub fn machines_of(&self, ns: &str, cluster: &str) -> Vec<Arc<Machine>> {
        self.index.machines.get(&self.machines, ns, cluster)
    }

    /// The MachineSets of a cluster, from the cache.
    pub fn machine_sets_of(&self, ns: &str, cluster: &str) -> Vec<Arc<MachineSet>> {
        self.index.machine_sets.get(&self.machine_sets, ns, cluster)
    }

    /// The MachineDeployments of a cluster, from the cache.
    pub fn machine_deployments_of(&self, ns: &str, cluster: &str) -> Vec<Arc<MachineDeployment>> {
        self.index
            .machine_deployments
            .get(&self.machine_deployments, ns, cluster)
    }

    /// The MachineHealthChecks of a cluster, from the cache.
    pub fn machine_health_checks_of(
        &self,
        ns: &str,
        cluster: &str,
    ) -> Vec<Arc<MachineHealthCheck>> {
        self.index
            .machine_health_checks
            .get(&self.machine_health_checks, ns, cluster)
    }
}

/// The worker caches by cluster (`by_cluster`), fed by the host's watches.
pub struct Indexes {
    pub machines: Arc<ByCluster<Machine>>,
    pub machine_sets: Arc<ByCluster<MachineSet>>,
    pub machine_deployments: Arc<ByCluster<MachineDeployment>>,
    pub machine_health_checks: Arc<ByCluster<MachineHealthCheck>>,
}

impl Default for Indexes {
    fn default() -> Self {
        Indexes {
            machines: Arc::new(ByCluster::new(|m: &Machine| &m.spec.cluster_name)),
            machine_sets: Arc::new(ByCluster::new(|m: &MachineSet| &m.spec.cluster_name)),
            machine_deployments: Arc::new(ByCluster::new(|m: &MachineDeployment| {
                &m.spec.cluster_name
            })),
            machine_health_checks: Arc::new(ByCluster::new(|m: &MachineHealthCheck| {
                &m.spec.cluster_name
            })),
        }
    }
}
