//! `capw plugin verify` and `capw plugin inspect` on the real components.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::Command;

fn capw(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_capw"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("capw runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn plugin(name: &str) -> String {
    let p = support::repo_root()
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    assert!(
        p.exists(),
        "{} missing: run scripts/build-plugins",
        p.display()
    );
    p.display().to_string()
}

#[test]
fn verify_passes_the_well_behaved_plugin() {
    // Dropped in as echo.wasm, it is the WasmProvider `echo`, the name it declares.
    let (ok, report) = capw(&["plugin", "verify", "--name", "echo", &plugin("echo-v1")]);
    assert!(ok, "{report}");
    assert!(
        report.contains("ok   trust: registered as echo"),
        "{report}"
    );
    assert!(
        report.contains("EchoMachine reconcile") && report.contains("meets the provider contract"),
        "{report}"
    );
}

#[test]
fn verify_fails_every_misbehaving_plugin_with_a_report() {
    for (name, expect) in [
        ("infinite-loop", "did not finish within"),
        ("memory-bomb", "trapped"),
        ("recursion", "trapped"),
        ("panic", "trapped"),
        ("huge-output", "SampleMachine reconcile"),
        ("invalid-results", "status-patch is not JSON"),
        ("sandbox-escape", "serves 0 kinds"),
        ("ungranted-import", "serves 0 kinds"),
        ("echo-v3", "trapped"),
    ] {
        let (ok, report) = capw(&["plugin", "verify", "--timeout", "1", &plugin(name)]);
        assert!(!ok, "{name} must fail verification:\n{report}");
        assert!(
            report.contains("FAIL") && report.contains(expect),
            "{name}:\n{report}"
        );
        assert!(
            report.contains("does not meet the provider contract"),
            "{name}:\n{report}"
        );
    }
}

/// `verify` applies the trust checks loading applies, so an author learns before dropping a
/// component in: the name it will be registered under, provider groups, and kinds and CRD
/// names that plugins beside it already hold.
#[test]
fn verify_applies_the_trust_checks_of_loading() {
    let bundled = support::repo_root().join("target/plugins/bundled");
    let bundled = bundled.display().to_string();
    for (args, rule, words) in [
        (
            vec![plugin("echo-v1")],
            "NameMismatch",
            "is not the WasmProvider's name \"echo-v1\"",
        ),
        (
            vec![plugin("hostile-core-kind")],
            "ReservedGroup",
            "Machine.cluster.x-k8s.io",
        ),
        (
            vec![
                "--beside".into(),
                bundled.clone(),
                plugin("hostile-crd-shadow"),
            ],
            "CrdNameTaken",
            "kubeadmconfigs.bootstrap.cluster.x-k8s.io of plugin bootstrap",
        ),
        (
            vec![
                "--beside".into(),
                bundled.clone(),
                plugin("hostile-kind-thief"),
            ],
            "KindTaken",
            "served by plugin docker",
        ),
    ] {
        let mut argv = vec!["plugin", "verify", "--timeout", "2"];
        argv.extend(args.iter().map(String::as_str));
        let (ok, report) = capw(&argv);
        assert!(!ok, "{args:?} must fail verification:\n{report}");
        assert!(
            report.contains(&format!("FAIL trust ({rule})")) && report.contains(words),
            "{args:?}:\n{report}"
        );
    }
    // Beside the bundled providers, an honest one of its own kinds passes.
    let (ok, report) = capw(&[
        "plugin",
        "verify",
        "--beside",
        &bundled,
        &plugin("third-party-control-plane"),
    ]);
    assert!(ok, "{report}");
}

#[test]
fn inspect_lists_metadata_imports_and_exports() {
    let (ok, out) = capw(&["plugin", "inspect", &plugin("echo-v2")]);
    assert!(ok, "{out}");
    for want in [
        "version:  2.0.0",
        "capw:host/log@0.2.0",
        "capw:provider/infrastructure-machine@0.2.0",
        "sha256:",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    let (ok, out) = capw(&["plugin", "inspect", "/nonexistent.wasm"]);
    assert!(!ok && out.contains("reading /nonexistent.wasm"), "{out}");
}
