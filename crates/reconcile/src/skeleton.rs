//! The reconcile skeleton every controller shares: the Cluster and Machine controllers, the
//! provider driver (one per served kind) and the WasmProvider controller.
//!
//! One reconcile is: a span naming the controller and the object (carried by the future with
//! `instrument`, never an entered guard across `.await`), kube's finalizer helper around the
//! controller's apply and cleanup, and the reconcile metrics. The error policy is shared too:
//! a wait (an ordered step waiting on something) is requeued quietly after its delay; a failure
//! is logged and retried with [`backoff`](super::backoff)'s jittered, capped delay, counted per
//! object and forgotten once the object reconciles or is gone. [`write_status`] is the deferred
//! status write: one merge patch at the end of a reconcile, and none when nothing changed.

use super::backoff::{self, Failures};
use crate::metrics::Metrics;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Error as FinalizerError, Event, finalizer};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// What a controller's error type tells the skeleton.
pub trait Failure: std::error::Error + Send + Sync + Sized + 'static {
    /// The requeue delay when this is a wait rather than a failure.
    fn wait_time(&self) -> Option<Duration>;
    /// What a wait waits for, as a metric label (`waiting` when the controller gives none).
    fn wait_reason(&self) -> &'static str {
        "waiting"
    }
    /// Wraps the finalizer helper's error.
    fn finalizer(e: FinalizerError<Self>) -> Self;
}

/// The requeue delay of a wait that went through the finalizer helper.
pub fn finalizer_wait<E: Failure>(e: &FinalizerError<E>) -> Option<Duration> {
    match e {
        FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e) => e.wait_time(),
        _ => None,
    }
}

/// One controller's share of the skeleton.
pub struct Skeleton {
    /// The controller's name in spans, logs and metrics.
    pub controller: String,
    pub finalizer: String,
    pub metrics: Arc<Metrics>,
    /// Consecutive failed reconciles per object, for the retry delay.
    pub failures: Failures,
    /// Objects known to carry no `Authorized` condition: a reconcile of one that gets through
    /// need not look (looking serializes the whole object). Each object is looked at once
    /// after the host starts, for a condition an earlier host left.
    authorized: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn key<K: ResourceExt>(obj: &K) -> String {
    match obj.namespace() {
        Some(ns) => format!("{ns}/{}", obj.name_any()),
        None => obj.name_any(),
    }
}

/// The condition that says a reconcile was refused by RBAC.
pub const AUTHORIZED: &str = "Authorized";

/// The message of a 403 anywhere in `e`'s chain.
fn forbidden(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(kube::Error::Api(s)) = err.downcast_ref::<kube::Error>()
            && s.code == 403
        {
            return Some(s.message.clone());
        }
        cur = err.source();
    }
    None
}

/// Writes `Authorized=False` naming the refusal when a reconcile was refused, and takes it away
/// once a reconcile gets through: a missing permission in the host's ClusterRole then shows
/// on the object it stopped, not only in the host's log. One write, only on a change, over the
/// object as it is then (the reconcile may have written its status since it was read).
/// Whether the object is left without the condition.
async fn authorized_condition<K>(api: &Api<K>, obj: &K, refused: Option<String>) -> bool
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let refused = refused.map(|m| {
        format!(
            "{m}: the host's credentials lack this permission; grant it in the host's ClusterRole (capw manifests writes the one it needs)"
        )
    });
    match authorized_conditions(obj, refused.as_deref()) {
        Change::None => return true,
        Change::Kept => return false,
        Change::To(_) => {}
    }
    let name = obj.name_any();
    let current = api.get(&name).await.ok();
    let current = current.as_ref().unwrap_or(obj);
    let Change::To(conditions) = authorized_conditions(current, refused.as_deref()) else {
        return refused.is_none();
    };
    match write_conditions_at(api, &name, current.resource_version(), &conditions).await {
        Ok(_) => refused.is_none(),
        Err(e) => {
            tracing::debug!(error = %e, "the Authorized condition was not written; the next reconcile tries again");
            false
        }
    }
}

/// What the `Authorized` condition of an object comes to.
enum Change {
    /// It has none and needs none.
    None,
    /// It has the one it needs.
    Kept,
    /// Its conditions become these.
    To(Vec<serde_json::Value>),
}

