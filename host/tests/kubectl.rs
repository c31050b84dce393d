//! kubectl end to end against `capw apiserver`, once with the machine's kubectl
//! (`/usr/bin/kubectl`, which dispatches to a kubectl matching the server) and once with
//! Debian's kubectl 1.20 (installed by `scripts/test` into `.tools/`).

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::{ApiServer, repo_root, tool};

struct Kubectl {
    bin: PathBuf,
    home: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args)
            .env_clear()
            .env("HOME", &self.home)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", "/usr/bin:/bin");
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("kubectl runs")
    }

    /// Runs and requires success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn eventually(&self, what: &str, args: &[&str], check: impl Fn(&Output) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if check(&self.run(args)) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("manifest written");
    p.display().to_string()
}

fn widget(name: &str, color: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec:\n  color: {color}\n  extra: {{}}\n  raw: {{}}\n  tags: []\n"
    )
}

fn child_of(name: &str, owner: &str, uid: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  ownerReferences:\n  - apiVersion: example.com/v1\n    kind: Widget\n    name: {owner}\n    uid: {uid}\n    blockOwnerDeletion: true\ndata:\n  a: \"1\"\n"
    )
}

/// Streams a child's stdout lines through a channel so the test can wait with a deadline.
fn lines_of(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().expect("stdout piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn wait_line(rx: &mpsc::Receiver<String>, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if pred(&l) => return l,
            Ok(_) => {}
            Err(_) => panic!("no line with {what}"),
        }
    }
}

