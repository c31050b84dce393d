//! WATCH: one compact JSON event per line, flushed per event. Errors after the stream started
//! (a too-old resourceVersion) are in-stream ERROR events, never HTTP errors, because
//! kube-runtime's watcher relists only on the in-stream form.

use super::App;
use super::list::Filter;
use super::request::{Query, Want};
use crate::core::{Core, Shape};
use crate::registry::ResourceType;
use crate::status::ApiError;
use crate::store::{Event, EventType, Raw};
use crate::table::{self, IncludeObject};
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{StatusCode, header};
use rand::Rng;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

struct Watch {
    core: Arc<Core>,
    rt: Arc<ResourceType>,
    ns: String,
    filter: Filter,
    want: Want,
    /// Whether objects can be sent as they are stored.
    shape: Shape,
    bookmarks: bool,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    /// A client that reads nothing for this long is disconnected.
    stall_limit: Duration,
}

/// One watch event, `{"type":…,"object":…}` and a newline. Written around the object's
/// serialization: `json!` would deep-copy the object first, once per event and watcher.
fn line(kind: &str, object: &Value) -> Bytes {
    let mut v = b"{\"type\":".to_vec();
    let written = serde_json::to_writer(&mut v, kind).and_then(|()| {
        v.extend_from_slice(b",\"object\":");
        serde_json::to_writer(&mut v, object)
    });
    if written.is_err() {
        return Bytes::new();
    }
    v.extend_from_slice(b"}\n");
    Bytes::from(v)
}

/// One watch event around an object's JSON bytes, which are copied, not re-encoded.
fn raw_line(kind: &str, object: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(object.len() + 32);
    v.extend_from_slice(b"{\"type\":\"");
    v.extend_from_slice(kind.as_bytes());
    v.extend_from_slice(b"\",\"object\":");
    v.extend_from_slice(object);
    v.extend_from_slice(b"}\n");
    Bytes::from(v)
}

impl Watch {
    fn render(&self, obj: &Value) -> Value {
        let view = self.core.to_view(&self.rt, obj);
        match self.want {
            Want::Table => {
                let rv = view
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(Value::Null);
                table::table(
                    &self.rt,
                    &[view],
                    json!({"resourceVersion": rv}),
                    IncludeObject::Metadata,
                )
            }
            Want::PartialMetadata => table::partial_metadata(&view),
            _ => view,
        }
    }

    fn visible(&self, ns: &str, obj: &Raw) -> bool {
        (self.ns.is_empty() || self.ns == ns) && self.filter.matches_raw(obj)
    }

    async fn send(&self, kind: &str, obj: &Raw) -> bool {
        let line = match self.want {
            Want::Table | Want::PartialMetadata => match obj.value() {
                Ok(o) => line(kind, &self.render(&o)),
                Err(_) => return true,
            },
            Want::Json | Want::Yaml => match self.core.view_json(&self.rt, &self.shape, obj) {
                Some(json) => raw_line(kind, &json),
                None => return true,
            },
        };
        self.push(line).await
    }

    /// Queues a line for the client; false when it is gone or stopped reading.
    async fn push(&self, line: Bytes) -> bool {
        matches!(
            tokio::time::timeout(self.stall_limit, self.tx.send(Ok(line))).await,
            Ok(Ok(()))
        )
    }

    async fn bookmark(&self, rv: u64, initial_end: bool) -> bool {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj =
            json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": meta});
        self.push(line("BOOKMARK", &obj)).await
    }

    /// Sends what a committed event means to this watcher. Returns false when the client is gone.
    async fn deliver(&self, ev: &Event) -> bool {
        if *ev.key.gr != *self.rt.storage {
            return true;
        }
        let ns = ev.key.ns.as_str();
        let now = ev.kind != EventType::Deleted && self.visible(ns, &ev.object);
        let before = match (&ev.prev, ev.kind) {
            (_, EventType::Deleted) => self.visible(ns, &ev.object),
            (Some(p), _) => self.visible(ns, p),
            (None, _) => false,
        };
        match (ev.kind, before, now) {
            (EventType::Deleted, true, _) => self.send("DELETED", &ev.object).await,
            (_, false, true) => self.send("ADDED", &ev.object).await,
            (_, true, true) => self.send("MODIFIED", &ev.object).await,
            (EventType::Modified, true, false) => {
                // Left the selector: DELETED with the old content and this event's RV.
                let Some(Ok(mut old)) = ev.prev.as_ref().map(Raw::value) else {
                    return true;
                };
                if let Some(m) = old.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.insert("resourceVersion".into(), json!(ev.rv.to_string()));
                }
                self.push(line("DELETED", &self.render(&old))).await
            }
            _ => true,
        }
    }
}

fn invalid(msg: &str) -> ApiError {
    ApiError::unprocessable(format!("ListOptions.meta.k8s.io \"\" is invalid: {msg}"))
}

