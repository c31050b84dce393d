//! `capw move` of the Docker quickstart from a `capw up` to a `capw apiserver` whose own host
//! runs the same providers, on the real Docker engine: the containers keep their ids, the
//! target's host reports the Machines Running, the source is left empty, and deleting the
//! Cluster at the target removes the containers.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use support::up::Up;
use support::{ApiServer, KillOnDrop};

const CLUSTER: &str = "quickstart";

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("docker");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Container name → id of the cluster's containers.
fn containers() -> BTreeMap<String, String> {
    docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=capw.dev/cluster=default.{CLUSTER}"),
        "--format",
        "{{.Names}} {{.ID}}",
    ])
    .lines()
    .filter_map(|l| {
        let (name, id) = l.split_once(' ')?;
        Some((name.to_string(), id.to_string()))
    })
    .collect()
}

fn clean_engine() {
    for name in containers().keys() {
        docker(&["rm", "-f", name]);
    }
    for n in docker(&["network", "ls", "--format", "{{.Name}}"]).lines() {
        if n.contains(CLUSTER) {
            docker(&["network", "rm", n]);
        }
    }
}

/// Machines Running with a Node that is Ready, as the host reports them.
fn running(up_kubeconfig: &std::path::Path, home: &std::path::Path) -> usize {
    let (_, out) = support::kubectl(
        up_kubeconfig,
        home,
        &[
            "get",
            "machines",
            "-o",
            "jsonpath={range .items[*]}{.status.phase} {.status.conditions[?(@.type==\"NodeReady\")].status}{\"\\n\"}{end}",
        ],
        None,
    );
    out.lines().filter(|l| *l == "Running True").count()
}

#[test]
fn the_docker_quickstart_moves_to_another_management_api_with_its_containers() {
    support::node_image();
    clean_engine();
    let up = Up::start(&[], &["docker", "bootstrap", "control-plane"]);
    let example = support::repo_root().join("examples/quickstart.yaml");
    let example = example.to_str().unwrap();
    up.eventually("the quickstart to apply", 120, || {
        up.try_kubectl(&["apply", "-f", example], None)
            .0
            .then_some(())
    });
    up.eventually("3 Machines Running with Ready Nodes", 300, || {
        (running(&up.kubeconfig, &up.home) == 3).then_some(())
    });
    let before = containers();
    assert_eq!(
        before.len(),
        4,
        "three machines and a load balancer: {before:?}"
    );

    // The target: another management API, with a host running the same providers.
    let dir = tempfile::tempdir().expect("tempdir");
    let target = ApiServer::start(&dir.path().join("api"));
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugins");
    for p in ["docker", "bootstrap", "control-plane"] {
        std::fs::copy(
            support::plugin(&format!("{p}.wasm")),
            plugins.join(format!("{p}.wasm")),
        )
        .expect("copy");
    }
    let bundled = support::repo_root().join("target/plugins/bundled/docker.yaml");
    std::fs::copy(bundled, plugins.join("docker.yaml")).expect("docker grants");
    let log = dir.path().join("target-host.log");
    let _host = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_capw"))
            .args([
                "run",
                "--leader-elect=false",
                "--metrics",
                "127.0.0.1:0",
                "--kubeconfig",
            ])
            .arg(&target.kubeconfig)
            .arg("--plugins")
            .arg(&plugins)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("capw run"),
    );
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let at_target = |args: &[&str]| support::kubectl(&target.kubeconfig, &home, args, None);
    up.eventually("the target's providers to be active", 180, || {
        let (ok, out) = at_target(&[
            "get",
            "wasmproviders",
            "-o",
            "jsonpath={.items[*].status.activeVersion}",
        ]);
        (ok && out.split_whitespace().count() == 3).then_some(())
    });

    let capw_move = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_capw"))
            .args(["move", "--to-kubeconfig"])
            .arg(&target.kubeconfig)
            .args(extra)
            .env("KUBECONFIG", &up.kubeconfig)
            .output()
            .expect("capw move");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "capw move {extra:?}: {text}");
        text
    };
    let plan = capw_move(&["--dry-run"]);
    for line in [
        "  Cluster/quickstart",
        "  DockerCluster/quickstart  (owned by Cluster/quickstart)",
        "  Secret/quickstart-kubeconfig  (owned by KubeadmControlPlane/quickstart-control-plane)",
        "  Secret/quickstart-ca  (owned by KubeadmControlPlane/quickstart-control-plane)",
    ] {
        assert!(plan.contains(line), "{line:?} not in the plan:\n{plan}");
    }
    assert_eq!(
        up.kubectl(&["get", "clusters", "-o", "name"], None).trim(),
        "cluster.cluster.x-k8s.io/quickstart",
        "a dry run changes nothing"
    );
    let moved = capw_move(&[]);
    assert!(moved.contains("moved Cluster/quickstart"), "{moved}");

    // The source is empty, and nothing was deleted or recreated on the engine.
    let (_, left) = up.try_kubectl(
        &["get", "clusters,machines,machinesets,machinedeployments,kubeadmcontrolplanes,dockerclusters,dockermachines,kubeadmconfigs,secrets", "-o", "name"],
        None,
    );
    assert!(left.trim().is_empty(), "left at the source: {left}");
    assert_eq!(containers(), before, "the containers were replaced");

    // The target's host adopts them: its own reconciles report Running, unpaused.
    up.eventually(
        "the target's host to reconcile the moved Cluster",
        120,
        || {
            let (_, out) = at_target(&[
                "get",
                "cluster",
                CLUSTER,
                "-o",
                "jsonpath={.spec.paused} {.status.conditions[?(@.type==\"Paused\")].status}",
            ]);
            (out.trim() == "false False").then_some(())
        },
    );
    up.eventually("3 Machines Running at the target", 120, || {
        (running(&target.kubeconfig, &home) == 3).then_some(())
    });
    assert_eq!(
        containers(),
        before,
        "the target's host replaced containers"
    );

    let (ok, out) = at_target(&["delete", "cluster", CLUSTER, "--timeout=180s"]);
    assert!(ok, "{out}");
    up.eventually("the containers to be removed", 60, || {
        containers().is_empty().then_some(())
    });
}
