//! The Cluster API provider contract as code: which contract a provider kind implements, every
//! field path core reads from provider objects or writes into them, per contract version
//! ([`fields`]), the reads through those paths ([`ProviderObject`]), and the condition types,
//! reasons and the one `Condition` setter ([`conditions`]). Controllers read and write contract
//! fields only through this module, so the paths are spelled once.

pub mod conditions;
pub mod fields;
mod object;
pub mod phases;

pub use object::{ProviderObject, endpoint, int, string};

/// Which contract a provider kind implements, from its CRD label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    V1Beta2,
    V1Beta1,
}
