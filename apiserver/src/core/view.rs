//! Serving stored bytes as they are: a LIST or watch of a resource whose view is its stored
//! form sends each object's canonical JSON without decoding or re-encoding it.

use super::Core;
use crate::registry::{Builtin, ResourceType};
use crate::store::{Raw, form};
use bytes::Bytes;

/// What one resource version's view asks of a stored object, worked out once per request.
pub struct Shape {
    /// `form(apiVersion, kind)` of the view.
    form: u64,
    /// Whether reading rewrites objects beyond `apiVersion`/`kind`: the events.k8s.io
    /// conversion, or schema defaults (which a CRD update may have added since the write).
    rewrites: bool,
}

impl Shape {
    /// The view of `rt`.
    pub fn of(rt: &ResourceType) -> Self {
        Shape {
            form: form(&rt.api_version(), &rt.kind),
            rewrites: rt.builtin == Some(Builtin::EventV1) || rt.schema_defaults,
        }
    }

    /// Whether `raw` already is this view, byte for byte.
    pub fn is_stored_form(&self, raw: &Raw) -> bool {
        !self.rewrites && raw.is_form(self.form)
    }
}

impl Core {
    /// The JSON of `raw` in `rt`'s view: its stored bytes when they already are that view,
    /// otherwise decoded, rendered by [`Core::to_view`] and encoded. `None` when the stored
    /// bytes do not decode (logged by the caller's store read).
    pub fn view_json(&self, rt: &ResourceType, shape: &Shape, raw: &Raw) -> Option<Bytes> {
        if shape.is_stored_form(raw) {
            return Some(raw.json().clone());
        }
        let view = self.into_view(rt, raw.value().ok()?);
        serde_json::to_vec(&view).ok().map(Bytes::from)
    }
}
