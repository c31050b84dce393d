//! A TCP load balancer with health checks: the DockerCluster's load balancer container runs it
//! in front of the control-plane machines' API servers. Backends come from a file the
//! infrastructure provider rewrites as control-plane machines come and go (one `host:port` per
//! line); it is re-read every second. A backend takes connections while a TCP connect to it
//! succeeds.
//!
//! Every connection goes to one backend, the primary, for as long as it stays healthy; the
//! others stand by. Each capw control-plane machine serves its own store (there is no shared
//! etcd), so spreading clients over several would split the workload cluster between them: a
//! node agent registered in one, the management plane looking in another, a rollout waiting
//! forever for a Node it cannot see. When the primary fails, the first healthy standby takes
//! over and clients reconnect to it; node agents register their Nodes again within a
//! heartbeat.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, thiserror::Error)]
pub enum LbError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
}

pub struct Config {
    pub listen: String,
    pub backends_file: PathBuf,
    /// Backends given on the command line, used in addition to the file.
    pub backends: Vec<String>,
    pub check_interval: Duration,
}

struct State {
    /// The primary first, then the other healthy backends in order.
    order: RwLock<Vec<String>>,
}

/// The order connections try backends in: the current primary while it is healthy, else the
/// first healthy backend of the current order (a standby that was known before takes over ahead
/// of one the file just added, whatever their addresses sort as), else the first healthy one;
/// then the others.
fn order(current: &[String], healthy: &[String]) -> Vec<String> {
    let primary = current
        .iter()
        .find(|b| healthy.contains(b))
        .or(healthy.first())
        .cloned();
    primary
        .iter()
        .cloned()
        .chain(
            healthy
                .iter()
                .filter(|b| Some(*b) != primary.as_ref())
                .cloned(),
        )
        .collect()
}

fn configured(config: &Config) -> Vec<String> {
    let mut all = config.backends.clone();
    if let Ok(text) = std::fs::read_to_string(&config.backends_file) {
        all.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string),
        );
    }
    all.sort();
    all.dedup();
    all
}

async fn check(backends: Vec<String>) -> Vec<String> {
    let probes = backends.into_iter().map(|b| async move {
        let ok = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(&b))
            .await
            .is_ok_and(|r| r.is_ok());
        ok.then_some(b)
    });
    futures::future::join_all(probes)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// A load balancer whose socket is bound: connections queue from here on, so callers announce
/// readiness only after [`Lb::bind`] returned, never before.
pub struct Lb {
    listener: TcpListener,
    config: Config,
}

impl Lb {
    pub async fn bind(config: Config) -> Result<Self, LbError> {
        let listener =
            TcpListener::bind(&config.listen)
                .await
                .map_err(|source| LbError::Listen {
                    addr: config.listen.clone(),
                    source,
                })?;
        Ok(Self { listener, config })
    }

    /// The bound address: with port 0 in `listen`, the one the kernel picked.
    pub fn local_addr(&self) -> Result<std::net::SocketAddr, LbError> {
        self.listener
            .local_addr()
            .map_err(|source| LbError::Listen {
                addr: self.config.listen.clone(),
                source,
            })
    }

    /// Serves until the process ends.
    pub async fn serve(self) {
        serve(self.listener, self.config).await
    }
}

async fn serve(listener: TcpListener, config: Config) {
    // One check before the first accept: a client that connects right after the banner is
    // served by a healthy backend instead of being closed for want of one. Connections queue in
    // the backlog meanwhile.
    let first = check(configured(&config)).await;
    tracing::info!(backends = ?first, "healthy backends");
    let state = Arc::new(State {
        order: RwLock::new(order(&[], &first)),
    });
    {
        let state = state.clone();
        tokio::spawn(async move {
            let mut last = first;
            loop {
                tokio::time::sleep(config.check_interval).await;
                let healthy = check(configured(&config)).await;
                if healthy != last {
                    tracing::info!(backends = ?healthy, "healthy backends changed");
                    last = healthy.clone();
                }
                let mut current = state.order.write().unwrap_or_else(|p| p.into_inner());
                let next = order(&current, &healthy);
                if next.first() != current.first() {
                    tracing::info!(primary = ?next.first(), "primary backend changed");
                }
                *current = next;
            }
        });
    }
    loop {
        let Ok((mut client, peer)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let order = state
                .order
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if order.is_empty() {
                tracing::debug!(%peer, "no healthy backend; closing the connection");
                return;
            }
            // A primary that fails between checks: the next one serves this connection.
            for backend in &order {
                if let Ok(Ok(mut upstream)) =
                    tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(backend)).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    return;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::order;

    #[test]
    fn the_primary_stays_while_healthy_and_the_first_healthy_takes_over() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        // A new backend that sorts first does not take over.
        assert_eq!(order(&s(&["b"]), &s(&["a", "b"])), s(&["b", "a"]));
        // The primary gone: the first healthy one.
        assert_eq!(order(&s(&["b"]), &s(&["a", "c"])), s(&["a", "c"]));
        assert_eq!(order(&[], &s(&["c", "d"])), s(&["c", "d"]));
        assert!(order(&s(&["a"]), &[]).is_empty());
        // The primary gone while a backend was added: the standby takes over, not the new
        // backend that sorts before it.
        assert_eq!(order(&s(&["p", "s"]), &s(&["n", "s"])), s(&["s", "n"]));
    }
}
