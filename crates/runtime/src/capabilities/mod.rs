//! The host interfaces (`capw:host/*`) a plugin can be granted, one folder each: the backend
//! in its `mod.rs`, the WIT glue (the generated `Host` trait on the call's state) in `glue.rs`.
//!
//! [`TABLE`] registers them: its row is the only place outside a capability's folder that names
//! it. The runtime links into a Store only the rows the plugin's WasmProvider grants.

pub mod container_runtime;
pub mod log;
pub mod sim_cloud;

use crate::bindings;
use crate::host::HostState;
use wasmtime::component::{HasSelf, Linker};

/// A host interface a plugin may be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Capability {
    /// `capw:host/log`, granted to every plugin.
    Log,
    /// `capw:host/container-runtime`.
    ContainerRuntime,
    /// `capw:host/sim-cloud`.
    SimCloud,
}

/// One registered capability.
pub struct Registration {
    pub capability: Capability,
    /// The short name plugin manifests and `spec.capabilities` use.
    pub name: &'static str,
    /// The WIT interface a component imports for it.
    pub interface: &'static str,
    /// Adds its functions to a Store's linker.
    pub link: fn(&mut Linker<HostState>) -> wasmtime::Result<()>,
}

/// Every capability the host offers.
pub const TABLE: &[Registration] = &[
    Registration {
        capability: Capability::Log,
        name: "log",
        interface: "capw:host/log@0.2.0",
        link: |l| bindings::log::add_to_linker::<HostState, HasSelf<HostState>>(l, |s| s),
    },
    Registration {
        capability: Capability::ContainerRuntime,
        name: "container-runtime",
        interface: "capw:host/container-runtime@0.2.0",
        link: |l| {
            bindings::container_runtime::add_to_linker::<HostState, HasSelf<HostState>>(l, |s| s)
        },
    },
    Registration {
        capability: Capability::SimCloud,
        name: "sim-cloud",
        interface: "capw:host/sim-cloud@0.2.0",
        link: |l| bindings::sim_cloud::add_to_linker::<HostState, HasSelf<HostState>>(l, |s| s),
    },
];

impl Capability {
    fn registration(self) -> &'static Registration {
        // Every variant has a row (the table test holds it); the first row is the fallback only
        // to keep this total without a panic.
        TABLE
            .iter()
            .find(|r| r.capability == self)
            .unwrap_or(&TABLE[0])
    }

    /// The WIT interface name a component imports for this capability.
    pub fn interface(self) -> &'static str {
        self.registration().interface
    }

    /// Parses the short names used in plugin manifests (`log`, `container-runtime`, `sim-cloud`).
    pub fn parse(name: &str) -> Option<Capability> {
        TABLE.iter().find(|r| r.name == name).map(|r| r.capability)
    }

    /// The short name.
    pub fn name(self) -> &'static str {
        self.registration().name
    }

    /// The capability a component's import names, if it is one.
    pub fn of_interface(interface: &str) -> Option<Capability> {
        TABLE
            .iter()
            .find(|r| r.interface == interface)
            .map(|r| r.capability)
    }

    /// Adds its functions to a Store's linker.
    pub fn link(self, l: &mut Linker<HostState>) -> wasmtime::Result<()> {
        (self.registration().link)(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capability_has_one_row_and_round_trips() {
        for c in [
            Capability::Log,
            Capability::ContainerRuntime,
            Capability::SimCloud,
        ] {
            assert_eq!(
                TABLE.iter().filter(|r| r.capability == c).count(),
                1,
                "{c:?}"
            );
            assert_eq!(Capability::parse(c.name()), Some(c));
            assert_eq!(Capability::of_interface(c.interface()), Some(c));
        }
        assert_eq!(Capability::parse("network"), None);
    }
}