/// The whole suite for one kubectl; `patcher` is a kubectl new enough for `--subresource`.
fn suite(bin: PathBuf, patcher: PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&tmp.path().join("data"));
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let k = Kubectl {
        bin,
        home: home.clone(),
        kubeconfig: server.kubeconfig.clone(),
    };
    let p = Kubectl {
        bin: patcher,
        home: tmp.path().join("home2"),
        kubeconfig: server.kubeconfig.clone(),
    };
    let m = tmp.path();

    let version = k.ok(&["version"]);
    assert!(version.contains("v1.33.0-capw"), "{version}");
    assert!(k.ok(&["get", "ns"]).contains("kube-system"));
    assert!(k.ok(&["api-resources"]).contains("configmaps"));
    assert_eq!(
        k.ok(&["auth", "can-i", "create", "configmaps"]).trim(),
        "yes"
    );

    let crd = repo_root()
        .join("apiserver/tests/fixtures/widget-crd.json")
        .display()
        .to_string();
    assert!(
        k.ok(&["apply", "-f", &crd])
            .contains("customresourcedefinition.apiextensions.k8s.io/widgets.example.com created")
    );
    assert!(
        k.ok(&[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=20s"
        ])
        .contains("condition met")
    );
    assert!(k.ok(&["apply", "-f", &crd]).contains("unchanged"));

    let w1 = write(m, "w1.yaml", &widget("w1", "red"));
    assert!(
        k.ok(&["apply", "-f", &w1])
            .contains("widget.example.com/w1 created")
    );
    let w1 = write(m, "w1.yaml", &widget("w1", "blue"));
    assert!(
        k.ok(&["apply", "-f", &w1])
            .contains("widget.example.com/w1 configured")
    );
    assert!(
        k.ok(&["apply", "-f", &w1])
            .contains("widget.example.com/w1 unchanged")
    );

    let cm = write(
        m,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c1\ndata:\n  a: \"1\"\n",
    );
    assert!(k.ok(&["apply", "-f", &cm]).contains("configmap/c1 created"));
    let cm = write(
        m,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c1\ndata:\n  a: \"2\"\n",
    );
    assert!(
        k.ok(&["apply", "-f", &cm])
            .contains("configmap/c1 configured"),
        "strategic merge path"
    );

    let table = k.ok(&["get", "widgets"]);
    let mut rows = table.lines();
    let header: Vec<&str> = rows.next().expect("header").split_whitespace().collect();
    assert_eq!(header, vec!["NAME", "COLOR", "AGE"], "{table}");
    assert!(
        rows.next()
            .expect("row")
            .split_whitespace()
            .take(2)
            .eq(["w1", "blue"])
    );
    assert!(k.ok(&["get", "widgets", "-A"]).starts_with("NAMESPACE"));
    assert!(
        k.ok(&["get", "widget", "w1", "-o", "yaml"])
            .contains("color: blue")
    );
    assert_eq!(
        k.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.replicas}"]),
        "1",
        "defaulted by the schema"
    );

    // get -w sees a later change as a new row.
    let mut watch = k
        .cmd(&["get", "widgets", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("get -w");
    let rx = lines_of(&mut watch);
    wait_line(&rx, "the initial row", |l| l.starts_with("w1"));
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"color":"green"}}"#,
    ]);
    wait_line(&rx, "the changed row", |l| {
        l.starts_with("w1") && l.contains("green")
    });
    let _ = watch.kill();
    let _ = watch.wait();

    // wait --for=condition=Ready, satisfied by a status patch from another process.
    let waiter = k
        .cmd(&[
            "wait",
            "--for=condition=Ready",
            "widget/w1",
            "--timeout=30s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl wait");
    std::thread::sleep(Duration::from_millis(500));
    let status = r#"{"status":{"ok":true,"conditions":[{"type":"Ready","status":"True","reason":"Done","message":"ready","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    p.ok(&[
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        status,
    ]);
    let out = waiter.wait_with_output().expect("wait ends");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("condition met"),
        "{out:?}"
    );

    // describe shows Events about the object.
    let uid = k.ok(&["get", "widget", "w1", "-o", "jsonpath={.metadata.uid}"]);
    let event = format!(
        "apiVersion: v1\nkind: Event\nmetadata:\n  name: w1.provisioned\ninvolvedObject:\n  apiVersion: example.com/v1\n  kind: Widget\n  name: w1\n  namespace: default\n  uid: {uid}\nreason: Provisioned\nmessage: the widget is ready\ntype: Normal\ncount: 1\nfirstTimestamp: \"2026-01-01T00:00:00Z\"\nlastTimestamp: \"2026-01-01T00:00:00Z\"\nsource:\n  component: test\n"
    );
    let ev = write(m, "event.yaml", &event);
    k.ok(&["create", "-f", &ev]);
    // The form kube-runtime's Recorder posts: events.k8s.io/v1 with only an eventTime.
    let recorded = format!(
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata:\n  name: w1.recorded\nregarding:\n  apiVersion: example.com/v1\n  kind: Widget\n  name: w1\n  namespace: default\n  uid: {uid}\nreason: Reconciled\nnote: recorded by a controller\ntype: Normal\naction: Reconcile\neventTime: \"2026-01-01T00:00:01.000000Z\"\nreportingController: widget-controller\nreportingInstance: widget-controller-0\n"
    );
    let rec = write(m, "recorded.yaml", &recorded);
    k.ok(&["create", "-f", &rec]);
    let described = k.ok(&["describe", "widget", "w1"]);
    assert!(
        described.contains("Reconciled") && described.contains("recorded by a controller"),
        "{described}"
    );
    assert!(
        described.contains("Events:")
            && described.contains("Provisioned")
            && described.contains("the widget is ready"),
        "{described}"
    );
    assert!(described.contains("Color:"), "{described}");

    // delete with foreground and background cascade; owned ConfigMaps follow their owner.
    let w2 = write(m, "w2.yaml", &widget("w2", "red"));
    k.ok(&["apply", "-f", &w2]);
    let uid2 = k.ok(&["get", "widget", "w2", "-o", "jsonpath={.metadata.uid}"]);
    let c2 = write(m, "c2.yaml", &child_of("w2-child", "w2", &uid2));
    k.ok(&["apply", "-f", &c2]);
    let c1 = write(m, "c1.yaml", &child_of("w1-child", "w1", &uid));
    k.ok(&["apply", "-f", &c1]);
    assert!(
        k.ok(&["delete", "widget", "w2", "--cascade=foreground"])
            .contains("deleted")
    );
    k.eventually(
        "foreground dependent gone",
        &["get", "cm", "w2-child"],
        |o| !o.status.success(),
    );
    assert!(k.ok(&["delete", "widget", "w1"]).contains("deleted"));
    k.eventually(
        "background dependent gone",
        &["get", "cm", "w1-child"],
        |o| !o.status.success(),
    );

    let missing = k.run(&["delete", "widget", "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains("Error from server (NotFound): widgets.example.com \"nope\" not found")
    );

    let w3 = write(m, "w3.yaml", &widget("w3", "teal"));
    assert!(
        k.ok(&["apply", "--server-side", "-f", &w3])
            .contains("widget.example.com/w3 serverside-applied")
    );
    assert_eq!(
        k.ok(&["get", "widget", "w3", "-o", "jsonpath={.spec.color}"]),
        "teal"
    );

    assert!(k.ok(&["create", "ns", "x"]).contains("namespace/x created"));
    k.ok(&[
        "create",
        "configmap",
        "made",
        "--from-literal=a=b",
        "-n",
        "x",
    ]);
    assert_eq!(
        k.ok(&["get", "cm", "made", "-n", "x", "-o", "jsonpath={.data.a}"]),
        "b"
    );
    k.ok(&[
        "create",
        "secret",
        "generic",
        "sec",
        "--from-literal=p=hunter2",
        "-n",
        "x",
    ]);
    assert_eq!(
        k.ok(&[
            "get",
            "secret",
            "sec",
            "-n",
            "x",
            "-o",
            "jsonpath={.data.p}"
        ]),
        "aHVudGVyMg=="
    );
    k.ok(&["create", "serviceaccount", "robot", "-n", "x"]);
    k.ok(&["label", "ns", "x", "team=capw"]);
    assert!(k.ok(&["get", "ns", "-l", "team=capw"]).contains("x "));
    assert!(
        k.ok(&["delete", "ns", "x"])
            .contains("namespace \"x\" deleted")
    );
}

