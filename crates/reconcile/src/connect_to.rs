//! curl's `--connect-to`, read from a file: a workload API named `HOST:PORT` (in its
//! kubeconfig and its Cluster's endpoint) is dialled at `ADDR:PORT` instead, while TLS still
//! verifies the certificate for `HOST`. A simulated cloud (`capw sim ec2`) writes the file, so
//! that an endpoint only its emulator knows (a load balancer's DNS name) reaches the simulated
//! control plane without touching the system's resolver.
//!
//! Every workload client lookup asks for its route, so the file is parsed only when its
//! modification time changes (a `stat` per lookup); routes the simulation adds later apply to
//! the next client. A line that is not `HOST:PORT:ADDR:PORT` is skipped with a warning naming
//! the file and the line.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// `(host lowercased, port)` to `(addr, port)`.
type Routes = HashMap<(String, u16), (String, u16)>;

/// The routes as last parsed, with the file's modification time then.
type Parsed = Option<(SystemTime, Arc<Routes>)>;

/// Where routes are read from; the default has none.
#[derive(Debug, Clone, Default)]
pub struct ConnectTo {
    file: Option<PathBuf>,
    parsed: Arc<Mutex<Parsed>>,
}

impl ConnectTo {
    pub fn file(path: PathBuf) -> Self {
        ConnectTo {
            file: Some(path),
            parsed: Arc::default(),
        }
    }

    /// Where `host:port` is dialled, if the file routes it elsewhere.
    pub fn route(&self, host: &str, port: u16) -> Option<(String, u16)> {
        self.routes()?
            .get(&(host.to_ascii_lowercase(), port))
            .cloned()
    }

    /// The file's routes, parsed again only when it changed. A missing file is no routes yet:
    /// the simulation writes it once it serves one.
    fn routes(&self) -> Option<Arc<Routes>> {
        let path = self.file.as_ref()?;
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
        let mut parsed = self.parsed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, routes)) = parsed.as_ref()
            && *at == modified
        {
            return Some(routes.clone());
        }
        let text = std::fs::read_to_string(path).ok()?;
        let mut routes = Routes::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .map(|(i, l)| (i, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        {
            match parse(line) {
                // The first line for a name wins, as curl's first matching --connect-to does.
                Some((from, to)) => {
                    routes.entry(from).or_insert(to);
                }
                None => {
                    tracing::warn!(file = %path.display(), line = i + 1, text = line, "not HOST:PORT:ADDR:PORT; skipped")
                }
            }
        }
        let routes = Arc::new(routes);
        *parsed = Some((modified, routes.clone()));
        Some(routes)
    }
}

fn parse(line: &str) -> Option<((String, u16), (String, u16))> {
    let mut parts = line.split(':');
    let (host, port, addr, to_port) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || host.is_empty() || addr.is_empty() {
        return None;
    }
    Some((
        (host.to_ascii_lowercase(), port.parse().ok()?),
        (addr.to_string(), to_port.parse().ok()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match_host_and_port_and_skip_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("routes");
        let c = ConnectTo::file(path.clone());
        assert_eq!(c.route("lb.example", 6443), None, "no file, no routes");
        std::fs::write(
            &path,
            "# comment\nnot a route\nlb.example:6443:127.0.0.1:41000\nother:6443:127.0.0.1:x\n",
        )
        .unwrap();
        assert_eq!(
            c.route("LB.example", 6443),
            Some(("127.0.0.1".into(), 41000))
        );
        assert_eq!(c.route("lb.example", 443), None);
        assert_eq!(c.route("other", 6443), None);
        assert_eq!(ConnectTo::default().route("lb.example", 6443), None);
        // A file replaced whole (as the simulation writes it, by rename) is read again.
        let next = dir.path().join("next");
        std::fs::write(&next, "lb.example:6443:127.0.0.1:42000\n").unwrap();
        let later = std::fs::metadata(&path).unwrap().modified().unwrap()
            + std::time::Duration::from_secs(1);
        std::fs::File::options()
            .write(true)
            .open(&next)
            .unwrap()
            .set_modified(later)
            .unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_eq!(
            c.route("lb.example", 6443),
            Some(("127.0.0.1".into(), 42000))
        );
    }
}
