//! The controllers kube-apiserver and kube-controller-manager would run, in-process: the CRD
//! establisher, the garbage collector, the namespace controller, the pod garbage collector (for
//! Pods of deleted Nodes), the bootstrap-token cleaner and the Event TTL sweeper.
//! Each reacts to store events and also sweeps periodically, so work interrupted by a restart
//! converges.

pub mod crd;
pub mod csrsigning;
pub mod gc;
pub mod namespace;
pub mod podgc;
pub mod tokencleaner;

use crate::core::{Core, DeleteOptions, Op, Propagation, WriteOptions};
use crate::registry::ResourceType;
use crate::status::ApiError;
use crate::store::ObjKey;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// How often the controllers sweep everything, and the Event time to live.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// How often every object is swept again, whatever the watches said.
    pub resync: Duration,
    /// How long an Event is kept after its last update (kube's `--event-ttl`).
    pub event_ttl: Duration,
    /// Off only in tests that need work left undone across a restart.
    pub enabled: bool,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            resync: Duration::from_secs(10),
            event_ttl: Duration::from_secs(3600),
            enabled: true,
        }
    }
}

pub(crate) fn internal_opts(manager: &str) -> WriteOptions {
    WriteOptions {
        field_manager: manager.into(),
        ..Default::default()
    }
}

/// Resolves a store key to its served type.
pub(crate) fn type_of(core: &Core, key: &ObjKey) -> Option<Arc<ResourceType>> {
    core.registry.by_storage(&key.gr)
}

/// Changes an object through the normal write path; a vanished object is not an error.
pub(crate) async fn mutate(
    core: &Core,
    key: &ObjKey,
    sub: &str,
    manager: &str,
    f: impl FnOnce(Value) -> Result<Value, ApiError> + Send + 'static,
) -> Result<(), ApiError> {
    let Some(rt) = type_of(core, key) else {
        return Ok(());
    };
    match core
        .write(
            &rt,
            &key.ns,
            &key.name,
            sub,
            Op::Mutate(Box::new(f)),
            &internal_opts(manager),
        )
        .await
    {
        Err(e) if e.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Deletes an object through the normal delete path; a vanished object is not an error.
pub(crate) async fn delete(
    core: &Core,
    key: &ObjKey,
    propagation: Propagation,
) -> Result<(), ApiError> {
    let Some(rt) = type_of(core, key) else {
        return Ok(());
    };
    let opts = DeleteOptions {
        propagation: Some(propagation),
        ..Default::default()
    };
    match core.delete(&rt, &key.ns, &key.name, &opts).await {
        Err(e) if e.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Runs all built-in controllers until the process ends.
pub fn spawn_all(core: Arc<Core>, config: ControllerConfig) -> Vec<tokio::task::JoinHandle<()>> {
    if !config.enabled {
        return vec![];
    }
    vec![
        tokio::spawn(gc::run(core.clone(), config.clone())),
        tokio::spawn(namespace::run(core.clone(), config.clone())),
        tokio::spawn(crd::run(core.clone(), config.clone())),
        tokio::spawn(podgc::run(core.clone(), config.clone())),
        tokio::spawn(tokencleaner::run(core.clone(), config.clone())),
        tokio::spawn(event_ttl(core, config)),
    ]
}

async fn event_ttl(core: Arc<Core>, config: ControllerConfig) {
    let mut tick = tokio::time::interval(config.resync.max(Duration::from_secs(1)));
    loop {
        tick.tick().await;
        let (events, _) = core.store.list("/events", None);
        let now = jiff::Timestamp::now();
        for e in events {
            let meta = &e["metadata"];
            let stamp = ["lastTimestamp", "eventTime"]
                .iter()
                .filter_map(|k| e.get(*k).and_then(Value::as_str))
                .chain(meta.get("creationTimestamp").and_then(Value::as_str))
                .filter_map(|s| s.parse::<jiff::Timestamp>().ok())
                .max();
            let expired = stamp.is_some_and(|t| {
                now.as_second() - t.as_second() > config.event_ttl.as_secs() as i64
            });
            if expired {
                let key = ObjKey::new(
                    "/events",
                    meta["namespace"].as_str().unwrap_or_default(),
                    meta["name"].as_str().unwrap_or_default(),
                );
                if let Err(e) = delete(&core, &key, Propagation::Background).await {
                    tracing::warn!(error = %e, "event TTL sweep could not delete an expired event");
                }
            }
        }
    }
}