#[test]
fn kubectl_machine_default() {
    suite(
        PathBuf::from("/usr/bin/kubectl"),
        PathBuf::from("/usr/bin/kubectl"),
    );
}

#[test]
fn kubectl_1_20() {
    let old = tool(
        "CAPW_KUBECTL_120",
        ".tools/kubectl-1.20/usr/bin/kubectl",
        "run scripts/test once to install Debian's kubectl 1.20",
    );
    let out = Command::new(&old)
        .args(["version", "--client", "--short"])
        .output()
        .expect("kubectl 1.20 runs");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("v1.20"),
        "not kubectl 1.20: {out:?}"
    );
    suite(old, PathBuf::from("/usr/bin/kubectl"));
}

/// Issue 11 through the machine's kubectl: `kubectl scale` on the scale subresource,
/// `kubectl explain` from `/openapi/v3`, and `kubectl get <category>`.
#[test]
fn kubectl_scale_explain_and_categories() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&tmp.path().join("data"));
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let k = Kubectl {
        bin: PathBuf::from("/usr/bin/kubectl"),
        home,
        kubeconfig: server.kubeconfig.clone(),
    };
    let crd = repo_root()
        .join("apiserver/tests/fixtures/gadget-crd.json")
        .display()
        .to_string();
    k.ok(&["apply", "-f", &crd]);
    let gadget = write(
        tmp.path(),
        "gadget.yaml",
        "apiVersion: fidelity.example.com/v1beta2\nkind: Gadget\nmetadata: {name: s}\nspec:\n  replicas: 1\n  infrastructureRef: {apiGroup: infra.example.com, kind: Box, name: s}\n",
    );
    k.ok(&["apply", "-f", &gadget]);
    assert!(
        k.ok(&["scale", "gadget/s", "--replicas=3"])
            .contains("scaled")
    );
    assert_eq!(
        k.ok(&["get", "gadget", "s", "-o", "jsonpath={.spec.replicas}"]),
        "3"
    );
    let explained = k.ok(&["explain", "gadgets.spec.infrastructureRef"]);
    assert!(
        explained.contains("apiGroup") && explained.contains("-required-"),
        "{explained}"
    );
    let by_category = k.ok(&["get", "fidelity"]);
    assert!(by_category.contains("s "), "{by_category}");

    // `all` expands to the served kinds kube puts in it: Pods.
    let out = k.run(&["get", "all"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "No resources found in default namespace."
    );
    assert!(
        k.ok(&["run", "web", "--image=nginx:1.27"])
            .contains("pod/web created")
    );
    let all = k.ok(&["get", "all"]);
    let row: Vec<&str> = all
        .lines()
        // kubectl prefixes the kind (`pod/web`) only when `all` expands to several kinds.
        .find(|l| l.starts_with("web "))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    // Nothing runs Pods on the management API: the Pod stays Pending, as its status says.
    assert_eq!(row.get(1..4), Some(&["0/1", "Pending", "0"][..]), "{all}");
    let rejected = k.run(&[
        "set",
        "image",
        "pod/web",
        "web=nginx:1.28",
        "--dry-run=server",
    ]);
    assert!(rejected.status.success(), "{rejected:?}");
    let rejected = k.run(&[
        "patch",
        "pod",
        "web",
        "-p",
        r#"{"spec":{"restartPolicy":"Never"}}"#,
    ]);
    assert!(
        String::from_utf8_lossy(&rejected.stderr).contains("pod updates may not change fields"),
        "{rejected:?}"
    );
    assert!(
        k.ok(&["delete", "pod", "web"])
            .contains("pod \"web\" deleted")
    );
}
