//! What the benchmarks share: the repository's root, a `capw apiserver` child process, and the
//! requests it has served. Each bench is its own crate and includes this with `mod common;`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("root")
        .to_path_buf()
}

/// `capw apiserver` on a free loopback port with its data in `dir`, and its kubeconfig; its log
/// level is `CAPW_BENCH_APISERVER_LOG` (default `error`).
pub fn apiserver(dir: &Path) -> (std::process::Child, PathBuf) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capw"))
        .args(["apiserver", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .env(
            "RUST_LOG",
            std::env::var("CAPW_BENCH_APISERVER_LOG").unwrap_or_else(|_| "error".into()),
        )
        .stdout(Stdio::piped())
        .spawn()
        .expect("capw apiserver starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut kubeconfig = PathBuf::new();
    for line in lines.by_ref() {
        if let Some(k) = line.expect("line").strip_prefix("kubeconfig: ") {
            kubeconfig = PathBuf::from(k);
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (child, kubeconfig)
}

/// Requests the API server served so far.
pub async fn requests(client: &kube::Client) -> u64 {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(req).await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("capw_apiserver_requests_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
