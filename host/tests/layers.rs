//! The layer rule (`docs/architecture.md`): each crate of the workspace depends only on the
//! crates below it. Cargo already refuses a cycle; this test also refuses a sideways or upward
//! edge that would still compile, such as the driver importing a core controller, or the plugin
//! runtime importing a controller.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Each workspace crate and the workspace crates it may use, lowest layer first.
const LAYERS: &[(&str, &[&str])] = &[
    ("capw-cloud-config", &[]),
    ("capw-kubeadm", &[]),
    ("capw-apiserver", &[]),
    ("capw-api", &[]),
    ("capw-node", &["capw-kubeadm", "capw-apiserver"]),
    ("capw-reconcile", &["capw-api"]),
    (
        "capw-runtime",
        &[
            "capw-api",
            "capw-reconcile",
            "capw-node",
            "capw-cloud-config",
            "capw-apiserver",
        ],
    ),
    (
        "capw-core",
        &["capw-api", "capw-reconcile", "capw-apiserver"],
    ),
    (
        "capw-driver",
        &[
            "capw-api",
            "capw-reconcile",
            "capw-runtime",
            "capw-kubeadm",
            "capw-apiserver",
        ],
    ),
    (
        "capw-manager",
        &[
            "capw-api",
            "capw-reconcile",
            "capw-runtime",
            "capw-core",
            "capw-driver",
            "capw-apiserver",
        ],
    ),
    // The binary reaches the controllers only through the manager.
    (
        "capw-cli",
        &[
            "capw-api",
            "capw-reconcile",
            "capw-runtime",
            "capw-manager",
            "capw-node",
            "capw-kubeadm",
            "capw-cloud-config",
            "capw-apiserver",
        ],
    ),
];

/// The workspace's own crates and, for each, the workspace crates it depends on (normal and
/// build dependencies; a test may reach further down or up through dev-dependencies).
fn workspace_edges() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let ours: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].as_str() != Some("dev"))
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|d| ours.contains(d))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn every_crate_depends_only_on_the_layers_below_it() {
    let edges = workspace_edges();
    let allowed: BTreeMap<&str, BTreeSet<&str>> = LAYERS
        .iter()
        .map(|(c, deps)| (*c, deps.iter().copied().collect()))
        .collect();
    let mut wrong = Vec::new();
    for (krate, deps) in &edges {
        let Some(may) = allowed.get(krate.as_str()) else {
            wrong.push(format!(
                "{krate} is a workspace crate without a row in LAYERS: give it its layer \
                 (host/tests/layers.rs and docs/architecture.md)"
            ));
            continue;
        };
        for dep in deps {
            if !may.contains(dep.as_str()) {
                wrong.push(format!(
                    "{krate} depends on {dep}, which is not below it: move what it needs down \
                     into a lower crate instead"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "layer rule broken:\n{}", wrong.join("\n"));
}

#[test]
fn the_layer_table_names_only_crates_that_exist() {
    let edges = workspace_edges();
    for (krate, _) in LAYERS {
        assert!(
            edges.contains_key(*krate),
            "LAYERS names {krate}, which is not in the workspace"
        );
    }
    // Lower rows never name a crate of a later row: the table itself is ordered by layer.
    for (i, (krate, deps)) in LAYERS.iter().enumerate() {
        for dep in *deps {
            let at = LAYERS.iter().position(|(c, _)| c == dep).unwrap();
            assert!(
                at < i,
                "{krate} names {dep}, which is not above it in LAYERS"
            );
        }
    }
}
