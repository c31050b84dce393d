//! The plugin runtime: one wasmtime engine for the process, a compiled-artifact cache on disk,
//! and a fresh, limited Store for every call into a provider component.
//!
//! `engine` builds the engine (pooling allocator with fallback, epoch interruption, async only),
//! `cache` keeps compiled artifacts, `limits` holds the per-call limits, `host` is the state a
//! Store carries and the host interfaces a plugin may be granted, `plugin` validates a component
//! against its grants and calls it, and `slot` keeps the active version of a plugin for hot
//! reload and rollback.

pub(crate) mod bindings;
pub mod cache;
pub mod capabilities;
pub mod dropin;
pub mod engine;
pub mod host;
pub mod limits;
pub mod logging;
pub mod plugin;
pub mod slot;
pub mod trust;
pub mod wasmprovider;

pub use limits::Limits;

/// The contract's types (generated from `wit/`), for providers compiled into the host.
pub mod contract {
    pub use super::bindings::bootstrap_config::{BootstrapData, BootstrapFormat, BootstrapStatus};
    pub use super::bindings::control_plane::{ControlPlaneStatus, MachineRequest, ReplicaCounts};
    pub use super::bindings::infrastructure_cluster::ClusterStatus;
    pub use super::bindings::infrastructure_machine::MachineStatus;
    pub use super::bindings::log::Level;
    pub use super::bindings::plugin_info::{
        ControlPlaneMachines, KindRef, KindRole, PluginMetadata, ProviderType, ServedKind,
    };
    pub use super::bindings::types::{
        Address, ApiEndpoint, Common, Condition, ConditionStatus, Context, DeleteStatus,
        FailureDomain, ProviderError, Retry,
    };
    pub use super::plugin::{FromResponse, Request, Response, Transport};
}
pub use plugin::Context;
pub use plugin::{CallError, Plugin, PluginError};

pub use crate::capabilities::Capability;

/// What every plugin of the process shares: the capabilities' backends, and each plugin's fair
/// share of concurrent calls.
#[derive(Default)]
pub struct Services {
    pub backends: crate::capabilities::Backends,
    /// Per plugin, the calls that may run at once.
    shares:
        std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Semaphore>>>,
}

/// Calls of one plugin that run at once; more wait their turn. High enough that a provider
/// whose calls wait on the engine (container create, exec) still works on several machines at
/// once, low enough that one plugin cannot hold every worker thread.
pub const CALLS_PER_PLUGIN: usize = 8;

impl Services {
    pub fn call_share(&self, plugin: &str) -> std::sync::Arc<tokio::sync::Semaphore> {
        let mut shares = self.shares.lock().unwrap_or_else(|p| p.into_inner());
        // Looked up before inserting: a call allocates nothing once its plugin has a share.
        if let Some(s) = shares.get(plugin) {
            return s.clone();
        }
        let s = std::sync::Arc::new(tokio::sync::Semaphore::new(CALLS_PER_PLUGIN));
        shares.insert(plugin.to_string(), s.clone());
        s
    }
}

/// The engine and the artifact cache, shared by every plugin of the process.
pub struct Runtime {
    pub engine: engine::RuntimeEngine,
    pub cache: cache::ArtifactCache,
}

impl Runtime {
    /// Builds the engine and opens the artifact cache under `cache_dir`.
    pub fn new(cache_dir: &std::path::Path) -> Result<Runtime, engine::EngineError> {
        let engine = engine::build()?;
        let cache = cache::ArtifactCache::new(cache_dir, &engine.engine);
        Ok(Runtime { engine, cache })
    }
}

/// The active plugins, by WasmProvider name.
#[derive(Default)]
pub struct Registry {
    slots: std::sync::RwLock<std::collections::BTreeMap<String, std::sync::Arc<slot::Slot>>>,
    /// `Kind.group` → the plugin that serves it, when an admin moved it with `takeOverKinds`.
    owners: std::sync::RwLock<std::collections::BTreeMap<String, String>>,
}

impl Registry {
    pub fn get(&self, name: &str) -> Option<std::sync::Arc<slot::Slot>> {
        self.slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub fn insert(&self, name: &str, slot: std::sync::Arc<slot::Slot>) {
        self.slots
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), slot);
    }

    /// Gives `kind` (`Kind.group`) to `plugin`, whoever served it before.
    pub fn take_over(&self, kind: &str, plugin: &str) {
        self.owners
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(kind.to_string(), plugin.to_string());
    }

    /// The plugin a kind was moved to, if it was.
    pub fn owner(&self, kind: &str) -> Option<String> {
        self.owners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(kind)
            .cloned()
    }

    pub fn remove(&self, name: &str) -> Option<std::sync::Arc<slot::Slot>> {
        self.owners
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, owner| owner != name);
        self.slots
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name)
    }

    /// The role the serving plugin's active version declares for `kind` in `group`: the plugin
    /// the kind was moved to, or else the first that declares it.
    pub fn declared_role(&self, group: &str, kind: &str) -> Option<plugin::KindRole> {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        let owner = self.owner(&format!("{kind}.{group}"));
        slots
            .iter()
            .filter(|(name, _)| owner.as_ref().is_none_or(|o| o == *name))
            .find_map(|(_, slot)| {
                slot.current()
                    .metadata
                    .kinds
                    .iter()
                    .find(|k| k.group == group && k.kind == kind)
                    .map(|k| k.role.clone())
            })
    }

    pub fn names(&self) -> Vec<String> {
        self.slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }
}