/// The conditions of `obj` with `Authorized=False` for `refused`, or without it for `None`.
fn authorized_conditions<K: Resource + Serialize>(obj: &K, refused: Option<&str>) -> Change {
    let Ok(v) = serde_json::to_value(obj) else {
        return Change::Kept;
    };
    let mut conditions: Vec<serde_json::Value> = v
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .cloned()
        .unwrap_or_default();
    let at = conditions
        .iter()
        .position(|c| c.get("type").and_then(|t| t.as_str()) == Some(AUTHORIZED));
    match (refused, at) {
        (None, None) => return Change::None,
        (None, Some(i)) => {
            conditions.remove(i);
        }
        (Some(message), _) => {
            if at.is_some_and(|i| {
                conditions[i].get("message").and_then(|m| m.as_str()) == Some(message)
            }) {
                return Change::Kept;
            }
            let condition = serde_json::json!({
                "type": AUTHORIZED, "status": "False", "reason": "Forbidden",
                "message": message,
                "lastTransitionTime": jiff::Timestamp::now().to_string(),
                "observedGeneration": obj.meta().generation,
            });
            match at {
                Some(i) => conditions[i] = condition,
                None => conditions.push(condition),
            }
        }
    }
    Change::To(conditions)
}

impl Skeleton {
    pub fn new(
        controller: impl Into<String>,
        finalizer: impl Into<String>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Skeleton {
            controller: controller.into(),
            finalizer: finalizer.into(),
            metrics,
            failures: Failures::default(),
            authorized: Default::default(),
        }
    }

    /// One reconcile of `obj` through `api`: `apply` while it lives, `cleanup` once it is being
    /// deleted (the finalizer comes off when `cleanup` succeeds). `span` may add fields of its
    /// own (the plugin, for the driver); it is entered for the whole reconcile.
    pub async fn reconcile<K, E, A, AF, C, CF>(
        &self,
        api: &Api<K>,
        obj: Arc<K>,
        span: tracing::Span,
        apply: A,
        cleanup: C,
    ) -> Result<Action, E>
    where
        K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
        E: Failure,
        A: FnOnce(Arc<K>) -> AF,
        AF: Future<Output = Result<Action, E>>,
        C: FnOnce(Arc<K>) -> CF,
        CF: Future<Output = Result<Action, E>>,
    {
        let key = key(&*obj);
        let start = Instant::now();
        let seen = obj.clone();
        let r = finalizer(api, &self.finalizer, obj, |ev| async move {
            match ev {
                Event::Apply(o) => apply(o).await,
                Event::Cleanup(o) => cleanup(o).await,
            }
        })
        .instrument(span)
        .await;
        let waited = r.as_ref().err().and_then(finalizer_wait).is_some();
        self.metrics
            .reconcile(&self.controller, start.elapsed(), r.is_ok() || waited);
        if waited && let Err(FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e)) = &r
        {
            self.metrics.wait(&self.controller, e.wait_reason());
        }
        if r.is_ok() || waited {
            // It reconciled, or it is gone (the cleanup ran): either way no failures remain.
            self.failures.forget(&key);
        }
        let refused = r.as_ref().err().and_then(|e| forbidden(e));
        let look = {
            let mut known = self.authorized.lock().unwrap_or_else(|p| p.into_inner());
            if refused.is_some() || seen.meta().deletion_timestamp.is_some() {
                known.remove(&key);
            }
            refused.is_some() || !known.contains(&key)
        };
        if look
            && authorized_condition(api, &seen, refused).await
            && seen.meta().deletion_timestamp.is_none()
        {
            self.authorized
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key);
        }
        r.map_err(E::finalizer)
    }

    /// The shared error policy.
    pub fn error_policy<K: ResourceExt, E: Failure>(&self, obj: &K, err: &E) -> Action {
        Action::requeue(self.retry_delay(obj, err))
    }

    /// When to reconcile again after `err`: a wait's own delay, or the next backoff step.
    pub fn retry_delay<K: ResourceExt, E: Failure>(&self, obj: &K, err: &E) -> Duration {
        if let Some(after) = err.wait_time() {
            return after;
        }
        let key = key(obj);
        let retry_in = backoff::delay(self.failures.record(&key));
        tracing::warn!(controller = %self.controller, object = %key, error = %err, ?retry_in, "reconcile failed; retrying");
        retry_in
    }
}

