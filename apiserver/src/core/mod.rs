//! The object operations of the server, independent of HTTP: create, update, patch, apply,
//! delete. The HTTP handlers and the built-in controllers (garbage collector, namespace and CRD
//! controllers) all go through here, so every write gets the same validation, server-owned
//! metadata, generation rules, no-op detection and finalizer semantics.
//!
//! `validation` holds the checks every body goes through, `write` the create/update/patch/apply
//! path, `scale` the `autoscaling/v1` Scale view of custom resources and `delete` deletion with
//! finalizers and propagation policies.

mod delete;
mod scale;
mod validation;
mod write;

pub use scale::{ScaleOp, scale_of};

use crate::builtin;
use crate::meta::{self, meta_mut};
use crate::patch::{self, PatchError, apply as ssa};
use crate::registry::{Builtin, Registry, ResourceType};
use crate::schema;
use crate::status::{ApiError, Cause, delete_success};
use crate::store::{ObjKey, Outcome, Proposed, Store, StoreError};
use serde_json::{Value, json};
use std::sync::Arc;

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::internal(e)
    }
}

/// `fieldValidation`: what happens to fields the schema does not know.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

/// Options common to every write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    pub field_manager: String,
    pub field_validation: FieldValidation,
    pub force: bool,
}

/// The body of a PATCH, already parsed.
pub enum PatchBody {
    Merge(Value),
    Json(Vec<Value>),
    Strategic(Value),
    Apply(Value),
}

/// A mutation computed from the current object inside the writer (internal controllers).
pub type MutateFn = Box<dyn FnOnce(Value) -> Result<Value, ApiError> + Send>;

/// What to do to one object.
pub enum Op {
    Create(Value),
    Replace(Value),
    Patch(PatchBody),
    Mutate(MutateFn),
}

/// `propagationPolicy` of a DELETE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub dry_run: bool,
    pub propagation: Option<Propagation>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

/// The result of a write, with the object in the requested version's form.
pub struct Written {
    pub outcome: Outcome,
    pub view: Value,
    pub warnings: Vec<String>,
}

/// Namespaces that exist from the first start and cannot be deleted (`kube-node-lease` can).
pub const INITIAL_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];
const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];
pub const CRD_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Server state shared by HTTP handlers and built-in controllers.
pub struct Core {
    pub store: Store,
    pub registry: Registry,
}

fn patch_error(e: PatchError) -> ApiError {
    match e {
        PatchError::Malformed(m) => ApiError::bad_request(m),
        PatchError::Failed(m) => ApiError::unprocessable(m),
        PatchError::TooManyOperations(n) => ApiError::too_large(format!(
            "the JSON patch has {n} operations, more than the limit of 10000"
        )),
    }
}

/// The part of an object whose change bumps `generation`: not metadata, not the type (a
/// multi-version kind's objects differ only in `apiVersion` between views), and not status when
/// status has its own subresource.
fn without_meta_and(v: &Value, also_status: bool) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if also_status {
            m.remove("status");
        }
    }
    v
}

impl Core {
    pub fn new(store: Store) -> Self {
        Core {
            store,
            registry: Registry::with_builtins(),
        }
    }

    pub(super) fn key(rt: &ResourceType, ns: &str, name: &str) -> ObjKey {
        ObjKey::new(&rt.storage, if rt.namespaced { ns } else { "" }, name)
    }

    /// The stored object rendered for `rt`'s version: Event view conversion, `apiVersion`
    /// rewrite for multi-version CRDs, and schema defaults applied on read.
    pub fn to_view(&self, rt: &ResourceType, stored: &Value) -> Value {
        let mut v = match rt.builtin {
            Some(Builtin::EventV1) => builtin::event_to_v1(stored),
            _ => stored.clone(),
        };
        if let Some(m) = v.as_object_mut() {
            m.insert("apiVersion".into(), json!(rt.api_version()));
            m.insert("kind".into(), json!(rt.kind));
        }
        if let Some(s) = &rt.schema {
            schema::default(&mut v, s);
        }
        v
    }

    pub(super) fn from_view(rt: &ResourceType, v: Value) -> Value {
        match rt.builtin {
            Some(Builtin::EventV1) => builtin::event_to_core(&v),
            _ => v,
        }
    }

    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.store
            .get(&Self::key(rt, ns, name))
            .map(|o| self.to_view(rt, &o))
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    /// Creates the namespaces every cluster has.
    pub async fn ensure_initial_namespaces(&self) -> Result<(), ApiError> {
        let Some(rt) = self.registry.get("", "v1", "namespaces") else {
            return Ok(());
        };
        for ns in INITIAL_NAMESPACES {
            if self
                .store
                .get(&ObjKey::new("/namespaces", "", ns))
                .is_none()
            {
                let body = json!({"metadata": {"name": ns}});
                let opts = WriteOptions {
                    field_manager: "capw-apiserver".into(),
                    ..Default::default()
                };
                self.write(&rt, "", ns, "", Op::Create(body), &opts).await?;
            }
        }
        Ok(())
    }
}
