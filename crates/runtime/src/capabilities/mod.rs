//! The host interfaces (`capw:host/*`) a plugin can be granted, one folder each: the backend
//! and its [`HostCapability`] in `mod.rs` (name, WIT interface, linker wiring, the grant's options
//! with their defaults and validation, what status shows of them), the WIT glue (the generated
//! `Host` trait on the call's state) in `glue.rs`.
//!
//! [`ALL`] registers them, one line each: it is the only place outside a capability's folder
//! that names it. The runtime links into a Store only the capabilities the plugin's WasmProvider
//! grants. A capability's per-plugin state travels in the call's [`Grants`], its process-wide
//! backend in the runtime's [`Backends`]; neither names a capability, so adding one changes
//! neither. Two things stay outside the folder: its WIT file in `wit/host/` (one WIT package,
//! which the guests' SDK builds against too) and, when its grant has options, their field on the
//! WasmProvider in `capw-api` (the CRD's schema is made there, below the runtime).

pub mod aws;
pub mod container_runtime;
pub mod log;
pub mod sim_cloud;

use crate::host::HostState;
use capw_api::wasmprovider::{WasmProviderSpec, WasmProviderStatus};
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use wasmtime::component::Linker;

/// A host interface a plugin may be granted.
pub trait HostCapability: Sync {
    /// The short name plugin manifests and `spec.capabilities` use.
    fn name(&self) -> &'static str;
    /// The WIT interface a component imports for it.
    fn interface(&self) -> &'static str;
    /// Adds its functions to a Store's linker.
    fn link(&self, linker: &mut Linker<HostState>) -> wasmtime::Result<()>;
    /// Reads its grant's options from the WasmProvider into the state each of the plugin's calls
    /// sees, defaults where the spec is silent; and says what in the spec is wrong, if anything,
    /// as `spec.FIELD: why` (the plugin is then refused, and status still shows the options). Called for every capability, granted or not, so a bad option is refused
    /// even before it is granted.
    fn grant(&self, _spec: &WasmProviderSpec, _grants: &mut Grants) -> Result<(), String> {
        Ok(())
    }
    /// Shows the options in force in status, when the capability is granted.
    fn show(&self, _grants: &Grants, _status: &mut WasmProviderStatus) {}
}

/// Every capability the host offers. Adding one is its folder and a line here.
pub static ALL: &[&dyn HostCapability] = &[
    &log::Log,
    &container_runtime::ContainerRuntimeCapability,
    &sim_cloud::SimCloudCapability,
    &aws::AwsCapability,
];

/// A granted capability, by its short name; ordered as [`ALL`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Capability(&'static str);

impl Ord for Capability {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.position(), self.0).cmp(&(other.position(), other.0))
    }
}

impl PartialOrd for Capability {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Capability {
    /// `capw:host/log`, granted to every plugin.
    pub const LOG: Capability = Capability(log::NAME);
    /// `capw:host/container-runtime`.
    pub const CONTAINER_RUNTIME: Capability = Capability(container_runtime::NAME);
    /// `capw:host/sim-cloud`.
    pub const SIM_CLOUD: Capability = Capability(sim_cloud::NAME);
    /// `capw:host/aws`.
    pub const AWS: Capability = Capability(aws::NAME);

    fn position(self) -> usize {
        ALL.iter()
            .position(|c| c.name() == self.0)
            .unwrap_or(ALL.len())
    }

    fn registration(self) -> Option<&'static dyn HostCapability> {
        ALL.iter().find(|c| c.name() == self.0).copied()
    }

    /// The WIT interface name a component imports for this capability.
    pub fn interface(self) -> &'static str {
        self.registration().map_or("", |c| c.interface())
    }

    /// Parses the short names used in plugin manifests (`log`, `container-runtime`, `sim-cloud`,
    /// `aws`).
    pub fn parse(name: &str) -> Option<Capability> {
        ALL.iter()
            .find(|c| c.name() == name)
            .map(|c| Capability(c.name()))
    }

    /// Every short name, for an error that lists them.
    pub fn known() -> Vec<&'static str> {
        ALL.iter().map(|c| c.name()).collect()
    }

    /// The short name.
    pub fn name(self) -> &'static str {
        self.0
    }

    /// The capability a component's import names, if it is one.
    pub fn of_interface(interface: &str) -> Option<Capability> {
        ALL.iter()
            .find(|c| c.interface() == interface)
            .map(|c| Capability(c.name()))
    }

    /// Adds its functions to a Store's linker.
    pub fn link(self, l: &mut Linker<HostState>) -> wasmtime::Result<()> {
        match self.registration() {
            Some(c) => c.link(l),
            None => Err(wasmtime::format_err!("no capability is named {}", self.0)),
        }
    }
}

/// Reads every capability's grant options from `spec` (see [`HostCapability::grant`]), and the
/// first thing wrong with them.
pub fn grants(spec: &WasmProviderSpec) -> (Grants, Option<String>) {
    let mut grants = Grants::default();
    let mut wrong = None;
    for c in ALL {
        if let Err(e) = c.grant(spec, &mut grants) {
            wrong.get_or_insert(e);
        }
    }
    (grants, wrong)
}

/// Shows in `status` the options in force of each capability in `granted`.
pub fn show(
    granted: &std::collections::BTreeSet<Capability>,
    grants: &Grants,
    status: &mut WasmProviderStatus,
) {
    for c in granted.iter().filter_map(|c| c.registration()) {
        c.show(grants, status);
    }
}

