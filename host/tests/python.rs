//! The official Python `kubernetes` client end to end (typed and dynamic clients), run with
//! pytest from the venv `scripts/test` creates.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::Command;
use support::{ApiServer, repo_root, tool};

#[test]
fn python_client() {
    let python = tool(
        "CAPW_PYTHON",
        ".tools/venv/bin/python",
        "run scripts/test once to create the Python venv",
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    // Retention small enough that RV 1 is expired when the 410 test runs.
    let server = ApiServer::start_with(&tmp.path().join("data"), &["--watch-retention", "5"]);
    let out = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(repo_root().join("tests/python"))
        .env("KUBECONFIG", &server.kubeconfig)
        .env(
            "CAPW_WIDGET_CRD",
            repo_root().join("apiserver/tests/fixtures/widget-crd.json"),
        )
        .env("HOME", tmp.path())
        .output()
        .expect("pytest runs");
    assert!(
        out.status.success(),
        "pytest failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
