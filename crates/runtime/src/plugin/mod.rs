//! One version of a provider: its validated metadata, its call counters, and the contract
//! calls, each checked against the contract. How a call reaches the provider is a
//! [`Transport`]: the runtime's is the component (`wasm`: a fresh, limited Store per call);
//! the clusters benchmark supplies an in-process one to run the same provider natively.

mod metadata;
mod wasm;

use super::bindings::{
    bootstrap_config, control_plane, infrastructure_cluster, infrastructure_machine, plugin_info,
    types,
};
use super::cache::Source;
use super::{Capability, Limits};
use futures::future::BoxFuture;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use bootstrap_config::{BootstrapData, BootstrapFormat, BootstrapStatus};
pub use control_plane::{ControlPlaneStatus, MachineRequest, ReplicaCounts};
pub use infrastructure_cluster::ClusterStatus;
pub use infrastructure_machine::MachineStatus;
pub use metadata::{provider_type_name, role_name, validate_metadata};
pub use plugin_info::{
    ControlPlaneMachines, KindRef, KindRole, PluginMetadata, ProviderType, ServedKind,
};
pub use types::{ApiEndpoint, Common, DeleteStatus};
pub use wasm::{Inspection, WIT_VERSION, inspect};

/// Why a component was not loaded. Nothing of the component has run when these occur, except
/// for `Smoke` (its `metadata()` was called).
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The bytes do not hash to the sha256 the WasmProvider names.
    #[error("sha256 mismatch: the file hashes to {actual}, the WasmProvider expects {expected}")]
    DigestMismatch { expected: String, actual: String },
    /// Not a component wasmtime can compile.
    #[error("not a valid component: {0}")]
    Invalid(String),
    /// The component imports an interface it was not granted.
    #[error(
        "imports {import}, which is not granted (granted: {granted}); grant it in the WasmProvider or rebuild the plugin without it"
    )]
    UngrantedImport { import: String, granted: String },
    /// The component was built against another version of the capw WIT packages.
    #[error(
        "was built against {found}, and this host speaks capw:provider@{WIT_VERSION} and capw:host@{WIT_VERSION}: rebuild it with the capw SDK of this host (docs/provider-guide.md). 0.2.0 made each served kind declare its contract role; the host no longer guesses it from the kind's name"
    )]
    OtherWitVersion { found: String },
    /// The component lacks an export the contract requires.
    #[error("does not export {0}, which every {1} provider must")]
    MissingExport(String, &'static str),
    /// Linking failed (a type mismatch with the host's WIT).
    #[error("cannot be linked against the host: {0}")]
    Link(String),
    /// `metadata()` failed or returned something invalid.
    #[error("metadata() smoke test failed: {0}")]
    Smoke(String),
    /// The compiled-artifact cache failed.
    #[error(transparent)]
    Cache(#[from] super::cache::CacheError),
}

/// Why one call failed. Every case leaves the host running and drops the call's Store.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The call ran past its deadline.
    #[error("the call did not finish within {0:?}")]
    Timeout(Duration),
    /// The guest trapped (panic, stack overflow, memory limit, unreachable...).
    #[error("the plugin trapped: {0}")]
    Trap(String),
    /// The guest returned something the contract forbids or the host refuses.
    #[error("the plugin returned an invalid result: {0}")]
    InvalidResult(String),
    /// The provider reported an error through the contract.
    #[error("{0}")]
    Provider(ProviderFailure),
}

/// `provider-error` from the WIT, owned by the host.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderFailure {
    Transient {
        message: String,
        retry_after_seconds: Option<u32>,
    },
    Terminal(String),
    InvalidSpec(String),
    Other(String),
}

impl std::fmt::Display for ProviderFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProviderFailure::Transient { message, .. } => {
                write!(f, "transient provider error: {message}")
            }
            ProviderFailure::Terminal(m) => write!(f, "terminal provider error: {m}"),
            ProviderFailure::InvalidSpec(m) => write!(f, "invalid spec: {m}"),
            ProviderFailure::Other(m) => write!(f, "provider error: {m}"),
        }
    }
}

