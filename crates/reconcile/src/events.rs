//! Events, as every controller publishes them.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use std::sync::{Arc, Mutex, PoisonError};

/// How many Events one kube `Recorder` publishes before [`BoundedRecorder`] starts another:
/// client-go's core/v1 recorder keeps as many keys in its correlator's LRU.
const CAPACITY: usize = 4096;

/// kube's `Recorder`, started afresh after every [`CAPACITY`] Events.
///
/// kube's Recorder keeps every Event it published for six minutes, so that a repeat counts into
/// the first one's series, and walks all of them on each publish. At a thousand clusters that
/// was about 11,000 Events held at once, each walk as long. client-go's core/v1 recorder bounds
/// the cache it counts repeats with to 4096 keys (an LRU); kube offers no bound, hence this
/// wrapper. A repeat published after a rotation starts a new Event instead of counting into the
/// old one's series.
#[derive(Clone)]
pub struct BoundedRecorder {
    client: Client,
    reporter: Reporter,
    current: Arc<Mutex<(Recorder, usize)>>,
}

impl BoundedRecorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        let recorder = Recorder::new(client.clone(), reporter.clone());
        BoundedRecorder {
            client,
            reporter,
            current: Arc::new(Mutex::new((recorder, 0))),
        }
    }

    /// Publishes `ev` about `reference` through the current Recorder, as kube's `publish`.
    pub async fn publish(
        &self,
        ev: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let recorder = {
            let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
            if current.1 >= CAPACITY {
                *current = (Recorder::new(self.client.clone(), self.reporter.clone()), 0);
            }
            current.1 += 1;
            current.0.clone()
        };
        recorder.publish(ev, reference).await
    }
}

/// The reference an Event names `obj` by, with its resourceVersion, as client-go's
/// `GetReference` makes it (kube's `object_ref` leaves it out). kube's Recorder counts an Event
/// about the same reference with the same reason as a repeat of the first, keeping the first
/// one's note: without the version, a deployment scaled 3 → 5 and then 5 → 2 showed
/// `Scaled 3 -> 5 (x2)`, and a plugin hot-reloaded to a new version showed the old one
/// activated twice.
pub fn reference<K: Resource>(obj: &K, dt: &K::DynamicType) -> ObjectReference {
    ObjectReference {
        resource_version: obj.meta().resource_version.clone(),
        ..obj.object_ref(dt)
    }
}

/// Publishes an Event about `obj` (made by [`reference`]); failing to is logged, never fatal.
///
/// `related` is the second object the Event is about: the Machine a set created or deleted.
/// kube's Recorder (as client-go's events.k8s.io recorder) counts an Event with the same reason,
/// object and related object as a repeat of the first, whatever its note says; without it,
/// three Machines created by one set in one pass read as one Machine created three times.
pub async fn publish(
    recorder: &BoundedRecorder,
    obj: &ObjectReference,
    related: Option<ObjectReference>,
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
        secondary: related,
    };
    if let Err(e) = recorder.publish(&ev, obj).await {
        tracing::debug!(error = %e, reason, "publishing an Event failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// A client whose API server takes every request, counting Event creates and patches.
    fn counting(creates: Arc<AtomicUsize>, patches: Arc<AtomicUsize>) -> Client {
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let counter = match *req.method() {
                http::Method::POST => Some(creates.clone()),
                http::Method::PATCH => Some(patches.clone()),
                _ => None,
            };
            async move {
                if let Some(c) = counter {
                    c.fetch_add(1, SeqCst);
                }
                let event = serde_json::json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                    "metadata": {"name": "e", "namespace": "ns"}, "eventTime": "2026-01-01T00:00:00.000000Z"});
                let body = serde_json::to_vec(&event).unwrap();
                Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(
                    body,
                )))
            }
        });
        Client::new(service, "ns")
    }

    fn about(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Machine".into()),
            name: Some(name.into()),
            namespace: Some("ns".into()),
            ..Default::default()
        }
    }

    /// A repeat counts into the first Event's series (a patch) until the Recorder has
    /// published its capacity; after that the repeat starts a new Event.
    #[tokio::test]
    async fn a_repeat_is_counted_until_the_recorder_is_rotated() {
        let (creates, patches) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let client = counting(creates.clone(), patches.clone());
        let recorder = BoundedRecorder::new(client, Reporter::from("test"));
        let ev = Event {
            type_: EventType::Warning,
            reason: "Failed".into(),
            note: None,
            action: "Reconcile".into(),
            secondary: None,
        };
        recorder.publish(&ev, &about("m")).await.unwrap();
        recorder.publish(&ev, &about("m")).await.unwrap();
        assert_eq!((creates.load(SeqCst), patches.load(SeqCst)), (1, 1));
        for i in 2..CAPACITY {
            recorder
                .publish(&ev, &about(&format!("m{i}")))
                .await
                .unwrap();
        }
        assert_eq!(creates.load(SeqCst), CAPACITY - 1);
        recorder.publish(&ev, &about("m")).await.unwrap();
        assert_eq!(
            (creates.load(SeqCst), patches.load(SeqCst)),
            (CAPACITY, 1),
            "after the rotation the repeat is a new Event"
        );
    }
}
