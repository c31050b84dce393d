//! One version of a provider component: validated against its grants, compiled, smoke-tested,
//! and called with a fresh, limited Store per call.

use super::bindings::{
    self, bootstrap_config, control_plane, infrastructure_cluster, infrastructure_machine,
    plugin_info, types,
};
use super::cache::{ArtifactCache, Source, sha256_hex};
use super::engine::RuntimeEngine;
use super::host::HostState;
use super::{Capability, Limits};
use futures::future::BoxFuture;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use wasmtime::Store;
use wasmtime::component::{HasSelf, Instance, InstancePre, Linker};

pub use bootstrap_config::{BootstrapData, BootstrapStatus};
pub use control_plane::{ControlPlaneStatus, MachineRequest, ReplicaCounts};
pub use infrastructure_cluster::ClusterStatus;
pub use infrastructure_machine::MachineStatus;
pub use plugin_info::{PluginMetadata, ProviderType};
pub use types::{Common, DeleteStatus};

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

/// Call counters of one version, for status and for the rollback decision.
#[derive(Debug, Default)]
pub struct Counters {
    pub calls: AtomicU64,
    pub traps: AtomicU64,
    pub timeouts: AtomicU64,
    pub errors: AtomicU64,
    /// Log lines the host emitted for the plugin, and the bytes (text plus line cost) it
    /// dropped over the per-call cap or the plugin's rate.
    pub log_lines: AtomicU64,
    pub log_dropped_bytes: AtomicU64,
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
    backend: Backend,
    services: Arc<super::Services>,
}

enum Backend {
    Wasm {
        pre: InstancePre<HostState>,
        idx: Indices,
        engine: wasmtime::Engine,
    },
    /// The same provider logic compiled into the host, for the native-versus-Wasm benchmark.
    Native(Arc<dyn NativeProvider>),
}

/// A provider compiled into the host rather than loaded as a component. capw loads providers
/// as components; this exists so a benchmark can run the bundled providers' own source
/// natively, side by side with their components, through the same driver.
pub trait NativeProvider: Send + Sync {
    fn metadata(&self) -> PluginMetadata;
    fn reconcile_cluster(&self, ctx: Context) -> Result<ClusterStatus, types::ProviderError>;
    fn delete_cluster(&self, ctx: Context) -> Result<DeleteStatus, types::ProviderError>;
    fn reconcile_machine(&self, ctx: Context) -> Result<MachineStatus, types::ProviderError>;
    fn delete_machine(&self, ctx: Context) -> Result<DeleteStatus, types::ProviderError>;
    fn reconcile_bootstrap(&self, ctx: Context) -> Result<BootstrapStatus, types::ProviderError>;
    fn delete_bootstrap(&self, ctx: Context) -> Result<DeleteStatus, types::ProviderError>;
    fn reconcile_control_plane(
        &self,
        ctx: Context,
    ) -> Result<ControlPlaneStatus, types::ProviderError>;
    fn delete_control_plane(&self, ctx: Context) -> Result<DeleteStatus, types::ProviderError>;
}

/// Where each contract interface sits in the component; `None` for what it does not export.
struct Indices {
    info: plugin_info::GuestIndices,
    infra_cluster: Option<infrastructure_cluster::GuestIndices>,
    infra_machine: Option<infrastructure_machine::GuestIndices>,
    bootstrap: Option<bootstrap_config::GuestIndices>,
    control_plane: Option<control_plane::GuestIndices>,
}

const INFO: &str = "capw:provider/plugin-info@0.1.0";

/// The interfaces a provider type must export besides `plugin-info`.
fn required_exports(t: ProviderType) -> (&'static str, &'static [&'static str]) {
    match t {
        ProviderType::Infrastructure => (
            "infrastructure",
            &[
                "capw:provider/infrastructure-cluster@0.1.0",
                "capw:provider/infrastructure-machine@0.1.0",
            ],
        ),
        ProviderType::Bootstrap => ("bootstrap", &["capw:provider/bootstrap-config@0.1.0"]),
        ProviderType::ControlPlane => ("control-plane", &["capw:provider/control-plane@0.1.0"]),
    }
}

fn unsupported(what: &str) -> wasmtime::Error {
    wasmtime::format_err!("this component does not export {what}")
}

/// Interfaces linked for every plugin: the inert WASI set and the type-only contract interface.
fn always_linked(name: &str) -> bool {
    name.starts_with("wasi:") || name.starts_with("capw:provider/types@")
}

fn linker(
    engine: &wasmtime::Engine,
    grants: &BTreeSet<Capability>,
) -> Result<Linker<HostState>, PluginError> {
    let link = |e: wasmtime::Error| PluginError::Link(format!("{e:#}"));
    let mut l = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut l).map_err(link)?;
    types::add_to_linker::<HostState, HasSelf<HostState>>(&mut l, |s| s).map_err(link)?;
    for g in grants {
        match g {
            Capability::Log => {
                bindings::log::add_to_linker::<HostState, HasSelf<HostState>>(&mut l, |s| s)
            }
            Capability::ContainerRuntime => bindings::container_runtime::add_to_linker::<
                HostState,
                HasSelf<HostState>,
            >(&mut l, |s| s),
            Capability::SimCloud => {
                bindings::sim_cloud::add_to_linker::<HostState, HasSelf<HostState>>(&mut l, |s| s)
            }
        }
        .map_err(link)?;
    }
    Ok(l)
}