impl From<types::ProviderError> for ProviderFailure {
    fn from(e: types::ProviderError) -> Self {
        match e {
            types::ProviderError::Transient(r) => ProviderFailure::Transient {
                message: r.message,
                retry_after_seconds: r.retry_after_seconds,
            },
            types::ProviderError::Terminal(m) => ProviderFailure::Terminal(m),
            types::ProviderError::InvalidSpec(m) => ProviderFailure::InvalidSpec(m),
            types::ProviderError::Other(m) => ProviderFailure::Other(m),
        }
    }
}

/// The context of a call, as JSON text (see the WIT `context` record).
pub type Context = types::Context;

impl Context {
    /// The context of a call about `object` (its JSON text) and nothing else; the caller adds
    /// what the object's role gets.
    pub fn of(object: String) -> Context {
        Context {
            object,
            cluster: None,
            machine: None,
            infrastructure_cluster: None,
            bootstrap_data: None,
            secrets: vec![],
            owned_machines: vec![],
        }
    }
}

/// Call counters of one version, for status and for the rollback decision.
#[derive(Debug, Default)]
pub struct Counters {
    pub calls: AtomicU64,
    pub traps: AtomicU64,
    pub timeouts: AtomicU64,
    pub errors: AtomicU64,
    /// Log lines the host kept for the plugin, the bytes its log writer wrote for them, and
    /// the bytes (estimated) it dropped over the per-call cap or the plugin's rate.
    pub log_lines: AtomicU64,
    pub log_bytes: AtomicU64,
    pub log_dropped_bytes: AtomicU64,
}

