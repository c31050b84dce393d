//! LIST and DELETE-collection: selectors, pagination with continue tokens, resourceVersion
//! semantics, and Table / PartialObjectMetadata rendering.

use super::request::{Query, Want};
use super::respond;
use crate::builtin;
use crate::core::{Core, DeleteOptions, Shape};
use crate::meta;
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::Raw;
use crate::table::{self, IncludeObject};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use http::{StatusCode, header};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Label and field selectors of one request, checked against the resource.
pub struct Filter {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn from_query(rt: &ResourceType, q: &Query) -> Result<Self, ApiError> {
        let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("invalid labelSelector: {e}")))?;
        let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("invalid fieldSelector: {e}")))?;
        for f in fields.fields() {
            if !rt.supports_field(f) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {f}"
                )));
            }
        }
        let mut fields = fields;
        if rt.builtin == Some(crate::registry::Builtin::EventV1) {
            // Selectors name events.k8s.io fields; objects are stored in the core/v1 form.
            for (f, _, _) in fields.0.iter_mut() {
                if let Some(rest) = f.strip_prefix("regarding.") {
                    *f = format!("involvedObject.{rest}");
                } else if f == "reportingController" {
                    *f = "reportingComponent".into();
                }
            }
        }
        Ok(Filter { labels, fields })
    }

    /// Whether every object matches, so nothing needs decoding to be filtered.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.0.is_empty()
    }

    /// Matches a stored object's bytes, decoding them only when there is something to match,
    /// and only their metadata when only labels are.
    pub fn matches_raw(&self, raw: &Raw) -> bool {
        if self.is_empty() {
            return true;
        }
        let decoded = if self.fields.0.is_empty() {
            raw.metadata()
        } else {
            raw.value()
        };
        decoded.is_ok_and(|o| self.matches(&o))
    }

    /// Matches a stored object (core form for Events).
    pub fn matches(&self, obj: &Value) -> bool {
        if !self.labels.is_empty() && !self.labels.matches(&meta::labels(obj)) {
            return false;
        }
        self.fields.matches(|f| builtin::field_value(obj, f))
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Continue {
    rv: u64,
    ns: String,
    name: String,
}

fn encode_continue(c: &Continue) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(c).unwrap_or_default())
}

fn decode_continue(s: &str) -> Result<Continue, ApiError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| {
            ApiError::bad_request(
                "the provided continue parameter is too old or malformed; list again without it",
            )
        })
}

fn list_options_invalid(msg: &str) -> ApiError {
    ApiError::unprocessable(format!("ListOptions.meta.k8s.io \"\" is invalid: {msg}"))
}

pub fn render_one(rt: &ResourceType, obj: Value, want: Want) -> Response {
    match want {
        Want::Table => {
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(Value::Null);
            respond(
                200,
                &table::table(
                    rt,
                    &[obj],
                    json!({"resourceVersion": rv}),
                    IncludeObject::Metadata,
                ),
                Want::Json,
            )
        }
        Want::PartialMetadata => respond(200, &table::partial_metadata(&obj), Want::Json),
        other => respond(200, &obj, other),
    }
}

fn include_object(q: &Query) -> IncludeObject {
    match q.get("includeObject") {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    }
}

