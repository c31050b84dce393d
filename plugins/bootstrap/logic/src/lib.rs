//! `bootstrap`: the capw bootstrap provider. A CapwConfig becomes cloud-config (`write_files` and
//! `runcmd`, the subset infrastructure providers execute): control-plane machines start the
//! workload API with `capw apiserver`, every machine starts `capw node-agent`, and the data ends
//! by touching the bootstrap sentinel file.

mod provider;

pub use provider::Bootstrap;
