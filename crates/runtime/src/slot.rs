//! The active version of one plugin, for hot reload: an atomic swap to a validated new
//! version, calls in flight finishing on the version they started with, a bake window that
//! rolls back to the previous version when the new one fails too often, and quarantine of
//! failed digests.

use super::plugin::{CallError, ClusterStatus, Context, DeleteStatus, MachineStatus, Plugin};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Why a new version was not swapped in.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SwapError {
    /// This digest failed before; it stays out until the file changes.
    #[error("digest {0} is quarantined after a rollback; change the component to try again")]
    Quarantined(String),
    /// The new version is not a drop-in replacement for the active one.
    #[error("not compatible with the active version: {0}")]
    Incompatible(String),
}

/// When to give up on a new version.
#[derive(Debug, Clone)]
pub struct Rollout {
    /// How long a new version is watched after a swap.
    pub bake: Duration,
    /// Failed calls (traps, timeouts, invalid results) over calls that triggers a rollback...
    pub max_failure_rate: f64,
    /// ...once at least this many calls were made.
    pub min_calls: u64,
}

impl Default for Rollout {
    fn default() -> Self {
        Rollout {
            bake: Duration::from_secs(60),
            max_failure_rate: 0.5,
            min_calls: 3,
        }
    }
}

/// A rollback that happened.
#[derive(Debug, Clone, PartialEq)]
pub struct RolledBack {
    pub from_version: String,
    pub from_digest: String,
    pub to_version: String,
    pub reason: String,
}

pub struct Slot {
    current: RwLock<Arc<Plugin>>,
    previous: Mutex<Vec<Arc<Plugin>>>,
    quarantined: Mutex<HashSet<String>>,
    baking_until: Mutex<Option<Instant>>,
    rollout: Rollout,
    rollbacks: Mutex<Vec<RolledBack>>,
}

/// Versions kept compiled for instant rollback.
const KEEP_PREVIOUS: usize = 2;

fn compatible(old: &Plugin, new: &Plugin) -> Result<(), SwapError> {
    let (o, n) = (&old.metadata, &new.metadata);
    if o.name != n.name {
        return Err(SwapError::Incompatible(format!(
            "plugin name changed from {:?} to {:?}",
            o.name, n.name
        )));
    }
    if o.provider_type != n.provider_type {
        return Err(SwapError::Incompatible("provider type changed".into()));
    }
    if o.contract_version != n.contract_version {
        return Err(SwapError::Incompatible(format!(
            "contract changed from {} to {}",
            o.contract_version, n.contract_version
        )));
    }
    for k in &o.kinds {
        if !n
            .kinds
            .iter()
            .any(|x| x.group == k.group && x.kind == k.kind)
        {
            return Err(SwapError::Incompatible(format!(
                "no longer serves {}.{}",
                k.kind, k.group
            )));
        }
    }
    Ok(())
}

impl Slot {
    pub fn new(plugin: Plugin, rollout: Rollout) -> Self {
        Slot {
            current: RwLock::new(Arc::new(plugin)),
            previous: Mutex::new(vec![]),
            quarantined: Mutex::new(HashSet::new()),
            baking_until: Mutex::new(None),
            rollout,
            rollbacks: Mutex::new(vec![]),
        }
    }

