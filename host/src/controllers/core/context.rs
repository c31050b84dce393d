//! What the core controllers share: the client, caches of Clusters and Machines (reflectors),
//! provider kind resolution with dynamic watches, workload cluster clients, Events and metrics.

use super::error::ReconcileError;
use super::remote::Remotes;
use crate::api::cluster::Cluster;
use crate::api::machine::Machine;
use crate::controllers::events::publish;
use crate::controllers::external::{Resolver, Tracker};
use crate::controllers::skeleton::Skeleton;
use crate::metrics::Metrics;
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use std::sync::Arc;

/// A phase of a core reconcile: the apply or the cleanup side of the finalizer.
pub type Phase<K> = for<'a> fn(
    Arc<K>,
    &'a CoreCtx,
) -> futures::future::BoxFuture<'a, Result<Action, ReconcileError>>;

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
    pub remotes: Remotes,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub clusters: Store<Cluster>,
    pub machines: Store<Machine>,
    /// Machines as the core controllers' own last writes returned them (read-your-writes).
    pub machines_written: super::written::Written<Machine>,
    pub machine_sets: Store<crate::api::machineset::MachineSet>,
    pub machine_deployments: Store<crate::api::machinedeployment::MachineDeployment>,
    pub machine_health_checks: Store<crate::api::machinehealthcheck::MachineHealthCheck>,
    /// What MachineSets created or deleted that the Machine cache does not show yet.
    pub expectations: crate::controllers::core::machineset::expectations::Expectations,
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
