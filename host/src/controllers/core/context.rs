//! What the core controllers share: the client, caches of Clusters and Machines (reflectors),
//! provider kind resolution with dynamic watches, workload cluster clients, Events and metrics.

use super::error::ReconcileError;
use super::remote::Remotes;
use crate::api::cluster::Cluster;
use crate::api::machine::Machine;
use crate::controllers::events::publish;
use crate::controllers::external::{Resolver, Tracker};
use crate::metrics::Metrics;
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// A phase of a core reconcile: the apply or the cleanup side of the finalizer.
pub type Phase<K> = for<'a> fn(
    Arc<K>,
    &'a CoreCtx,
) -> futures::future::BoxFuture<'a, Result<Action, ReconcileError>>;

/// One core reconcile, the skeleton both controllers share: a span with the object reference,
/// the finalizer helper around `apply` and `cleanup`, and the metrics.
pub async fn reconcile<K>(
    obj: Arc<K>,
    ctx: Arc<CoreCtx>,
    controller: &'static str,
    finalizer_name: &'static str,
    apply: Phase<K>,
    cleanup: Phase<K>,
) -> Result<Action, ReconcileError>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let ns = obj.namespace().unwrap_or_default();
    let span = tracing::info_span!("reconcile", controller, object.ref = %format!("{ns}/{}", obj.name_any()));
    let start = Instant::now();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let r = finalizer(&api, finalizer_name, obj, |ev| async {
        match ev {
            Finalizer::Apply(o) => apply(o, &ctx).await,
            Finalizer::Cleanup(o) => cleanup(o, &ctx).await,
        }
    })
    .instrument(span)
    .await
    .map_err(|e| ReconcileError::Finalizer(Box::new(e)));
    ctx.metrics.reconcile(
        controller,
        start.elapsed(),
        r.is_ok()
            || r.as_ref()
                .err()
                .and_then(ReconcileError::wait_time)
                .is_some(),
    );
    r
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
        .predicate_filter(crate::controllers::relevance::metadata, Default::default());
    let (name, finalizer, apply, cleanup) = (c.name, c.finalizer, c.apply, c.cleanup);
    kube::runtime::Controller::for_stream(own, store)
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(concurrency)
                .debounce(c.debounce),
        )
        .reconcile_on(triggers)
        .run(
            move |obj, ctx| reconcile(obj, ctx, name, finalizer, apply, cleanup),
            error_policy,
            ctx,
        )
        .for_each(|_| async {})
        .await;
}

/// Waits are requeued quietly after their delay; failures are logged and retried in 5 s.
pub fn error_policy<K: kube::ResourceExt>(
    obj: Arc<K>,
    err: &ReconcileError,
    _ctx: Arc<CoreCtx>,
) -> Action {
    if let Some(after) = err.wait_time() {
        return Action::requeue(after);
    }
    tracing::warn!(object = %obj.name_any(), error = %err, "reconcile failed; retrying");
    Action::requeue(std::time::Duration::from_secs(5))
}

pub struct CoreCtx {
    pub client: Client,
    pub resolver: Arc<Resolver>,
    pub remotes: Remotes,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub clusters: Store<Cluster>,
    pub machines: Store<Machine>,
    /// Secrets labelled with a cluster name (kubeconfigs, CAs, tokens, bootstrap data).
    pub secrets: Store<k8s_openapi::api::core::v1::Secret>,
    pub cluster_tracker: Arc<Tracker<Cluster>>,
    pub machine_tracker: Arc<Tracker<Machine>>,
}

impl CoreCtx {
    pub async fn event(
        &self,
        obj: &k8s_openapi::api::core::v1::ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        publish(&self.recorder, obj, warning, reason, note).await
    }

    /// The Machines of a cluster, from the cache.
    pub fn machines_of(&self, ns: &str, cluster: &str) -> Vec<Arc<Machine>> {
        self.machines
            .state()
            .into_iter()
            .filter(|m| {
                m.metadata.namespace.as_deref() == Some(ns) && m.spec.cluster_name == cluster
            })
            .collect()
    }
}