    /// The version new calls use. A caller keeps its `Arc` for the whole call, so a swap never
    /// changes the version under a running call.
    pub fn current(&self) -> Arc<Plugin> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn previous_digests(&self) -> Vec<String> {
        self.previous
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|p| p.digest.clone())
            .collect()
    }

    pub fn is_quarantined(&self, digest: &str) -> bool {
        self.quarantined
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(digest)
    }

    pub fn rollbacks(&self) -> Vec<RolledBack> {
        self.rollbacks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Swaps in a validated new version and starts its bake window.
    pub fn swap(&self, new: Plugin) -> Result<(), SwapError> {
        if self.is_quarantined(&new.digest) {
            return Err(SwapError::Quarantined(new.digest.clone()));
        }
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        if cur.digest == new.digest {
            // The same component under changed grants or limits: not a new version to bake or
            // roll back to, but the new grant holds from the next call on.
            if cur.grants != new.grants || cur.limits != new.limits {
                new.counters.carry_from(&cur.counters);
                *cur = Arc::new(new);
            }
            return Ok(());
        }
        compatible(&cur, &new)?;
        let old = std::mem::replace(&mut *cur, Arc::new(new));
        drop(cur);
        let mut prev = self.previous.lock().unwrap_or_else(|p| p.into_inner());
        prev.retain(|p| p.digest != old.digest);
        prev.insert(0, old);
        prev.truncate(KEEP_PREVIOUS);
        *self.baking_until.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Instant::now() + self.rollout.bake);
        Ok(())
    }

    /// Checks the version under bake; rolls back to the previous one when it fails too often.
    fn observe(&self) -> Option<RolledBack> {
        let mut baking = self.baking_until.lock().unwrap_or_else(|p| p.into_inner());
        let until = (*baking)?;
        if Instant::now() > until {
            *baking = None;
            return None;
        }
        let cur = self.current();
        let c = &cur.counters;
        let calls = c.calls.load(Ordering::Relaxed);
        let failed = c.traps.load(Ordering::Relaxed)
            + c.timeouts.load(Ordering::Relaxed)
            + c.errors.load(Ordering::Relaxed);
        if calls < self.rollout.min_calls
            || (failed as f64) / (calls as f64) <= self.rollout.max_failure_rate
        {
            return None;
        }
        let back = {
            let mut prev = self.previous.lock().unwrap_or_else(|p| p.into_inner());
            if prev.is_empty() {
                return None;
            }
            prev.remove(0)
        };
        *baking = None;
        let rb = RolledBack {
            from_version: cur.metadata.version.clone(),
            from_digest: cur.digest.clone(),
            to_version: back.metadata.version.clone(),
            reason: format!("{failed} of {calls} calls failed during the bake window"),
        };
        self.quarantined
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(cur.digest.clone());
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = back;
        tracing::warn!(plugin = %cur.metadata.name, from = %rb.from_version, to = %rb.to_version, reason = %rb.reason, "rolled back");
        self.rollbacks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(rb.clone());
        Some(rb)
    }

    /// Calls the current version; returns the version that answered with the result.
    pub async fn reconcile_machine(
        &self,
        ctx: &Context,
    ) -> (String, Result<MachineStatus, CallError>) {
        let p = self.current();
        let r = p.reconcile_machine(ctx).await;
        self.observe();
        (p.metadata.version.clone(), r)
    }

    pub async fn delete_machine(&self, ctx: &Context) -> (String, Result<DeleteStatus, CallError>) {
        let p = self.current();
        let r = p.delete_machine(ctx).await;
        self.observe();
        (p.metadata.version.clone(), r)
    }

    pub async fn reconcile_cluster(
        &self,
        ctx: &Context,
    ) -> (String, Result<ClusterStatus, CallError>) {
        let p = self.current();
        let r = p.reconcile_cluster(ctx).await;
        self.observe();
        (p.metadata.version.clone(), r)
    }

    pub async fn delete_cluster(&self, ctx: &Context) -> (String, Result<DeleteStatus, CallError>) {
        let p = self.current();
        let r = p.delete_cluster(ctx).await;
        self.observe();
        (p.metadata.version.clone(), r)
    }

    pub async fn reconcile_bootstrap(
        &self,
        ctx: &Context,
    ) -> (String, Result<super::plugin::BootstrapStatus, CallError>) {
        let p = self.current();
        let r = p.reconcile_bootstrap(ctx).await;
        self.observe();
        (p.metadata.version.clone(), r)
    }

    pub async fn delete_bootstrap(
        &self,
        ctx: &Context,
    ) -> (String, Result<DeleteStatus, CallError>) {
        let p = self.current();
        let r = p.delete_bootstrap(ctx).await;
        self.observe();
        (p.metadata.version.clone(), r)
    }

    pub async fn reconcile_control_plane(
        &self,
        ctx: &Context,
    ) -> (String, Result<super::plugin::ControlPlaneStatus, CallError>) {
        let p = self.current();
        let r = p.reconcile_control_plane(ctx).await;
        self.observe();
        (p.metadata.version.clone(), r)
    }

    pub async fn delete_control_plane(
        &self,
        ctx: &Context,
    ) -> (String, Result<DeleteStatus, CallError>) {
        let p = self.current();
        let r = p.delete_control_plane(ctx).await;
        self.observe();
        (p.metadata.version.clone(), r)
    }
}
