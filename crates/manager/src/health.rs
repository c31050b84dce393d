//! The host's `/healthz`, `/readyz` and `/metrics`, served from the start of the process: a
//! standby waiting for the Lease answers its probes and reports `capw_leader 0`, as a
//! controller-runtime manager does before it leads.

use crate::ManagerError;
use capw_reconcile::metrics::{METRICS_CONTENT_TYPE, Metrics};
use std::net::SocketAddr;
use std::sync::Arc;

/// Serves the endpoints on `addr` until the task is aborted; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), ManagerError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ManagerError::Metrics { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ManagerError::Metrics { addr, source })?;
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let m = metrics.clone();
                async move { ([("content-type", METRICS_CONTENT_TYPE)], m.render()) }
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route("/readyz", axum::routing::get(|| async { "ok" }));
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the metrics endpoint stopped");
        }
    });
    Ok((bound, task))
}
