//! What every controller of capw shares, below the core controllers, the provider driver and the
//! plugin runtime's own WasmProvider controller: the reconcile skeleton, Events, backoff,
//! provider object resolution and watches, the change fan-out, relevance filters, kubeconfig
//! checks, the pace of progress-only status writes, the per-cluster index and workload cluster
//! clients, and the metrics registry.

pub mod backoff;
pub mod by_cluster;
pub mod connect_to;
pub mod events;
pub mod expectations;
pub mod external;
pub mod fanout;
pub mod kubeconfig;
pub mod metrics;
pub mod pace;
pub mod relevance;
pub mod remote;
pub mod skeleton;
pub mod trim;
