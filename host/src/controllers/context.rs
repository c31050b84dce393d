//! What the core controllers share: the client, caches of Clusters and Machines (reflectors),
//! provider kind resolution with dynamic watches, workload cluster clients, Events and metrics.

use super::external::{Resolver, Tracker};
use super::remote::Remotes;
use crate::api::cluster::Cluster;
use crate::api::machine::Machine;
use crate::metrics::Metrics;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::Store;
use std::sync::Arc;

pub struct CoreCtx {
    pub client: Client,
    pub resolver: Arc<Resolver>,
    pub remotes: Remotes,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub clusters: Store<Cluster>,
    pub machines: Store<Machine>,
    pub cluster_tracker: Arc<Tracker<Cluster>>,
    pub machine_tracker: Arc<Tracker<Machine>>,
}

impl CoreCtx {
    /// Publishes an Event; failing to is logged, never fatal.
    pub async fn event(
        &self,
        obj: &k8s_openapi::api::core::v1::ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, obj).await {
            tracing::debug!(error = %e, reason, "publishing an Event failed");
        }
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
