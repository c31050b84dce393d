//! Changes seen by one reflector, handed to every controller that subscribed. A subscriber
//! hears of a change only after the reflector's store has it, so a reconcile it triggers reads
//! the cache at least as new as the change.

use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

pub struct Fanout<K> {
    subscribers: Mutex<Vec<UnboundedSender<Arc<K>>>>,
}

impl<K> Default for Fanout<K> {
    fn default() -> Self {
        Fanout {
            subscribers: Mutex::new(vec![]),
        }
    }
}

impl<K> Fanout<K> {
    /// Every change from now on.
    pub fn subscribe(&self) -> UnboundedReceiver<Arc<K>> {
        let (tx, rx) = unbounded_channel();
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tx);
        rx
    }

    /// Hands `obj` to every subscriber still listening.
    pub fn send(&self, obj: &Arc<K>) {
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|tx| tx.send(obj.clone()).is_ok());
    }
}
