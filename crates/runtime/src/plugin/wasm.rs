//! The component transport: a loaded component is validated against its grants, linked, and
//! called in a fresh, limited Store per call, so a trap never poisons a later call.

use super::*;
use crate::bindings::plugin_info;
use crate::cache::{ArtifactCache, sha256_hex};
use crate::engine::RuntimeEngine;
use crate::host::HostState;
use wasmtime::Store;
use wasmtime::component::{HasSelf, Instance, InstancePre, Linker};

/// Where each contract interface sits in the component; `None` for what it does not export.
struct Indices {
    info: plugin_info::GuestIndices,
    infra_cluster: Option<infrastructure_cluster::GuestIndices>,
    infra_machine: Option<infrastructure_machine::GuestIndices>,
    bootstrap: Option<bootstrap_config::GuestIndices>,
    control_plane: Option<control_plane::GuestIndices>,
}

/// The version of the `capw:provider` and `capw:host` WIT packages this host binds.
pub const WIT_VERSION: &str = "0.2.0";

const INFO: &str = "capw:provider/plugin-info@0.2.0";

/// The interfaces a provider type must export besides `plugin-info`.
fn required_exports(t: ProviderType) -> (&'static str, &'static [&'static str]) {
    match t {
        ProviderType::Infrastructure => (
            "infrastructure",
            &[
                "capw:provider/infrastructure-cluster@0.2.0",
                "capw:provider/infrastructure-machine@0.2.0",
            ],
        ),
        ProviderType::Bootstrap => ("bootstrap", &["capw:provider/bootstrap-config@0.2.0"]),
        ProviderType::ControlPlane => ("control-plane", &["capw:provider/control-plane@0.2.0"]),
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
        g.link(&mut l).map_err(link)?;
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
            crate::cache::CacheError::Compile(m) => PluginError::Invalid(m),
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

/// A component, linked and ready to instantiate once per call.
struct Wasm {
    pre: InstancePre<HostState>,
    idx: Indices,
    engine: wasmtime::Engine,
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
        if let Some(other) = info.imports.iter().chain(&info.exports).find(|i| {
            (i.starts_with("capw:provider/") || i.starts_with("capw:host/"))
                && !i.ends_with(&format!("@{WIT_VERSION}"))
        }) {
            return Err(PluginError::OtherWitVersion {
                found: other.clone(),
            });
        }
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
            transport: Arc::new(Wasm {
                pre,
                idx,
                engine: rt.engine.clone(),
            }),
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
}

impl Wasm {
    fn store(&self, plugin: &Plugin, object: String) -> Result<Store<HostState>, CallError> {
        let state = HostState::new(
            &plugin.limits,
            &plugin.metadata.name,
            &plugin.metadata.version,
            object,
            plugin.services.clone(),
        );
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_hostcall_fuel(plugin.limits.hostcall_bytes);
        store.set_max_component_handles(plugin.limits.handles);
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
    async fn run<R>(
        &self,
        plugin: &Plugin,
        // Owned: the call's log sink keeps it, so the object is copied once per call.
        object: String,
        timeout: Duration,
        counted: bool,
        f: impl for<'a> FnOnce(
            &'a Indices,
            Instance,
            &'a mut Store<HostState>,
        ) -> BoxFuture<'a, wasmtime::Result<R>>,
    ) -> Result<R, CallError> {
        // The smoke-test `metadata()` call is not traffic: it must not sway the rollback decision.
        let counters = counted.then_some(&plugin.counters);
        // A fair share: at most a few calls of one plugin run at once, so its calls that spin
        // to the deadline queue behind each other instead of crowding out other plugins'. The
        // deadline starts once the call runs.
        let _share = plugin
            .services
            .call_share(&plugin.metadata.name)
            .acquire_owned()
            .await;
        let mut store = self.store(plugin, object)?;
        // One span per plugin call; naming the object costs a JSON parse, so only when enabled.
        let span = if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug_span!("plugin_call", plugin = %plugin.metadata.name, version = %plugin.metadata.version,
                object = %crate::capabilities::log::object_ref(&store.data().log.object_json))
        } else {
            tracing::Span::none()
        };
        let run = async {
            let instance = self.pre.instantiate_async(&mut store).await?;
            f(&self.idx, instance, &mut store).await
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
        plugin
            .counters
            .log_lines
            .fetch_add(log.lines.len() as u64, Ordering::Relaxed);
        plugin
            .counters
            .log_dropped_bytes
            .fetch_add(log.dropped as u64, Ordering::Relaxed);
        plugin
            .counters
            .log_bytes
            .fetch_add(log.written as u64, Ordering::Relaxed);
        drop(store);
        out
    }
}

/// One contract export, called through `run`: the export of `$iface` (`$field` of the
/// component's index), answering `$case`. The eight calls differ only in these.
macro_rules! export_call {
    ($self:ident, $plugin:ident, $ctx:ident, $field:ident, $iface:literal, $call:ident, $case:ident) => {
        $self.run(
            $plugin,
            $ctx.object.clone(),
            $plugin.limits.reconcile_timeout,
            true,
            move |idx, i, s| {
                Box::pin(async move {
                    let r = idx
                        .$field
                        .as_ref()
                        .ok_or_else(|| unsupported($iface))?
                        .load(&mut *s, &i)?
                        .$call(s, &$ctx)
                        .await?;
                    Ok(r.map(Response::$case))
                })
            },
        )
    };
}

impl Transport for Wasm {
    fn metadata<'a>(
        &'a self,
        plugin: &'a Plugin,
    ) -> BoxFuture<'a, Result<PluginMetadata, CallError>> {
        Box::pin(self.run(
            plugin,
            "plugin-info".to_string(),
            plugin.limits.metadata_timeout,
            false,
            |idx, i, s| Box::pin(async move { idx.info.load(&mut *s, &i)?.call_metadata(s).await }),
        ))
    }

    fn call<'a>(
        &'a self,
        plugin: &'a Plugin,
        request: Request,
        ctx: Context,
    ) -> BoxFuture<'a, Result<Result<Response, types::ProviderError>, CallError>> {
        Box::pin(async move {
            match request {
                Request::ReconcileCluster => {
                    export_call!(
                        self,
                        plugin,
                        ctx,
                        infra_cluster,
                        "infrastructure-cluster",
                        call_reconcile,
                        Cluster
                    )
                    .await
                }
                Request::DeleteCluster => {
                    export_call!(
                        self,
                        plugin,
                        ctx,
                        infra_cluster,
                        "infrastructure-cluster",
                        call_delete,
                        Deleted
                    )
                    .await
                }
                Request::ReconcileMachine => {
                    export_call!(
                        self,
                        plugin,
                        ctx,
                        infra_machine,
                        "infrastructure-machine",
                        call_reconcile,
                        Machine
                    )
                    .await
                }
                Request::DeleteMachine => {
                    export_call!(
                        self,
                        plugin,
                        ctx,
                        infra_machine,
                        "infrastructure-machine",
                        call_delete,
                        Deleted
                    )
                    .await
                }
                Request::ReconcileBootstrap => {
                    export_call!(
                        self,
                        plugin,
                        ctx,
                        bootstrap,
                        "bootstrap-config",
                        call_reconcile,
                        Bootstrap
                    )
                    .await
                }
                Request::DeleteBootstrap => {
                    export_call!(
                        self,
                        plugin,
                        ctx,
                        bootstrap,
                        "bootstrap-config",
                        call_delete,
                        Deleted
                    )
                    .await
                }
                Request::ReconcileControlPlane => {
                    export_call!(
                        self,
                        plugin,
                        ctx,
                        control_plane,
                        "control-plane",
                        call_reconcile,
                        ControlPlane
                    )
                    .await
                }
                Request::DeleteControlPlane => {
                    export_call!(
                        self,
                        plugin,
                        ctx,
                        control_plane,
                        "control-plane",
                        call_delete,
                        Deleted
                    )
                    .await
                }
            }
        })
    }
}