/// Starts a watch and returns the streaming response.
pub fn serve(
    app: Arc<App>,
    rt: Arc<ResourceType>,
    ns: String,
    q: &Query,
    want: Want,
) -> Result<Response, ApiError> {
    let filter = Filter::from_query(&rt, q)?;
    let initial_events = q.flag("sendInitialEvents");
    let rv_match = q.get("resourceVersionMatch");
    if initial_events && rv_match != Some("NotOlderThan") {
        return Err(invalid(
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if rv_match.is_some() && !initial_events {
        return Err(invalid(
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    let bookmarks = q.flag("allowWatchBookmarks");
    if initial_events && !bookmarks {
        return Err(invalid(
            "allowWatchBookmarks: Forbidden: sendInitialEvents requires allowWatchBookmarks",
        ));
    }
    let start: Option<u64> =
        match q.get("resourceVersion") {
            None | Some("0") => None,
            Some(v) => Some(v.parse().map_err(|_| {
                ApiError::bad_request(format!("resourceVersion: invalid value {v:?}"))
            })?),
        };
    let timeout = match q.number("timeoutSeconds")? {
        Some(s) => Duration::from_secs(s),
        None => app
            .settings
            .watch_timeout
            .unwrap_or_else(|| Duration::from_secs(rand::rng().random_range(1800..3600))),
    };
    let (tx, rx) = mpsc::channel(64);
    let stall_limit = app.settings.watch_stall_limit;
    let w = Watch {
        core: app.core.clone(),
        shape: Shape::of(&rt),
        rt,
        ns,
        filter,
        want,
        bookmarks,
        tx,
        stall_limit,
    };
    let replay_all = start.is_none() || initial_events;
    let bookmark_every = app.settings.bookmark_interval;
    let mut closing = app.closing.subscribe();
    tokio::spawn(async move {
        app.active_watches.fetch_add(1, Ordering::Relaxed);
        tokio::select! {
            _ = run(w, start, replay_all, initial_events, timeout, bookmark_every) => {}
            _ = closing.wait_for(|c| *c) => {}
        }
        app.active_watches.fetch_sub(1, Ordering::Relaxed);
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

async fn run(
    w: Watch,
    start: Option<u64>,
    replay_all: bool,
    initial_events: bool,
    timeout: Duration,
    bookmark_every: Duration,
) {
    let deadline = Instant::now() + timeout;
    let (mut rx, mut last_rv) = if replay_all {
        let ns = (!w.ns.is_empty()).then_some(w.ns.as_str());
        let (items, rv, rx) = w.core.store.snapshot_and_subscribe(&w.rt.storage, ns);
        for o in items.iter().filter(|o| w.filter.matches_raw(o)) {
            if !w.send("ADDED", o).await {
                return;
            }
        }
        if initial_events && !w.bookmark(rv, true).await {
            return;
        }
        (rx, rv)
    } else {
        let from = start.unwrap_or(0);
        match w.core.store.subscribe(from) {
            Err(oldest) => {
                let _ =
                    w.tx.send(Ok(line(
                        "ERROR",
                        &ApiError::expired(from, oldest).to_status(),
                    )))
                    .await;
                return;
            }
            Ok((backlog, rx, _)) => {
                let mut last = from;
                for ev in backlog {
                    if !w.deliver(&ev).await {
                        return;
                    }
                    last = ev.rv;
                }
                (rx, last)
            }
        }
    };
    let mut next_bookmark = Instant::now() + bookmark_every;
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => {
                    if ev.rv <= last_rv {
                        continue;
                    }
                    last_rv = ev.rv;
                    if !w.deliver(&ev).await {
                        return;
                    }
                }
                // Too far behind: end the stream; the client resumes from its last RV.
                Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
            },
            _ = sleep_until(next_bookmark), if w.bookmarks => {
                if !w.bookmark(last_rv, false).await {
                    return;
                }
                next_bookmark = Instant::now() + bookmark_every;
            }
            _ = sleep_until(deadline) => {
                if w.bookmarks {
                    let _ = w.bookmark(last_rv, false).await;
                }
                return;
            }
            _ = w.tx.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_event_and_a_newline() {
        let object = json!({"metadata": {"name": "x\ny"}, "n": 1});
        let l = line("ADDED", &object);
        assert_eq!(l.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&l[..l.len() - 1]).unwrap();
        assert_eq!(v, json!({"type": "ADDED", "object": object}));
        assert!(!l[..l.len() - 1].contains(&b'\n'));
    }

    #[test]
    fn a_raw_line_is_the_same_line() {
        let object = json!({"metadata": {"name": "x\ny"}, "n": 1});
        let bytes = serde_json::to_vec(&object).unwrap();
        assert_eq!(raw_line("MODIFIED", &bytes), line("MODIFIED", &object));
    }
}
