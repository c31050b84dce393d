//! kube-controller-manager's token cleaner: a bootstrap-token Secret is deleted once its
//! `expiration` has passed, so an expired token is gone, not just refused. The authenticator
//! refuses it from the moment it expires (`crate::bootstrap_token::authenticates`); this sweep
//! runs every resync.

use super::{ControllerConfig, delete};
use crate::bootstrap_token::{NAMESPACE, expired};
use crate::core::{Core, Propagation};
use crate::meta;
use crate::store::ObjKey;
use std::sync::Arc;

/// Deletes every expired bootstrap-token Secret.
pub(crate) async fn sweep(core: &Core, now: jiff::Timestamp) {
    let (secrets, _) = core.store.list("/secrets", Some(NAMESPACE));
    for s in secrets.iter().filter(|s| expired(s, now)) {
        let key = ObjKey::new("/secrets", NAMESPACE, meta::str_field(s, "name"));
        if let Err(e) = delete(core, &key, Propagation::Background).await {
            tracing::warn!(secret = %key.name, error = %e, "the token cleaner could not delete an expired bootstrap token");
        }
    }
}

pub async fn run(core: Arc<Core>, config: ControllerConfig) {
    let mut tick = tokio::time::interval(config.resync.max(std::time::Duration::from_secs(1)));
    loop {
        tick.tick().await;
        sweep(&core, jiff::Timestamp::now()).await;
    }
}
