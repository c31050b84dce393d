//! Conformance tests of the embedded API server against a real server over HTTPS, following
//! the checklist of `apiserver-spec.md` §5 (numbers in test names refer to it).

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod harness;

mod a_discovery;
mod b_crud;
mod c_patch;
mod d_status;
mod e_list;
mod f_watch;
mod g_delete;
mod h_crd;
mod i_builtins;
mod j_faults;
mod k_persistence;
mod l_clients;
mod m_fidelity;
