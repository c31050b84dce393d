//! Per-call limits of a plugin (defaults from DESIGN.md §5; a WasmProvider may lower them).

use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Wall-clock deadline of `reconcile` and `delete`.
    pub reconcile_timeout: Duration,
    /// Wall-clock deadline of `metadata`.
    pub metadata_timeout: Duration,
    /// Bytes of one linear memory.
    pub memory_bytes: usize,
    pub tables: usize,
    pub instances: usize,
    pub memories: usize,
    /// Bytes the guest may pass to the host in one host call.
    pub hostcall_bytes: usize,
    /// Live resource handles per call.
    pub handles: usize,
    /// Bytes of log text kept per call; the rest is dropped.
    pub log_bytes: usize,
    /// Bytes of one result (status patch, CRD text, ...); larger results are refused.
    pub result_bytes: usize,
    /// What the plugin's grants say, per capability (`container-runtime`'s allow-list, say).
    /// Shared, so the per-call Store copies a pointer, not the options.
    pub grants: std::sync::Arc<crate::capabilities::Grants>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            reconcile_timeout: Duration::from_secs(30),
            metadata_timeout: Duration::from_secs(5),
            memory_bytes: 128 << 20,
            tables: 20,
            instances: 20,
            memories: 4,
            hostcall_bytes: 8 << 20,
            handles: 1000,
            log_bytes: 64 << 10,
            result_bytes: 1 << 20,
            grants: Default::default(),
        }
    }
}
