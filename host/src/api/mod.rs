//! The API types the host owns, as Rust types; their CRDs are generated from these.

pub mod wasmprovider;