impl Counters {
    /// Adds what `other` counted: the same version reloaded under a new grant keeps its
    /// history.
    pub fn carry_from(&self, other: &Counters) {
        for (to, from) in [
            (&self.calls, &other.calls),
            (&self.traps, &other.traps),
            (&self.timeouts, &other.timeouts),
            (&self.errors, &other.errors),
            (&self.log_lines, &other.log_lines),
            (&self.log_bytes, &other.log_bytes),
            (&self.log_dropped_bytes, &other.log_dropped_bytes),
        ] {
            to.fetch_add(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// A loaded, validated version of a plugin.
pub struct Plugin {
    pub digest: String,
    pub metadata: PluginMetadata,
    /// The component's real imports and exports, as WIT names.
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    pub grants: BTreeSet<Capability>,
    pub limits: Limits,
    pub source: Source,
    pub counters: Counters,
    transport: Arc<dyn Transport>,
    services: Arc<super::Services>,
}

/// One contract call, by interface and function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    ReconcileCluster,
    DeleteCluster,
    ReconcileMachine,
    DeleteMachine,
    ReconcileBootstrap,
    DeleteBootstrap,
    ReconcileControlPlane,
    DeleteControlPlane,
}

/// What a contract call answered, by interface.
#[derive(Debug, Clone)]
pub enum Response {
    Cluster(ClusterStatus),
    Machine(MachineStatus),
    Bootstrap(BootstrapStatus),
    ControlPlane(ControlPlaneStatus),
    Deleted(DeleteStatus),
}

/// A result type one [`Response`] case carries.
pub trait FromResponse: Sized {
    fn from_response(r: Response) -> Option<Self>;
}

macro_rules! from_response {
    ($($t:ty => $case:ident),*) => {$(
        impl FromResponse for $t {
            fn from_response(r: Response) -> Option<Self> {
                match r {
                    Response::$case(st) => Some(st),
                    _ => None,
                }
            }
        }
    )*};
}

from_response!(ClusterStatus => Cluster, MachineStatus => Machine, BootstrapStatus => Bootstrap,
    ControlPlaneStatus => ControlPlane, DeleteStatus => Deleted);

/// How a plugin's calls reach the provider. The host checks and counts what comes back the
/// same way whatever the transport.
pub trait Transport: Send + Sync {
    /// `plugin-info.metadata`, uncounted (it is a smoke test, not traffic).
    fn metadata<'a>(
        &'a self,
        plugin: &'a Plugin,
    ) -> BoxFuture<'a, Result<PluginMetadata, CallError>>;
    /// One contract call. The outer error is the transport's (trap, deadline); the inner is
    /// the provider's own `provider-error`.
    fn call<'a>(
        &'a self,
        plugin: &'a Plugin,
        request: Request,
        ctx: Context,
    ) -> BoxFuture<'a, Result<Result<Response, types::ProviderError>, CallError>>;
}

fn check_result_size(limits: &Limits, what: &str, len: usize) -> Result<(), CallError> {
    if len > limits.result_bytes {
        return Err(CallError::InvalidResult(format!(
            "{what} is {len} bytes, over the limit of {} bytes",
            limits.result_bytes
        )));
    }
    Ok(())
}

fn check_patch(limits: &Limits, patch: &Option<String>) -> Result<(), CallError> {
    let Some(p) = patch else { return Ok(()) };
    check_result_size(limits, "status-patch", p.len())?;
    match serde_json::from_str::<serde_json::Value>(p) {
        Ok(serde_json::Value::Object(map)) => {
            match capw_api::contract::fields::STATUS_FIELDS
                .iter()
                .find(|f| map.contains_key(**f))
            {
                Some(field) => Err(CallError::InvalidResult(format!(
                    "status-patch sets status.{field}, a Cluster API contract field: the host sets it \
                     from the typed result (conditions go in `conditions`), so leave it out of the patch"
                ))),
                None => Ok(()),
            }
        }
        Ok(_) => Err(CallError::InvalidResult(
            "status-patch must be a JSON object".into(),
        )),
        Err(e) => Err(CallError::InvalidResult(format!(
            "status-patch is not JSON: {e}"
        ))),
    }
}

impl Plugin {
    /// A provider reached through `transport` instead of a component: validated like one,
    /// granted nothing. The clusters benchmark runs the bundled providers natively this way.
    pub fn with_transport(
        metadata: PluginMetadata,
        transport: Arc<dyn Transport>,
        limits: Limits,
    ) -> Result<Plugin, PluginError> {
        validate_metadata(&metadata).map_err(PluginError::Smoke)?;
        Ok(Plugin {
            digest: format!("in-process:{}@{}", metadata.name, metadata.version),
            metadata,
            imports: vec![],
            exports: vec![],
            grants: BTreeSet::new(),
            limits,
            source: Source::Compiled,
            counters: Counters::default(),
            transport,
            services: Arc::default(),
        })
    }