type AnyArc = Arc<dyn Any + Send + Sync>;

/// One value per type, for state whose type only its capability knows.
#[derive(Default, Clone)]
struct TypeMap(HashMap<TypeId, AnyArc>);

impl TypeMap {
    fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.0
            .get(&TypeId::of::<T>())
            .and_then(|v| v.clone().downcast::<T>().ok())
    }
}

/// A capability's per-plugin state: compared, so a changed grant reloads the plugin.
pub trait GrantState: Any + Send + Sync + std::fmt::Debug {
    fn same_as(&self, other: &dyn GrantState) -> bool;
}

impl<T: Any + Send + Sync + std::fmt::Debug + PartialEq> GrantState for T {
    fn same_as(&self, other: &dyn GrantState) -> bool {
        let other: &dyn Any = other;
        other.downcast_ref::<T>() == Some(self)
    }
}

/// What a plugin's grants say, per capability: each call's Store carries it.
#[derive(Default, Clone, Debug)]
pub struct Grants(HashMap<TypeId, Arc<dyn GrantState>>);

impl PartialEq for Grants {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .all(|(k, v)| other.0.get(k).is_some_and(|o| v.same_as(&**o)))
    }
}

impl Grants {
    /// Sets a capability's per-plugin state.
    pub fn insert<T: GrantState>(&mut self, state: T) {
        self.0.insert(TypeId::of::<T>(), Arc::new(state));
    }

    /// With a capability's per-plugin state set.
    pub fn with<T: GrantState>(mut self, state: T) -> Self {
        self.insert(state);
        self
    }

    /// A capability's per-plugin state; its default when none was set.
    pub fn get<T: GrantState + Default>(&self) -> Arc<T> {
        self.0
            .get(&TypeId::of::<T>())
            .and_then(|v| {
                let v: Arc<dyn Any + Send + Sync> = v.clone();
                v.downcast::<T>().ok()
            })
            .unwrap_or_default()
    }
}

/// The capabilities' process-wide backends (the Docker connection, the simulated cloud, the log
/// rate), shared by every plugin.
#[derive(Default)]
pub struct Backends(Mutex<TypeMap>);

impl Backends {
    /// Sets a backend, as the host does for one it starts itself (the simulated cloud).
    pub fn provide<T: Any + Send + Sync>(&self, backend: Arc<T>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.0.insert(TypeId::of::<T>(), backend);
    }

    /// A backend, if one was provided or made.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).get::<T>()
    }

    /// A backend, made from its default on first use.
    pub fn get_or_default<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        match self.get_or_try_init::<T, std::convert::Infallible>(|| Ok(T::default())) {
            Ok(b) => b,
            Err(never) => match never {},
        }
    }

    /// A backend, made on first use (so a host without Docker runs every other plugin); a
    /// failed attempt is tried again at the next use.
    pub fn get_or_try_init<T: Any + Send + Sync, E>(
        &self,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        if let Some(b) = self.get::<T>() {
            return Ok(b);
        }
        let made = Arc::new(make()?);
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Another call may have made one meanwhile: keep the first.
        if let Some(b) = map.get::<T>() {
            return Ok(b);
        }
        map.0.insert(TypeId::of::<T>(), made.clone());
        Ok(made)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capability_has_one_row_and_round_trips() {
        for c in [
            Capability::LOG,
            Capability::CONTAINER_RUNTIME,
            Capability::SIM_CLOUD,
            Capability::AWS,
        ] {
            assert_eq!(
                ALL.iter().filter(|r| r.name() == c.name()).count(),
                1,
                "{c:?}"
            );
            assert_eq!(Capability::parse(c.name()), Some(c));
            assert_eq!(Capability::of_interface(c.interface()), Some(c));
        }
        assert_eq!(Capability::parse("network"), None);
        let interfaces: std::collections::BTreeSet<_> = ALL.iter().map(|c| c.interface()).collect();
        assert_eq!(
            interfaces.len(),
            ALL.len(),
            "two capabilities share a WIT interface"
        );
    }

    #[test]
    fn capabilities_order_as_registered() {
        let set: std::collections::BTreeSet<_> = [
            Capability::SIM_CLOUD,
            Capability::LOG,
            Capability::CONTAINER_RUNTIME,
        ]
        .into();
        let names: Vec<_> = set.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["log", "container-runtime", "sim-cloud"]);
    }

    #[test]
    fn grants_and_backends_hold_one_value_per_type() {
        #[derive(Default, Debug, PartialEq)]
        struct Options(u8);
        let grants = Grants::default().with(Options(3));
        assert_eq!(*grants.get::<Options>(), Options(3));
        assert_eq!(*Grants::default().get::<Options>(), Options(0));
        assert_eq!(grants, Grants::default().with(Options(3)));
        assert_ne!(grants, Grants::default().with(Options(4)));
        assert_ne!(grants, Grants::default());

        let backends = Backends::default();
        assert!(backends.get::<Options>().is_none());
        let failed: Result<_, &str> = backends.get_or_try_init::<Options, _>(|| Err("down"));
        assert!(failed.is_err());
        let made = backends.get_or_try_init::<Options, &str>(|| Ok(Options(1)));
        assert_eq!(*made.unwrap(), Options(1));
        let kept = backends.get_or_try_init::<Options, &str>(|| Ok(Options(2)));
        assert_eq!(*kept.unwrap(), Options(1), "the first one made is kept");
    }
}
