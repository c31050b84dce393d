//! `capw up` as a user runs it: a child process whose stderr (the host's log) goes to a file,
//! with providers dropped into its plugin directory, and kubectl against its kubeconfig.

use super::KillOnDrop;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

pub struct Up {
    pub child: KillOnDrop,
    pub kubeconfig: std::path::PathBuf,
    pub home: std::path::PathBuf,
    pub log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Up {
    /// `capw GLOBAL... up` with `plugins` (from `scripts/build-plugins`) dropped in; returns
    /// once the host watches its plugin directory.
    pub fn start(global: &[&str], plugins: &[&str]) -> Up {
        let dir = tempfile::tempdir().expect("tempdir");
        let plugin_dir = dir.path().join("plugins");
        std::fs::create_dir_all(&plugin_dir).expect("plugins dir");
        for p in plugins {
            std::fs::copy(
                super::plugin(&format!("{p}.wasm")),
                plugin_dir.join(format!("{p}.wasm")),
            )
            .expect("copy plugin");
            // The grants the bundled providers ship with (the Docker provider's container
            // runtime, the in-memory provider's simulated cloud).
            let grants = super::repo_root().join(format!("target/plugins/bundled/{p}.yaml"));
            if grants.exists() {
                std::fs::copy(&grants, plugin_dir.join(format!("{p}.yaml"))).expect("grants");
            } else if *p == "inmemory" {
                std::fs::write(
                    plugin_dir.join("inmemory.yaml"),
                    "capabilities: [sim-cloud]\n",
                )
                .expect("yaml");
            }
        }
        let log = dir.path().join("host.log");
        let mut child = KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_capw"))
                .args(global)
                .args(["up", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
                .arg("--data-dir")
                .arg(dir.path().join("data"))
                .arg("--plugins")
                .arg(&plugin_dir)
                .env("RUST_LOG", "info")
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(&log).expect("log file"))
                .spawn()
                .expect("capw up starts"),
        );
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut kubeconfig = std::path::PathBuf::new();
        for line in lines.by_ref() {
            let line = line.expect("line");
            if let Some(k) = line.strip_prefix("kubeconfig: ") {
                kubeconfig = k.into();
            }
            if line.starts_with("watching ") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        Up {
            child,
            kubeconfig,
            home,
            log,
            _dir: dir,
        }
    }

    /// kubectl that must succeed; returns what it printed.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, out) = self.try_kubectl(args, stdin);
        assert!(ok, "kubectl {args:?}: {out}");
        out
    }

    /// kubectl, and whether it succeeded.
    pub fn try_kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        super::kubectl(&self.kubeconfig, &self.home, args, stdin)
    }

    /// Polls `f` every 250 ms for up to `secs`; on time-out the panic shows the log's end.
    pub fn eventually<T>(&self, what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out after {secs}s waiting for {what}; host log ends:\n{}",
                self.log_text()
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }

    pub fn log_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }
}