pub async fn list(
    core: &Core,
    rt: &Arc<ResourceType>,
    ns: &str,
    q: &Query,
    want: Want,
) -> Result<Response, ApiError> {
    let filter = Filter::from_query(rt, q)?;
    if q.flag("sendInitialEvents") {
        return Err(list_options_invalid(
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
        ));
    }
    let rv_param = q.get("resourceVersion");
    let requested: Option<u64> =
        match rv_param {
            None => None,
            Some(v) => Some(v.parse().map_err(|_| {
                ApiError::bad_request(format!("resourceVersion: invalid value {v:?}"))
            })?),
        };
    match (q.get("resourceVersionMatch"), requested) {
        (Some("Exact"), None | Some(0)) => {
            return Err(list_options_invalid(
                "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
        (Some("Exact"), Some(n)) => {
            let cur = core.store.current_rv();
            if n < cur {
                return Err(ApiError::expired(n, cur));
            }
            if n > cur && !core.store.wait_for_rv(n, Duration::from_secs(3)).await {
                return Err(ApiError::rv_too_large());
            }
        }
        (Some("NotOlderThan") | None, Some(n)) if n > 0 => {
            if !core.store.wait_for_rv(n, Duration::from_secs(3)).await {
                return Err(ApiError::rv_too_large());
            }
        }
        (Some("NotOlderThan") | None, _) => {}
        (Some(other), _) => {
            return Err(list_options_invalid(&format!(
                "resourceVersionMatch: Unsupported value: {other:?}"
            )));
        }
    }
    let limit = q.number("limit")?.filter(|l| *l > 0).map(|l| l as usize);
    let cont = q.get("continue").map(decode_continue).transpose()?;
    let (items, current) = core
        .store
        .list_raw(&rt.storage, (!ns.is_empty()).then_some(ns));
    let snapshot_rv = cont.as_ref().map_or(current, |c| c.rv);
    let mut page: Vec<&Raw> = vec![];
    let mut next = None;
    let mut matching = items.iter().filter(|((ns, name), raw)| {
        cont.as_ref()
            .is_none_or(|c| (ns.as_str(), name.as_str()) > (c.ns.as_str(), c.name.as_str()))
            && filter.matches_raw(raw)
    });
    let mut last_key = None;
    for ((ns, name), raw) in matching.by_ref() {
        if limit.is_some_and(|l| page.len() >= l) {
            let (ns, name) = last_key.unwrap_or((ns, name));
            next = Some(Continue {
                rv: snapshot_rv,
                ns: ns.clone(),
                name: name.clone(),
            });
            break;
        }
        last_key = Some((ns, name));
        page.push(raw);
    }
    let remaining = if next.is_some() {
        matching.count() + 1
    } else {
        0
    };
    let mut list_meta = json!({"resourceVersion": snapshot_rv.to_string()});
    if let Some(n) = &next {
        list_meta["continue"] = json!(encode_continue(n));
        list_meta["remainingItemCount"] = json!(remaining);
    }
    if want == Want::Json {
        return Ok(json_list(core, rt, list_meta, &page));
    }
    let page: Vec<Value> = page
        .into_iter()
        .filter_map(|raw| raw.value().ok())
        .map(|o| core.into_view(rt, o))
        .collect();
    Ok(match want {
        Want::Table => respond(
            200,
            &table::table(rt, &page, list_meta, include_object(q)),
            Want::Json,
        ),
        Want::PartialMetadata => {
            let items: Vec<Value> = page.iter().map(table::partial_metadata).collect();
            respond(
                200,
                &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "items": items}),
                Want::Json,
            )
        }
        other => respond(
            200,
            &json!({"kind": rt.list_kind(), "apiVersion": rt.api_version(), "metadata": list_meta, "items": page}),
            other,
        ),
    })
}

/// A JSON list written around its items' bytes: objects whose view is their stored form are
/// copied as they are, so a LIST costs what copying its bytes costs.
fn json_list(core: &Core, rt: &ResourceType, list_meta: Value, page: &[&Raw]) -> Response {
    let shape = Shape::of(rt);
    let head =
        json!({"kind": rt.list_kind(), "apiVersion": rt.api_version(), "metadata": list_meta});
    let items: Vec<Bytes> = page
        .iter()
        .filter_map(|raw| core.view_json(rt, &shape, raw))
        .collect();
    let mut body = serde_json::to_vec(&head).unwrap_or_default();
    body.pop();
    body.reserve(items.iter().map(|i| i.len() + 1).sum::<usize>() + 12);
    body.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item);
    }
    body.extend_from_slice(b"]}");
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

pub async fn delete_collection(
    core: &Core,
    rt: &Arc<ResourceType>,
    ns: &str,
    q: &Query,
    opts: &DeleteOptions,
) -> Result<Response, ApiError> {
    let filter = Filter::from_query(rt, q)?;
    let (items, _) = core.store.list(&rt.storage, (!ns.is_empty()).then_some(ns));
    let mut out = vec![];
    for o in items.iter().filter(|o| filter.matches(o)) {
        match core
            .delete(
                rt,
                meta::str_field(o, "namespace"),
                meta::str_field(o, "name"),
                opts,
            )
            .await
        {
            Ok((outcome, _, _)) => out.push(core.to_view(rt, outcome.object())),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let rv = core.store.current_rv().to_string();
    Ok(respond(
        200,
        &json!({"kind": rt.list_kind(), "apiVersion": rt.api_version(), "metadata": {"resourceVersion": rv}, "items": out}),
        Want::Json,
    ))
}
