//! How a core reconcile ends when it does not succeed.

use capw_reconcile::skeleton::{Failure, finalizer_wait};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    External(#[from] capw_reconcile::external::ExternalError),
    /// Not a failure: an ordered step (deletion, mostly) waits for something to go away.
    #[error("{reason}: {message}")]
    Waiting {
        reason: &'static str,
        message: String,
        after: Duration,
    },
    /// An object is in a state core cannot act on; the message names the object and field.
    #[error("{0}")]
    Invalid(String),
    #[error("finalizer: {0}")]
    Finalizer(Box<kube::runtime::finalizer::Error<ReconcileError>>),
}

impl ReconcileError {
    pub fn waiting(reason: &'static str, message: String, after: Duration) -> Self {
        ReconcileError::Waiting {
            reason,
            message,
            after,
        }
    }

    /// The requeue delay when this is a wait rather than a failure.
    pub fn wait_time(&self) -> Option<Duration> {
        Failure::wait_time(self)
    }
}

impl Failure for ReconcileError {
    fn wait_time(&self) -> Option<Duration> {
        match self {
            ReconcileError::Waiting { after, .. } => Some(*after),
            ReconcileError::Finalizer(f) => finalizer_wait(f),
            _ => None,
        }
    }

    fn wait_reason(&self) -> &'static str {
        match self {
            ReconcileError::Waiting { reason, .. } => reason,
            _ => "waiting",
        }
    }

    fn finalizer(e: kube::runtime::finalizer::Error<Self>) -> Self {
        ReconcileError::Finalizer(Box::new(e))
    }
}
