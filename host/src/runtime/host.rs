//! What a Store carries during one call: WASI with nothing granted, the resource limits, and the
//! capped log; and the host interfaces (`capw:host/*`) a plugin can be granted.

use super::bindings::{container_runtime, log, sim_cloud, types};
use super::limits::Limits;
use wasmtime::StoreLimits;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// The per-call state.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limits: StoreLimits,
    pub log: LogSink,
    services: std::sync::Arc<super::Services>,
    container_grant: std::sync::Arc<crate::capabilities::container_runtime::ContainerGrant>,
}

/// What one log line costs against the caps beyond its text: the record the host writes for
/// it (level, plugin, version, object) is about this size.
pub const LOG_LINE_COST: usize = 128;

/// Log bytes each plugin may emit across all its calls: a bucket of `LOG_BURST` bytes that
/// refills at `LOG_RATE` bytes a second.
const LOG_BURST: f64 = (1 << 20) as f64;
const LOG_RATE: f64 = (256 << 10) as f64;

#[derive(Default)]
pub struct LogRate {
    buckets: std::sync::Mutex<std::collections::HashMap<String, (f64, std::time::Instant)>>,
}

impl LogRate {
    /// Takes `cost` bytes from the plugin's bucket; false when it is empty.
    pub fn take(&self, plugin: &str, cost: usize) -> bool {
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        if !b.contains_key(plugin) {
            b.insert(plugin.to_string(), (LOG_BURST, now));
        }
        let Some((level, at)) = b.get_mut(plugin) else {
            return false;
        };
        *level = (*level + now.duration_since(*at).as_secs_f64() * LOG_RATE).min(LOG_BURST);
        *at = now;
        let cost = cost as f64;
        if *level < cost {
            return false;
        }
        *level -= cost;
        true
    }
}

/// Log lines of one call, capped in bytes.
#[derive(Debug, Default)]
pub struct LogSink {
    pub plugin: String,
    pub version: String,
    /// The call's object as JSON; its `namespace/name` is worked out only if the plugin logs.
    pub object_json: String,
    object: Option<String>,
    pub lines: Vec<(log::Level, String)>,
    pub dropped: usize,
    left: usize,
}

impl HostState {
    pub fn new(
        limits: &Limits,
        plugin: &str,
        version: &str,
        object_json: &str,
        services: std::sync::Arc<super::Services>,
    ) -> Self {
        // No preopens, no env, no args, stdio discarded, no sockets or name lookups.
        let wasi = WasiCtx::builder()
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(limits.handles);
        let store_limits = wasmtime::StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes)
            .tables(limits.tables)
            .instances(limits.instances)
            .memories(limits.memories)
            .trap_on_grow_failure(true)
            .build();
        HostState {
            wasi,
            table,
            limits: store_limits,
            log: LogSink {
                plugin: plugin.into(),
                version: version.into(),
                object_json: object_json.into(),
                left: limits.log_bytes,
                ..Default::default()
            },
            services,
            container_grant: limits.container.clone(),
        }
    }
}

