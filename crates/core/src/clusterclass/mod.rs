//! The ClusterClass controller (upstream's `internal/controllers/clusterclass`): every template
//! the class references gets the class as an owner, `status.variables` lists the variables with
//! where each is defined, and `RefVersionsUpToDate`, `VariablesReady` and `observedGeneration`
//! say how far it got. The topology controller waits for a class that is reconciled.
//!
//! A class has no finalizer and nothing to clean up, so this is a plain `kube::runtime`
//! controller on its own watch rather than the finalizer skeleton the other core kinds use.

mod references;

pub(crate) use references::of as template_references;
mod status;
mod variables;

use super::context::{Concurrency, CoreCtx, Registration};
use super::error::ReconcileError;
use crate::caches::Feeds;
use capw_api::clusterclass::{ClusterClass, ClusterClassStatus};
use capw_api::common::names::PAUSED_ANNOTATION;
use capw_api::contract::conditions::set_paused;
use capw_reconcile::skeleton::{Skeleton, write_status};
use futures::StreamExt;
use futures::future::BoxFuture;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// Whether the class controller has caught up with the class: its variables are listed for
/// this generation. Topologies and the Cluster webhooks wait for it, as upstream's do.
pub fn reconciled(class: &ClusterClass) -> bool {
    let status = class.status.clone().unwrap_or_default();
    status.observed_generation == class.metadata.generation
        && capw_api::contract::conditions::is_true(&status.conditions, status::VARIABLES_READY)
}

/// What one reconcile found, for the status.
struct Scope {
    class: Arc<ClusterClass>,
    status: ClusterClassStatus,
    /// Why a template could not be read or owned.
    references_error: Option<String>,
    /// Templates whose apiVersion is not the latest their CRD's contract allows.
    outdated: Vec<references::Outdated>,
    /// Why the variables could not be listed.
    variables_error: Option<String>,
}

async fn reconcile(class: Arc<ClusterClass>, ctx: Arc<CoreCtx>) -> Result<Action, ReconcileError> {
    let ns = class.namespace().unwrap_or_default();
    let span = tracing::info_span!("reconcile", controller = "clusterclass", object.ref = %format!("{ns}/{}", class.name_any()));
    apply(class, &ctx).instrument(span).await
}

async fn apply(class: Arc<ClusterClass>, ctx: &CoreCtx) -> Result<Action, ReconcileError> {
    let api: Api<ClusterClass> =
        Api::namespaced(ctx.client.clone(), &class.namespace().unwrap_or_default());
    let generation = class.metadata.generation;
    let mut scope = Scope {
        status: class.status.clone().unwrap_or_default(),
        class,
        references_error: None,
        outdated: vec![],
        variables_error: None,
    };
    let paused = scope.class.annotations().contains_key(PAUSED_ANNOTATION);
    set_paused(
        &mut scope.status.conditions,
        paused,
        "ClusterClass has the cluster.x-k8s.io/paused annotation",
        generation,
    );
    let stopped = paused || scope.class.metadata.deletion_timestamp.is_some();
    if !stopped {
        match references::reconcile(&scope.class, ctx).await {
            Ok(outdated) => scope.outdated = outdated,
            Err(e) => scope.references_error = Some(e.to_string()),
        }
        match variables::of(&scope.class.spec) {
            Ok(list) => scope.status.variables = list,
            Err(e) => scope.variables_error = Some(e),
        }
        status::update(&mut scope, generation);
    }
    write_status(
        &api,
        &scope.class.name_any(),
        scope.class.status.as_ref(),
        &scope.status,
    )
    .await?;
    match (scope.references_error, scope.variables_error) {
        (None, None) => Ok(Action::await_change()),
        (Some(e), _) | (None, Some(e)) => Err(ReconcileError::Invalid(format!(
            "ClusterClass {}: {e}",
            scope.class.name_any()
        ))),
    }
}

fn setup(ctx: &Arc<CoreCtx>, _: &Feeds, concurrency: &Concurrency) -> BoxFuture<'static, ()> {
    let ctx = ctx.clone();
    let concurrency = concurrency.clusters;
    Box::pin(async move {
        let api: Api<ClusterClass> = Api::all(ctx.client.clone());
        let policy = Arc::new(Skeleton::new("clusterclass", "", ctx.metrics.clone()));
        Controller::new(api, watcher::Config::default())
            .with_config(
                kube::runtime::controller::Config::default()
                    .concurrency(concurrency)
                    .debounce(Duration::from_millis(100)),
            )
            .run(
                reconcile,
                move |class, err, _| policy.error_policy(&*class, err),
                ctx,
            )
            .for_each(|_| async {})
            .await;
    })
}

/// The ClusterClass controller, as the manager starts it.
pub const CONTROLLER: Registration = Registration {
    owns: Some("ClusterClass"),
    setup,
};