/// What `inspect` reports without running anything.
pub struct Inspection {
    pub digest: String,
    /// Whether compiling was needed or the cache had it.
    pub source: Source,
    pub size: usize,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

/// Lists a component's imports and exports (compiling it, running nothing).
pub fn inspect(
    rt: &RuntimeEngine,
    cache: &ArtifactCache,
    bytes: &[u8],
) -> Result<(Inspection, wasmtime::component::Component), PluginError> {
    let digest = sha256_hex(bytes);
    let (component, source) = cache
        .load(&rt.engine, &digest, bytes)
        .map_err(|e| match e {
            super::cache::CacheError::Compile(m) => PluginError::Invalid(m),
            other => PluginError::Cache(other),
        })?;
    let ty = component.component_type();
    let imports = ty.imports(&rt.engine).map(|(n, _)| n.to_string()).collect();
    let exports = ty.exports(&rt.engine).map(|(n, _)| n.to_string()).collect();
    Ok((
        Inspection {
            digest,
            source,
            size: bytes.len(),
            imports,
            exports,
        },
        component,
    ))
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

/// Status fields the Cluster API contract defines: the host sets them from the typed result
/// (so `dataSecretName` is always the Secret the host wrote), or core reads them, and a status
/// patch may set none of them (SECURITY.md, "status patches").
pub const CONTRACT_STATUS_FIELDS: &[&str] = &[
    "initialization",
    "ready",
    "initialized",
    "dataSecretName",
    "failureDomains",
    "failureDomain",
    "addresses",
    "interruptible",
    "conditions",
    "v1beta2",
    "deprecated",
    "replicas",
    "readyReplicas",
    "availableReplicas",
    "upToDateReplicas",
    "updatedReplicas",
    "unavailableReplicas",
    "version",
    "selector",
    "observedGeneration",
    "failureReason",
    "failureMessage",
];

fn check_patch(limits: &Limits, patch: &Option<String>) -> Result<(), CallError> {
    let Some(p) = patch else { return Ok(()) };
    check_result_size(limits, "status-patch", p.len())?;
    match serde_json::from_str::<serde_json::Value>(p) {
        Ok(serde_json::Value::Object(map)) => {
            match CONTRACT_STATUS_FIELDS
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

/// One contract call: the export of `$iface` (`$field` of the component's index) through
/// `call`, the native backend's `$native` for benchmarks, and `$check` on the result. The eight
/// calls differ only in these, so they are written once.
macro_rules! contract_call {
    ($self:ident, $ctx:ident, $field:ident, $iface:literal, $call:ident, $native:ident, $check:expr) => {
        $self
            .contract_call(
                $ctx,
                |idx, i, s, c| {
                    Box::pin(async move {
                        idx.$field
                            .as_ref()
                            .ok_or_else(|| unsupported($iface))?
                            .load(&mut *s, &i)?
                            .$call(s, &c)
                            .await
                    })
                },
                |n, c| n.$native(c),
                $check,
            )
            .await
    };
}

impl Plugin {
    /// Validates, compiles and smoke-tests a component: the sha256 (when given), the imports
    /// against `grants`, the required exports, linking, and `metadata()`.
    pub async fn load(
        rt: &RuntimeEngine,
        cache: &ArtifactCache,
        bytes: &[u8],
        expected_sha256: Option<&str>,
        grants: BTreeSet<Capability>,
        limits: Limits,
    ) -> Result<Plugin, PluginError> {
        let actual = sha256_hex(bytes);
        if let Some(expected) = expected_sha256
            && !expected.eq_ignore_ascii_case(&actual)
        {
            return Err(PluginError::DigestMismatch {
                expected: expected.to_string(),
                actual,
            });
        }
        let (info, component) = inspect(rt, cache, bytes)?;
        let granted: Vec<&str> = grants.iter().map(|g| g.interface()).collect();
        if let Some(bad) = info
            .imports
            .iter()
            .find(|i| !always_linked(i) && !granted.contains(&i.as_str()))
        {
            return Err(PluginError::UngrantedImport {
                import: bad.clone(),
                granted: granted.join(", "),
            });
        }
        if !info.exports.iter().any(|e| e == INFO) {
            return Err(PluginError::MissingExport(INFO.to_string(), "capw"));
        }
        let l = linker(&rt.engine, &grants)?;
        let pre = l
            .instantiate_pre(&component)
            .map_err(|e| PluginError::Link(format!("{e:#}")))?;
        let link = |e: wasmtime::Error| PluginError::Link(format!("{e:#}"));
        let idx = Indices {
            info: plugin_info::GuestIndices::new(&pre).map_err(link)?,
            infra_cluster: infrastructure_cluster::GuestIndices::new(&pre).ok(),
            infra_machine: infrastructure_machine::GuestIndices::new(&pre).ok(),
            bootstrap: bootstrap_config::GuestIndices::new(&pre).ok(),
            control_plane: control_plane::GuestIndices::new(&pre).ok(),
        };
        let mut plugin = Plugin {
            digest: info.digest,
            metadata: PluginMetadata {
                name: String::new(),
                version: String::new(),
                provider_type: ProviderType::Infrastructure,
                contract_version: String::new(),
                kinds: vec![],
                crds: vec![],
            },
            imports: info.imports,
            exports: info.exports,
            grants,
            limits,
            source: info.source,
            counters: Counters::default(),
            backend: Backend::Wasm {
                pre,
                idx,
                engine: rt.engine.clone(),
            },
            services: rt.services.clone(),
        };
        let meta = plugin
            .call_metadata()
            .await
            .map_err(|e| PluginError::Smoke(e.to_string()))?;
        validate_metadata(&meta).map_err(PluginError::Smoke)?;
        let (type_name, required) = required_exports(meta.provider_type);
        for want in required {
            if !plugin.exports.iter().any(|e| e == want) {
                return Err(PluginError::MissingExport(want.to_string(), type_name));
            }
        }
        plugin.metadata = meta;
        Ok(plugin)
    }

    /// A provider compiled into the host (see [`NativeProvider`]).
    pub fn native(
        provider: Arc<dyn NativeProvider>,
        limits: Limits,
    ) -> Result<Plugin, PluginError> {
        let metadata = provider.metadata();
        validate_metadata(&metadata).map_err(PluginError::Smoke)?;
        Ok(Plugin {
            digest: format!("native:{}@{}", metadata.name, metadata.version),
            metadata,
            imports: vec![],
            exports: vec![],
            grants: BTreeSet::new(),
            limits,
            source: Source::Compiled,
            counters: Counters::default(),
            backend: Backend::Native(provider),
            services: Arc::default(),
        })
    }

    fn store(
        &self,
        engine: &wasmtime::Engine,
        object: &str,
    ) -> Result<Store<HostState>, CallError> {
        let state = HostState::new(
            &self.limits,
            &self.metadata.name,
            &self.metadata.version,
            object,
            self.services.clone(),
        );
        let mut store = Store::new(engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_hostcall_fuel(self.limits.hostcall_bytes);
        store.set_max_component_handles(self.limits.handles);
        // Yield to the executor every epoch tick (10 ms), so the deadline below can cut in.
        // tokio's own yield, not a plain self-wake: a task that yields through it runs again
        // only after the scheduler has polled I/O and timers, so a guest that computes for its
        // whole deadline cannot delay other tasks' wake-ups (with a self-wake, they waited for
        // the scheduler's event interval, 61 slices of 10 ms).
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|_| {
            Ok(wasmtime::UpdateDeadline::YieldCustom(
                1,
                Box::pin(tokio::task::yield_now()),
            ))
        });
        Ok(store)
    }

    /// Runs `f` against a fresh instance in a fresh Store, under `timeout`. The Store is
    /// dropped afterwards whatever happened, so a trap never poisons a later call.
    async fn call<R>(
        &self,
        object: &str,
        timeout: Duration,
        counted: bool,
        f: impl for<'a> FnOnce(
            &'a Indices,
            Instance,
            &'a mut Store<HostState>,
        ) -> BoxFuture<'a, wasmtime::Result<R>>,
    ) -> Result<R, CallError> {
        // The smoke-test `metadata()` call is not traffic: it must not sway the rollback decision.
        let Backend::Wasm { pre, idx, engine } = &self.backend else {
            return Err(CallError::InvalidResult(
                "a native provider has no component to call".into(),
            ));
        };
        let counters = counted.then_some(&self.counters);
        if let Some(c) = counters {
            c.calls.fetch_add(1, Ordering::Relaxed);
        }
        // A fair share: at most a few calls of one plugin run at once, so its calls that spin
        // to the deadline queue behind each other instead of crowding out other plugins'. The
        // deadline starts once the call runs.
        let _share = self
            .services
            .call_share(&self.metadata.name)
            .acquire_owned()
            .await;
        let mut store = self.store(engine, object)?;
        // One span per plugin call; naming the object costs a JSON parse, so only when enabled.
        let span = if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug_span!("plugin_call", plugin = %self.metadata.name, version = %self.metadata.version,
                object = %super::host::object_ref(object))
        } else {
            tracing::Span::none()
        };
        let run = async {
            let instance = pre.instantiate_async(&mut store).await?;
            f(idx, instance, &mut store).await
        };
        let out =
            match tracing::Instrument::instrument(tokio::time::timeout(timeout, run), span).await {
                Err(_) => {
                    if let Some(c) = counters {
                        c.timeouts.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(CallError::Timeout(timeout))
                }
                Ok(Err(trap)) => {
                    if let Some(c) = counters {
                        c.traps.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(CallError::Trap(format!("{trap:#}")))
                }
                Ok(Ok(r)) => Ok(r),
            };
        let log = &store.data().log;
        self.counters
            .log_lines
            .fetch_add(log.lines.len() as u64, Ordering::Relaxed);
        self.counters
            .log_dropped_bytes
            .fetch_add(log.dropped as u64, Ordering::Relaxed);
        drop(store);
        out
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
        if let Backend::Native(n) = &self.backend {
            return Ok(n.metadata());
        }
        let meta = self
            .call(
                "plugin-info",
                self.limits.metadata_timeout,
                false,
                |idx, i, s| {
                    Box::pin(async move { idx.info.load(&mut *s, &i)?.call_metadata(s).await })
                },
            )
            .await?;
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
    async fn contract_call<T>(
        &self,
        ctx: &Context,
        f: impl for<'a> FnOnce(
            &'a Indices,
            Instance,
            &'a mut Store<HostState>,
            Context,
        )
            -> BoxFuture<'a, wasmtime::Result<Result<T, types::ProviderError>>>,
        native: impl FnOnce(&dyn NativeProvider, Context) -> Result<T, types::ProviderError>,
        check: impl FnOnce(&T) -> Result<(), CallError>,
    ) -> Result<T, CallError> {
        let owned = ctx.clone();
        if let Backend::Native(n) = &self.backend {
            self.counters.calls.fetch_add(1, Ordering::Relaxed);
            let r = native(&**n, owned)
                .map_err(|e| CallError::Provider(e.into()))
                .and_then(|st| check(&st).map(|_| st));
            self.count(&r);
            return r;
        }
        let r = self
            .call(
                &ctx.object,
                self.limits.reconcile_timeout,
                true,
                |idx, i, s| f(idx, i, s, owned),
            )
            .await
            .and_then(|r| r.map_err(|e| CallError::Provider(e.into())))
            .and_then(|st| check(&st).map(|_| st));
        self.count(&r);
        r
    }

    /// `infrastructure-machine.reconcile`, checked against the contract.
    pub async fn reconcile_machine(&self, ctx: &Context) -> Result<MachineStatus, CallError> {
        contract_call!(
            self,
            ctx,
            infra_machine,
            "infrastructure-machine",
            call_reconcile,
            reconcile_machine,
            |st| {
                check_patch(&self.limits, &st.common.status_patch)?;
                if st.provisioned && st.provider_id.as_deref().is_none_or(str::is_empty) {
                    return Err(CallError::InvalidResult(
                        "provisioned = true without a provider-id".into(),
                    ));
                }
                Ok(())
            }
        )
    }

    /// `infrastructure-machine.delete`, checked against the contract.
    pub async fn delete_machine(&self, ctx: &Context) -> Result<DeleteStatus, CallError> {
        contract_call!(
            self,
            ctx,
            infra_machine,
            "infrastructure-machine",
            call_delete,
            delete_machine,
            |st| check_patch(&self.limits, &st.common.status_patch)
        )
    }

    /// `infrastructure-cluster.reconcile`, checked against the contract.
    pub async fn reconcile_cluster(&self, ctx: &Context) -> Result<ClusterStatus, CallError> {
        contract_call!(
            self,
            ctx,
            infra_cluster,
            "infrastructure-cluster",
            call_reconcile,
            reconcile_cluster,
            |st| {
                check_patch(&self.limits, &st.common.status_patch)?;
                if st.provisioned && st.control_plane_endpoint.is_none() {
                    return Err(CallError::InvalidResult(
                        "provisioned = true without a control-plane endpoint".into(),
                    ));
                }
                Ok(())
            }
        )
    }

    /// `infrastructure-cluster.delete`, checked against the contract.
    pub async fn delete_cluster(&self, ctx: &Context) -> Result<DeleteStatus, CallError> {
        contract_call!(
            self,
            ctx,
            infra_cluster,
            "infrastructure-cluster",
            call_delete,
            delete_cluster,
            |st| check_patch(&self.limits, &st.common.status_patch)
        )
    }

    /// `bootstrap-config.reconcile`, checked against the contract.
    pub async fn reconcile_bootstrap(&self, ctx: &Context) -> Result<BootstrapStatus, CallError> {
        contract_call!(
            self,
            ctx,
            bootstrap,
            "bootstrap-config",
            call_reconcile,
            reconcile_bootstrap,
            |st| {
                check_patch(&self.limits, &st.common.status_patch)?;
                if let Some(d) = &st.data {
                    check_result_size(&self.limits, "bootstrap data", d.value.len())?;
                    if d.format != "cloud-config" && d.format != "ignition" {
                        return Err(CallError::InvalidResult(format!(
                            "bootstrap data format {:?} is neither cloud-config nor ignition",
                            d.format
                        )));
                    }
                }
                Ok(())
            }
        )
    }

    /// `bootstrap-config.delete`, checked against the contract.
    pub async fn delete_bootstrap(&self, ctx: &Context) -> Result<DeleteStatus, CallError> {
        contract_call!(
            self,
            ctx,
            bootstrap,
            "bootstrap-config",
            call_delete,
            delete_bootstrap,
            |st| check_patch(&self.limits, &st.common.status_patch)
        )
    }

    /// `control-plane.reconcile`, checked against the contract.
    pub async fn reconcile_control_plane(
        &self,
        ctx: &Context,
    ) -> Result<ControlPlaneStatus, CallError> {
        contract_call!(
            self,
            ctx,
            control_plane,
            "control-plane",
            call_reconcile,
            reconcile_control_plane,
            |st| {
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
            }
        )
    }

    /// `control-plane.delete`, checked against the contract.
    pub async fn delete_control_plane(&self, ctx: &Context) -> Result<DeleteStatus, CallError> {
        contract_call!(
            self,
            ctx,
            control_plane,
            "control-plane",
            call_delete,
            delete_control_plane,
            |st| check_patch(&self.limits, &st.common.status_patch)
        )
    }
}

/// The contract rules for `metadata()`.
pub fn validate_metadata(m: &PluginMetadata) -> Result<(), String> {
    let label = !m.name.is_empty()
        && m.name.len() <= 63
        && m.name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !label {
        return Err(format!("name {:?} is not a DNS label", m.name));
    }
    if semver::Version::parse(&m.version).is_err() {
        return Err(format!("version {:?} is not a semantic version", m.version));
    }
    if m.contract_version != "v1beta2" {
        return Err(format!(
            "contract version {:?} is not supported (this host speaks v1beta2)",
            m.contract_version
        ));
    }
    if m.crds.len() != m.kinds.len() {
        return Err(format!(
            "{} kinds but {} CRDs: every served kind needs its CRD",
            m.kinds.len(),
            m.crds.len()
        ));
    }
    for (i, crd) in m.crds.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(crd)
            .or_else(|_| serde_yaml::from_str(crd))
            .map_err(|e| format!("crds[{i}] is neither JSON nor YAML: {e}"))?;
        if v.pointer("/metadata/labels/cluster.x-k8s.io~1v1beta2")
            .and_then(serde_json::Value::as_str)
            .is_none()
        {
            return Err(format!(
                "crds[{i}] lacks the contract label cluster.x-k8s.io/v1beta2"
            ));
        }
    }
    Ok(())
}

/// A shared handle to one version.
pub type PluginRef = Arc<Plugin>;

#[cfg(test)]
mod tests {
    #[test]
    fn plugin_versions_are_semantic_versions() {
        for ok in ["0.1.0", "1.0.0-v2", "0.1.1-trap", "2.3.4+build.5"] {
            assert!(semver::Version::parse(ok).is_ok(), "{ok}");
        }
        // The old hand-written check let these through.
        for bad in ["1x.2y.3z", "1.2", "01.2.3", "1.2.3.4"] {
            assert!(semver::Version::parse(bad).is_err(), "{bad}");
        }
    }
}
