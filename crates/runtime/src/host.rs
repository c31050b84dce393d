//! What a Store carries during one call: WASI with nothing granted, the resource limits, and the
//! capped log; and the host interfaces (`capw:host/*`) a plugin can be granted.

use super::bindings::types;
use super::limits::Limits;
use crate::capabilities::log::LogSink;
use wasmtime::StoreLimits;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// The per-call state.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limits: StoreLimits,
    pub log: LogSink,
    pub(crate) services: std::sync::Arc<super::Services>,
    /// What the plugin's grants say, per capability.
    pub(crate) grants: std::sync::Arc<crate::capabilities::Grants>,
}

impl HostState {
    pub fn new(
        limits: &Limits,
        plugin: &str,
        version: &str,
        object_json: String,
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
            log: LogSink::new(plugin, version, object_json, limits.log_bytes),
            services,
            grants: limits.grants.clone(),
        }
    }
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