/// `namespace/name` of an object given as JSON.
pub(crate) fn object_ref(json: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let s = |p: &str| {
        v.pointer(p)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    format!("{}/{}", s("/metadata/namespace"), s("/metadata/name"))
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for HostState {}

impl log::Host for HostState {
    fn log(&mut self, level: log::Level, message: String) {
        let sink = &mut self.log;
        // A line costs its record as well as its text, so empty lines are not free; and each
        // plugin has a rate across calls, so many short calls cannot flood the host's log.
        let cost = message.len() + LOG_LINE_COST;
        if cost > sink.left || !self.services.log_rate.take(&sink.plugin, cost) {
            sink.dropped += cost;
            return;
        }
        sink.left -= cost;
        let enabled = match level {
            log::Level::Error => tracing::enabled!(tracing::Level::ERROR),
            log::Level::Warn => tracing::enabled!(tracing::Level::WARN),
            log::Level::Info => tracing::enabled!(tracing::Level::INFO),
            log::Level::Debug => tracing::enabled!(tracing::Level::DEBUG),
            log::Level::Trace => tracing::enabled!(tracing::Level::TRACE),
        };
        // Working out the object's name means parsing its JSON: only when the line is emitted.
        if enabled {
            let object = sink
                .object
                .get_or_insert_with(|| object_ref(&sink.object_json))
                .clone();
            let (plugin, version) = (&sink.plugin, &sink.version);
            match level {
                log::Level::Error => tracing::error!(%plugin, %version, %object, "{message}"),
                log::Level::Warn => tracing::warn!(%plugin, %version, %object, "{message}"),
                log::Level::Info => tracing::info!(%plugin, %version, %object, "{message}"),
                log::Level::Debug => tracing::debug!(%plugin, %version, %object, "{message}"),
                log::Level::Trace => tracing::trace!(%plugin, %version, %object, "{message}"),
            }
        }
        sink.lines.push((level, message));
    }
}

/// Granted only to plugins whose WasmProvider asks for it; implemented on the Docker engine,
/// scoped to what was created for this plugin.
impl container_runtime::Host for HostState {
    async fn create_network(
        &mut self,
        name: String,
    ) -> Result<String, container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.create_network(&self.log.plugin, &name)
            .await
            .map_err(to_wit)
    }
    async fn remove_network(
        &mut self,
        name: String,
    ) -> Result<(), container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.remove_network(&self.log.plugin, &name)
            .await
            .map_err(to_wit)
    }
    async fn create(
        &mut self,
        spec: container_runtime::ContainerSpec,
    ) -> Result<String, container_runtime::RuntimeError> {
        let rt = self.docker()?;
        let spec = cr::ContainerSpec {
            name: spec.name,
            image: spec.image,
            command: spec.command,
            env: spec.env,
            labels: spec.labels,
            network: spec.network,
            ports: spec
                .ports
                .into_iter()
                .map(|p| cr::PortMapping {
                    container_port: p.container_port,
                    host_port: p.host_port,
                })
                .collect(),
            privileged: spec.privileged,
        };
        rt.create(&self.log.plugin, &self.container_grant, spec)
            .await
            .map_err(to_wit)
    }
    async fn start(&mut self, name: String) -> Result<(), container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.start(&self.log.plugin, &name).await.map_err(to_wit)
    }
    async fn inspect(
        &mut self,
        name: String,
    ) -> Result<container_runtime::ContainerInfo, container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.inspect(&self.log.plugin, &name)
            .await
            .map(info_to_wit)
            .map_err(to_wit)
    }
    async fn exec(
        &mut self,
        name: String,
        command: Vec<String>,
    ) -> Result<container_runtime::ExecOutput, container_runtime::RuntimeError> {
        let rt = self.docker()?;
        let out = rt
            .exec(&self.log.plugin, &name, command)
            .await
            .map_err(to_wit)?;
        Ok(container_runtime::ExecOutput {
            exit_code: out.exit_code,
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }
    async fn stop(&mut self, name: String) -> Result<(), container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.stop(&self.log.plugin, &name).await.map_err(to_wit)
    }
    async fn remove(&mut self, name: String) -> Result<(), container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.remove(&self.log.plugin, &name).await.map_err(to_wit)
    }
    async fn list(
        &mut self,
        labels: Vec<(String, String)>,
    ) -> Result<Vec<container_runtime::ContainerInfo>, container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.list(&self.log.plugin, labels)
            .await
            .map(|v| v.into_iter().map(info_to_wit).collect())
            .map_err(to_wit)
    }
}

use crate::capabilities::container_runtime as cr;

fn to_wit(e: cr::RuntimeError) -> container_runtime::RuntimeError {
    match e {
        cr::RuntimeError::NotFound(m) => container_runtime::RuntimeError::NotFound(m),
        cr::RuntimeError::Unavailable(m) => container_runtime::RuntimeError::Unavailable(m),
        cr::RuntimeError::Invalid(m) => container_runtime::RuntimeError::Invalid(m),
        cr::RuntimeError::Other(m) => container_runtime::RuntimeError::Other(m),
    }
}

fn info_to_wit(i: cr::ContainerInfo) -> container_runtime::ContainerInfo {
    container_runtime::ContainerInfo {
        id: i.id,
        name: i.name,
        running: i.running,
        labels: i.labels,
        addresses: i.addresses,
        ports: i
            .ports
            .into_iter()
            .map(|p| container_runtime::PortMapping {
                container_port: p.container_port,
                host_port: p.host_port,
            })
            .collect(),
    }
}

/// Granted only to the in-memory provider; implemented with the simulated clusters.
impl sim_cloud::Host for HostState {
    fn ensure_vm(
        &mut self,
        cluster: String,
        name: String,
        bootstrap_data: String,
    ) -> Result<sim_cloud::Vm, String> {
        let vm = self
            .sim()?
            .ensure_vm(&cluster, &name, &bootstrap_data)
            .map_err(|e| e.to_string())?;
        Ok(sim_cloud::Vm {
            name: vm.name,
            provider_id: vm.provider_id,
            running: vm.running,
            addresses: vm.addresses,
        })
    }
    fn delete_vm(&mut self, cluster: String, name: String) -> Result<bool, String> {
        Ok(self.sim()?.delete_vm(&cluster, &name))
    }
    fn ensure_api_server(&mut self, cluster: String) -> Result<sim_cloud::ApiServer, String> {
        let (host, port) = self
            .sim()?
            .ensure_api_server(&cluster)
            .map_err(|e| e.to_string())?;
        Ok(sim_cloud::ApiServer { host, port })
    }
    fn delete_api_server(&mut self, cluster: String) -> Result<bool, String> {
        Ok(self.sim()?.delete_api_server(&cluster))
    }
}

impl HostState {
    /// The Docker engine, shared by the process (an `Arc`, so the call can hold it across awaits).
    fn docker(
        &self,
    ) -> Result<std::sync::Arc<cr::ContainerRuntime>, container_runtime::RuntimeError> {
        self.services.container_runtime().map_err(to_wit)
    }

    fn sim(&self) -> Result<&crate::capabilities::sim_cloud::SimCloud, String> {
        self.services.sim_cloud.get().map(|s| &**s).ok_or_else(|| {
            "the simulated cloud is not running in this host (capw up and capw run start it)"
                .to_string()
        })
    }
}