/// The phases of one reconcile: every phase runs, so the status written at the end reflects
/// all of them; the first error is the reconcile's.
pub struct Phases<E>(Option<E>);

impl<E> Default for Phases<E> {
    fn default() -> Self {
        Phases(None)
    }
}

impl<E> Phases<E> {
    /// Keeps the phase's error unless an earlier phase failed.
    pub fn run(&mut self, r: Result<(), E>) {
        if let Err(e) = r {
            self.0.get_or_insert(e);
        }
    }

    /// Whether every phase so far succeeded.
    pub fn ok(&self) -> bool {
        self.0.is_none()
    }

    /// The first error, if any.
    pub fn finish(self) -> Result<(), E> {
        self.0.map_or(Ok(()), Err)
    }
}

/// The deferred status write: merges `after` into the object's status unless it equals what
/// the object had (`before`), so a reconcile that changed nothing writes nothing. Returns the
/// object as written, or `None` when nothing changed.
pub async fn write_status<K, S>(
    api: &Api<K>,
    name: &str,
    before: Option<&S>,
    after: &S,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    S: Serialize + PartialEq,
{
    if before == Some(after) {
        return Ok(None);
    }
    let patch = serde_json::json!({ "status": after });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(Some)
}

/// [`write_status`] over a known resourceVersion: the write is refused (409) when the object
/// changed since `version`, so a status computed from a stale read never lands. Returns the
/// object as written, or `None` when nothing changed.
pub async fn write_status_at<K, S>(
    api: &Api<K>,
    name: &str,
    version: Option<String>,
    before: Option<&S>,
    after: &S,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    S: Serialize + PartialEq,
{
    if before == Some(after) {
        return Ok(None);
    }
    merge_status_at(api, name, version, serde_json::json!(after))
        .await
        .map(Some)
}

/// Replaces `status.conditions` over `version` (409 when the object changed since): for a
/// controller that sets a condition on an object another controller owns the status of.
pub async fn write_conditions_at<K, C>(
    api: &Api<K>,
    name: &str,
    version: Option<String>,
    conditions: &[C],
) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    C: Serialize,
{
    merge_status_at(
        api,
        name,
        version,
        serde_json::json!({"conditions": conditions}),
    )
    .await
}

async fn merge_status_at<K>(
    api: &Api<K>,
    name: &str,
    version: Option<String>,
    status: serde_json::Value,
) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": version},
        "status": status,
    });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum E {
        #[error("waiting")]
        Wait,
        #[error("broken")]
        Broken,
        #[error("finalizer: {0}")]
        Fin(Box<FinalizerError<E>>),
    }

    impl Failure for E {
        fn wait_time(&self) -> Option<Duration> {
            match self {
                E::Wait => Some(Duration::from_secs(7)),
                E::Broken => None,
                E::Fin(f) => finalizer_wait(f),
            }
        }
        fn finalizer(e: FinalizerError<Self>) -> Self {
            E::Fin(Box::new(e))
        }
    }

    fn cm(name: &str) -> k8s_openapi::api::core::v1::ConfigMap {
        let mut c = k8s_openapi::api::core::v1::ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c
    }

    /// Waits requeue after their own delay and leave no failure behind; failures back off
    /// (doubling, jittered into the upper half of the step) per object, independently.
    #[test]
    fn retry_delay_table() {
        let s = Skeleton::new("test", "f", Arc::new(Metrics::default()));
        let (a, b) = (cm("a"), cm("b"));
        let wrapped = E::Fin(Box::new(FinalizerError::ApplyFailed(E::Wait)));
        for wait in [E::Wait, wrapped] {
            assert_eq!(s.retry_delay(&a, &wait), Duration::from_secs(7));
        }
        assert!(s.failures.is_empty(), "a wait is not a failure");
        for (n, step) in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 16.0)] {
            let got = s.retry_delay(&a, &E::Broken).as_secs_f64();
            assert!(
                (step / 2.0..=step).contains(&got),
                "failure {n}: {got} s is not in [{}, {step}]",
                step / 2.0
            );
        }
        let first = s.retry_delay(&b, &E::Broken).as_secs_f64();
        assert!(
            (0.5..=1.0).contains(&first),
            "another object starts over: {first}"
        );
        assert_eq!(s.failures.len(), 2);
        s.failures.forget("ns/a");
        assert_eq!(s.failures.len(), 1);
    }
}
