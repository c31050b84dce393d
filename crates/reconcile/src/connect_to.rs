//! curl's `--connect-to`, read from a file: a workload API named `HOST:PORT` (in its
//! kubeconfig and its Cluster's endpoint) is dialled at `ADDR:PORT` instead, while TLS still
//! verifies the certificate for `HOST`. A simulated cloud (`capw sim ec2`) writes the file, so
//! that an endpoint only its emulator knows (a load balancer's DNS name) reaches the simulated
//! control plane without touching the system's resolver.
//!
//! The file is read each time a client is built, so routes the simulation adds later apply to
//! the next client; a line that is not `HOST:PORT:ADDR:PORT` is skipped with a warning naming
//! the file and the line.

use std::path::PathBuf;

/// Where routes are read from; the default has none.
#[derive(Debug, Clone, Default)]
pub struct ConnectTo {
    file: Option<PathBuf>,
}

impl ConnectTo {
    pub fn file(path: PathBuf) -> Self {
        ConnectTo { file: Some(path) }
    }

    /// Where `host:port` is dialled, if the file routes it elsewhere.
    pub fn route(&self, host: &str, port: u16) -> Option<(String, u16)> {
        let path = self.file.as_ref()?;
        // A missing file is no routes yet: the simulation writes it once it serves one.
        let text = std::fs::read_to_string(path).ok()?;
        text.lines()
            .enumerate()
            .map(|(i, l)| (i, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
            .find_map(|(i, line)| match parse(line) {
                Some((h, p, to)) => (h.eq_ignore_ascii_case(host) && p == port).then_some(to),
                None => {
                    tracing::warn!(file = %path.display(), line = i + 1, text = line, "not HOST:PORT:ADDR:PORT; skipped");
                    None
                }
            })
    }
}

fn parse(line: &str) -> Option<(&str, u16, (String, u16))> {
    let mut parts = line.split(':');
    let (host, port, addr, to_port) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || host.is_empty() || addr.is_empty() {
        return None;
    }
    Some((
        host,
        port.parse().ok()?,
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
    }
}
