//! Shared pieces of the end-to-end tests: the `capw apiserver` child process, locating the
//! client tools, a kube client for the generated kubeconfig, and the in-process host
//! ([`host::Env`]).

#![allow(dead_code)]

pub mod host;
pub mod moto;
pub mod process;
pub mod up;

/// The `capw` binary's allocator, so a host started in a test (built for the static musl target
/// by `scripts/test`) allocates as the binary does rather than through musl's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The workspace root (tools and fixtures are found relative to it).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// A child process that is killed and reaped when the guard drops, so a failing test never
/// leaves it running (holding the test runner's output pipe open).
pub struct KillOnDrop(pub Child);

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `capw apiserver` child process.
pub struct ApiServer {
    pub child: Child,
    pub kubeconfig: PathBuf,
    pub url: String,
}

impl ApiServer {
    /// Starts the binary on a free loopback port with its data in `data_dir`.
    pub fn start(data_dir: &Path) -> ApiServer {
        Self::start_with(data_dir, &[])
    }

    /// As [`ApiServer::start`], with extra `capw apiserver` flags.
    pub fn start_with(data_dir: &Path, extra: &[&str]) -> ApiServer {
        Self::spawn(data_dir, "127.0.0.1:0", extra)
    }

    /// Starts it again on its data and its port, after [`ApiServer::kill9`]: its clients'
    /// kubeconfigs still reach it, as after a management cluster's API server restarts.
    pub fn restart(&mut self, data_dir: &Path) {
        let port = self.url.rsplit(':').next().expect("port").to_string();
        *self = Self::spawn(data_dir, &format!("127.0.0.1:{port}"), &[]);
    }

    fn spawn(data_dir: &Path, listen: &str, extra: &[&str]) -> ApiServer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_capw"))
            .args(["apiserver", "--listen", listen, "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("capw apiserver starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut url = String::new();
        let mut kubeconfig = PathBuf::new();
        for line in lines.by_ref() {
            let line = line.expect("stdout line");
            if let Some(u) = line.strip_prefix("capw apiserver listening on ") {
                url = u.to_string();
            }
            if let Some(k) = line.strip_prefix("kubeconfig: ") {
                kubeconfig = PathBuf::from(k);
                break;
            }
        }
        assert!(
            !url.is_empty() && kubeconfig.exists(),
            "capw apiserver did not report its address"
        );
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        ApiServer {
            child,
            kubeconfig,
            url,
        }
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tool the tests need, from an env override or the place `scripts/test` installs it.
/// Missing tools fail the test: CI must never skip these.
pub fn tool(env: &str, default: &str, install_hint: &str) -> PathBuf {
    let path = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(default));
    assert!(
        path.exists(),
        "{} not found at {}: {install_hint} (or set {env})",
        default,
        path.display()
    );
    path
}

pub async fn kube_client(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(cfg).expect("client")
}

/// Runs `/usr/bin/kubectl` with nothing but HOME, KUBECONFIG and PATH from the environment, and
/// returns whether it succeeded and what it printed (stdout, then stderr).
pub fn kubectl(
    kubeconfig: &Path,
    home: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("/usr/bin/kubectl")
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("KUBECONFIG", kubeconfig)
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    if let Some(s) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(s.as_bytes())
            .expect("write stdin");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("kubectl output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A plain HTTP/1.0 GET on a loopback port (the host's `/metrics`); the whole response.
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics endpoint");
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    out
}

/// A component from `scripts/build-plugins`.
pub fn plugin(name: &str) -> PathBuf {
    let p = repo_root().join("target/plugins").join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/build-plugins first",
        p.display()
    );
    p
}

/// Polls `f` every 250 ms until it yields, for up to `secs`; on time-out the panic names `what`
/// and `state()` (the host's status line, say).
pub async fn eventually<T, F, Fut>(what: &str, secs: u64, state: impl Fn() -> String, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {secs}s waiting for {what}; host: {}",
            state()
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// A namespaced API for `kind` in `group`/v1beta2, in `default`.
pub fn dynamic(
    client: &kube::Client,
    group: &str,
    kind: &str,
    plural: &str,
) -> kube::Api<kube::api::DynamicObject> {
    let ar = kube::api::ApiResource {
        group: group.into(),
        version: "v1beta2".into(),
        api_version: format!("{group}/v1beta2"),
        kind: kind.into(),
        plural: plural.into(),
    };
    kube::Api::namespaced_with(client.clone(), "default", &ar)
}

/// `capw image build` once per test binary: the provider's default image from the musl capw
/// that `scripts/test` builds.
pub fn node_image() {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Command::new(env!("CARGO_BIN_EXE_capw"))
            .args(["image", "build"])
            .output()
            .expect("capw image build runs");
        assert!(
            out.status.success(),
            "capw image build failed (scripts/test builds the musl capw it needs):\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    });
}
