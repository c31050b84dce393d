//! `@kubernetes/client-node` 1.x end to end (CRUD, the four patch types, Watch, an informer,
//! CustomObjectsApi with scale), run with `node --test` from the packages `scripts/test`
//! installs into `tests/js/node_modules`.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::process::Command;
use support::{ApiServer, repo_root, tool};

#[test]
fn client_node() {
    tool(
        "CAPW_CLIENT_NODE",
        "tests/js/node_modules/@kubernetes/client-node/package.json",
        "run scripts/test once to install tests/js (npm ci)",
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = ApiServer::start(&tmp.path().join("data"));
    let out = Command::new("node")
        .args(["--test", "--test-reporter=spec"])
        .arg(repo_root().join("tests/js/client-node.test.mjs"))
        .env("KUBECONFIG", &server.kubeconfig)
        .env(
            "CAPW_GADGET_CRD",
            repo_root().join("apiserver/tests/fixtures/gadget-crd.json"),
        )
        .env("HOME", tmp.path())
        .output()
        .expect("node runs (install Node.js 18 or newer)");
    assert!(
        out.status.success(),
        "client-node tests failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
