//! Drop-in end to end: `capw up` on the embedded API server; copying a `.wasm` into its plugin
//! directory makes its kinds appear in discovery and its WasmProvider Active, all seen through
//! kubectl. Also: an ungranted import is reported by name, a changed file hot-swaps the
//! version, a removed file keeps the active version running, and the finalizer holds a
//! WasmProvider while objects of its kinds exist.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Up {
    child: Child,
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn up(dir: &Path) -> Up {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capw"))
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("data"))
        .arg("--plugins")
        .arg(dir.join("plugins"))
        .args(["--metrics", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("capw up starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut kubeconfig = PathBuf::new();
    for line in lines.by_ref() {
        let line = line.expect("line");
        if let Some(k) = line.strip_prefix("kubeconfig: ") {
            kubeconfig = PathBuf::from(k);
        }
        if line.starts_with("watching ") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    assert!(kubeconfig.exists(), "capw up did not report its kubeconfig");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    Up {
        child,
        kubeconfig,
        home,
    }
}

impl Up {
    fn kubectl(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("/usr/bin/kubectl")
            .args(args)
            .env_clear()
            .env("HOME", &self.home)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", "/usr/bin:/bin")
            .output()
            .expect("kubectl runs");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    fn eventually(&self, what: &str, args: &[&str], check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, out) = self.kubectl(args);
            if check(&out) {
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last output:\n{out}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

fn plugin(name: &str) -> PathBuf {
    let p = support::repo_root()
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    assert!(
        p.exists(),
        "{} missing: run scripts/build-plugins",
        p.display()
    );
    p
}

const ACTIVE: &str = "jsonpath={.status.conditions[?(@.type==\"Active\")].status}";

#[test]
fn dropping_a_wasm_file_installs_the_provider() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = up(tmp.path());
    let plugins = tmp.path().join("plugins");

    std::fs::copy(plugin("echo-v1"), plugins.join("echo.wasm")).expect("drop echo");
    host.eventually(
        "echo Active",
        &["get", "wasmprovider", "echo", "-o", ACTIVE],
        |o| o == "True",
    );
    host.eventually(
        "echomachines in discovery",
        &[
            "api-resources",
            "--api-group=infrastructure.cluster.x-k8s.io",
        ],
        |o| o.contains("echomachines") && o.contains("echoclusters"),
    );
    let table = host.kubectl(&["get", "wasmproviders"]).1;
    assert!(
        table.starts_with("NAME") && table.contains("VERSION") && table.contains("1.0.0"),
        "{table}"
    );
    let (_, imports) = host.kubectl(&[
        "get",
        "wasmprovider",
        "echo",
        "-o",
        "jsonpath={.status.imports}",
    ]);
    assert!(imports.contains("capw:host/log@0.2.0"), "{imports}");

    // An ungranted import: Validated=False naming the import; never Active.
    std::fs::copy(
        plugin("ungranted-import"),
        plugins.join("ungranted-import.wasm"),
    )
    .expect("drop ungranted-import");
    let msg = host.eventually(
        "ungranted-import refused",
        &[
            "get",
            "wasmprovider",
            "ungranted-import",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Validated\")].message}",
        ],
        |o| o.contains("capw:host/container-runtime@0.2.0"),
    );
    assert!(msg.contains("not granted"), "{msg}");
    // Granting it through NAME.yaml loads it.
    std::fs::write(
        plugins.join("ungranted-import.yaml"),
        "capabilities: [container-runtime]\n",
    )
    .expect("manifest");
    host.eventually(
        "ungranted-import Active once granted",
        &["get", "wasmprovider", "ungranted-import", "-o", ACTIVE],
        |o| o == "True",
    );

    // Identity is the WasmProvider's name: a component that calls itself echo, dropped in as
    // impostor.wasm, is refused and never serves (it would otherwise own echo's objects and,
    // with container-runtime, echo's containers).
    std::fs::copy(plugin("echo-v1"), plugins.join("impostor.wasm")).expect("drop impostor");
    let msg = host.eventually(
        "impostor refused",
        &[
            "get",
            "wasmprovider",
            "impostor",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Validated\")].reason}={.status.conditions[?(@.type==\"Validated\")].message}",
        ],
        |o| o.starts_with("NameMismatch="),
    );
    assert!(
        msg.contains("\"echo\"") && msg.contains("\"impostor\""),
        "{msg}"
    );
    assert_eq!(
        host.kubectl(&["get", "wasmprovider", "impostor", "-o", ACTIVE])
            .1,
        "False"
    );

    // A WasmProvider whose sha256 does not match its file is not loaded.
    std::fs::copy(plugin("echo-v1"), plugins.join("pinned-module.bin")).expect("copy module");
    let wrong = tmp.path().join("wrong.yaml");
    std::fs::write(
        &wrong,
        format!(
            "apiVersion: runtime.capw.dev/v1alpha1\nkind: WasmProvider\nmetadata: {{name: pinned}}\nspec:\n  module: pinned-module.bin\n  sha256: \"{}\"\n",
            "0".repeat(64)
        ),
    )
    .expect("manifest");
    let (ok, out) = host.kubectl(&["apply", "-f", wrong.to_str().expect("path")]);
    assert!(ok, "{out}");
    host.eventually(
        "digest mismatch reported",
        &[
            "get",
            "wasmprovider",
            "pinned",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Validated\")].reason}",
        ],
        |o| o == "DigestMismatch",
    );
    assert_eq!(
        host.kubectl(&["get", "wasmprovider", "pinned", "-o", ACTIVE])
            .1,
        "False"
    );

    // A changed file hot-swaps the version.
    std::fs::copy(plugin("echo-v2"), plugins.join("echo.wasm")).expect("replace echo");
    host.eventually(
        "echo 2.0.0",
        &[
            "get",
            "wasmprovider",
            "echo",
            "-o",
            "jsonpath={.status.activeVersion}",
        ],
        |o| o == "2.0.0",
    );
    let (_, prev) = host.kubectl(&[
        "get",
        "wasmprovider",
        "echo",
        "-o",
        "jsonpath={.status.previousDigests}",
    ]);
    assert!(!prev.is_empty() && prev != "[]", "{prev}");
    // Each version activated has its own Event: the second is not a repeat of the first.
    // (The conditions above the Events name the active version too.)
    let events = |o: &str| o.split_once("Events:").map(|(_, e)| e.to_string());
    let described = host.eventually(
        "an Event for version 2.0.0",
        &["describe", "wasmprovider", "echo"],
        |o| events(o).is_some_and(|e| e.contains("version 2.0.0 serves")),
    );
    let described = events(&described).unwrap_or_default();
    assert!(
        described.contains("version 1.0.0 serves"),
        "the first version's Event is gone:\n{described}"
    );

    // Removing the file keeps the active version and says so.
    std::fs::remove_file(plugins.join("echo.wasm")).expect("remove echo");
    host.eventually(
        "ModuleMissing",
        &[
            "get",
            "wasmprovider",
            "echo",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Degraded\")].reason}",
        ],
        |o| o == "ModuleMissing",
    );
    assert_eq!(
        host.kubectl(&["get", "wasmprovider", "echo", "-o", ACTIVE])
            .1,
        "True"
    );

    // The finalizer holds the WasmProvider while an EchoMachine exists.
    let machine = tmp.path().join("m.yaml");
    std::fs::write(&machine, "apiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: EchoMachine\nmetadata: {name: m1, namespace: default}\nspec: {}\n")
        .expect("manifest");
    let (ok, out) = host.kubectl(&["apply", "-f", machine.to_str().expect("path")]);
    assert!(ok, "{out}");
    let (ok, out) = host.kubectl(&["delete", "wasmprovider", "echo", "--wait=false"]);
    assert!(ok, "{out}");
    host.eventually(
        "deletion blocked",
        &[
            "get",
            "wasmprovider",
            "echo",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Deleting\")].reason}",
        ],
        |o| o == "ObjectsRemain",
    );
    host.kubectl(&["delete", "-f", machine.to_str().expect("path")]);
    host.eventually(
        "echo WasmProvider gone",
        &["get", "wasmproviders", "-o", "name"],
        |o| !o.contains("wasmprovider.runtime.capw.dev/echo"),
    );
}