    fn count(&self, r: &Result<impl Sized, CallError>) {
        if matches!(
            r,
            Err(CallError::InvalidResult(_)) | Err(CallError::Provider(_))
        ) {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub async fn call_metadata(&self) -> Result<PluginMetadata, CallError> {
        let meta = self.transport.metadata(self).await?;
        let total: usize = meta.crds.iter().map(String::len).sum();
        check_result_size(
            &Limits {
                result_bytes: self.limits.result_bytes * 4,
                ..self.limits.clone()
            },
            "crds",
            total,
        )?;
        Ok(meta)
    }

    /// A contract call: the provider's own errors become `CallError::Provider`, the result is
    /// checked against the contract, and failures are counted for the rollback decision.
    async fn contract_call<T: FromResponse>(
        &self,
        request: Request,
        ctx: &Context,
        check: impl FnOnce(&T) -> Result<(), CallError>,
    ) -> Result<T, CallError> {
        self.counters.calls.fetch_add(1, Ordering::Relaxed);
        let r = self
            .transport
            .call(self, request, ctx.clone())
            .await
            .and_then(|r| r.map_err(|e| CallError::Provider(e.into())))
            .and_then(|resp| {
                T::from_response(resp).ok_or_else(|| {
                    CallError::InvalidResult(format!("{request:?} answered another call's result"))
                })
            })
            .and_then(|st| check(&st).map(|_| st));
        self.count(&r);
        r
    }

    /// `infrastructure-machine.reconcile`, checked against the contract.
    pub async fn reconcile_machine(&self, ctx: &Context) -> Result<MachineStatus, CallError> {
        self.contract_call(Request::ReconcileMachine, ctx, |st: &MachineStatus| {
            check_patch(&self.limits, &st.common.status_patch)?;
            if st.provisioned && st.provider_id.as_deref().is_none_or(str::is_empty) {
                return Err(CallError::InvalidResult(
                    "provisioned = true without a provider-id".into(),
                ));
            }
            Ok(())
        })
        .await
    }

    /// `infrastructure-machine.delete`, checked against the contract.
    pub async fn delete_machine(&self, ctx: &Context) -> Result<DeleteStatus, CallError> {
        self.contract_call(Request::DeleteMachine, ctx, |st: &DeleteStatus| {
            check_patch(&self.limits, &st.common.status_patch)
        })
        .await
    }

    /// `infrastructure-cluster.reconcile`, checked against the contract.
    pub async fn reconcile_cluster(&self, ctx: &Context) -> Result<ClusterStatus, CallError> {
        self.contract_call(Request::ReconcileCluster, ctx, |st: &ClusterStatus| {
            check_patch(&self.limits, &st.common.status_patch)?;
            if st.provisioned && st.control_plane_endpoint.is_none() {
                return Err(CallError::InvalidResult(
                    "provisioned = true without a control-plane endpoint".into(),
                ));
            }
            Ok(())
        })
        .await
    }

    /// `infrastructure-cluster.delete`, checked against the contract.
    pub async fn delete_cluster(&self, ctx: &Context) -> Result<DeleteStatus, CallError> {
        self.contract_call(Request::DeleteCluster, ctx, |st: &DeleteStatus| {
            check_patch(&self.limits, &st.common.status_patch)
        })
        .await
    }

    /// `bootstrap-config.reconcile`, checked against the contract.
    pub async fn reconcile_bootstrap(&self, ctx: &Context) -> Result<BootstrapStatus, CallError> {
        self.contract_call(Request::ReconcileBootstrap, ctx, |st: &BootstrapStatus| {
            check_patch(&self.limits, &st.common.status_patch)?;
            if let Some(d) = &st.data {
                check_result_size(&self.limits, "bootstrap data", d.value.len())?;
            }
            Ok(())
        })
        .await
    }

    /// `bootstrap-config.delete`, checked against the contract.
    pub async fn delete_bootstrap(&self, ctx: &Context) -> Result<DeleteStatus, CallError> {
        self.contract_call(Request::DeleteBootstrap, ctx, |st: &DeleteStatus| {
            check_patch(&self.limits, &st.common.status_patch)
        })
        .await
    }

    /// `control-plane.reconcile`, checked against the contract.
    pub async fn reconcile_control_plane(
        &self,
        ctx: &Context,
    ) -> Result<ControlPlaneStatus, CallError> {
        self.contract_call(
            Request::ReconcileControlPlane,
            ctx,
            |st: &ControlPlaneStatus| {
                check_patch(&self.limits, &st.common.status_patch)?;
                let dns = |n: &str| {
                    !n.is_empty()
                        && n.len() <= 253
                        && n.bytes().all(|b| {
                            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                        })
                };
                if let Some(bad) = st.machines_to_create.iter().find(|m| !dns(&m.name)) {
                    return Err(CallError::InvalidResult(format!(
                        "machines-to-create names {:?}, which is not a valid object name",
                        bad.name
                    )));
                }
                Ok(())
            },
        )
        .await
    }

    /// `control-plane.delete`, checked against the contract.
    pub async fn delete_control_plane(&self, ctx: &Context) -> Result<DeleteStatus, CallError> {
        self.contract_call(Request::DeleteControlPlane, ctx, |st: &DeleteStatus| {
            check_patch(&self.limits, &st.common.status_patch)
        })
        .await
    }
}

/// A shared handle to one version.
pub type PluginRef = Arc<Plugin>;
