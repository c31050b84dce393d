//! What stops a long-running command: Ctrl-C (SIGINT), and SIGTERM, which is how Kubernetes
//! stops a Pod (a rolling update, a drain, a scale-down) and how a service manager stops a
//! service. Both mean the same clean stop: a leader releases its Lease, as controller-runtime's
//! signal handler and `LeaderElectionReleaseOnCancel` do.

use anyhow::Context as _;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// Both signals, listened for from creation on. Make it once per run: a signal only reaches a
/// listener made before it, and once one is made the default exit is gone for good, so a
/// signal between two listeners would be lost.
pub struct Stop {
    interrupt: Signal,
    terminate: Signal,
}

impl Stop {
    pub fn listen() -> anyhow::Result<Stop> {
        Ok(Stop {
            interrupt: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
        })
    }

    /// The next SIGINT or SIGTERM, logged by name (a Pod's log then says why it stopped).
    /// Cancel-safe: a `select!` may drop it and call again.
    pub async fn recv(&mut self) {
        let signal = tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        };
        tracing::info!(signal, "stopping");
    }
}
