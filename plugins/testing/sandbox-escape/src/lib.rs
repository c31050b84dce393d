//! Misbehaving: tries to read a host file, open a socket and read the environment, and reports
//! what it got in its status patch. Every attempt must come back empty or denied.
use capw_sdk::*;

struct Escape;

impl Provider for Escape {
    fn metadata() -> Metadata {
        Metadata::new("sandbox-escape", "0.1.0", ProviderType::Infrastructure)
    }

    fn reconcile_machine(_ctx: Context) -> Result<MachineStatus, ProviderError> {
        let file = std::fs::read_to_string("/etc/passwd")
            .map(|s| format!("read {} bytes", s.len()))
            .unwrap_or_else(|e| format!("denied: {e}"));
        let socket = std::net::TcpStream::connect("127.0.0.1:22")
            .map(|_| "connected".to_string())
            .unwrap_or_else(|e| format!("denied: {e}"));
        let env: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
        Ok(MachineStatus::pending(common(
            vec![],
            Some(json!({"file": file, "socket": socket, "env": env})),
        )))
    }
}

capw_sdk::export_provider!(Escape);
