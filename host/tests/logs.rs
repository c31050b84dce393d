//! Log output: plain text without colour codes when stderr is not a terminal, and one JSON
//! object per line with `--log-format json`.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use support::KillOnDrop;

/// Starts `capw apiserver` with `extra` flags and returns its first stderr line.
fn first_log_line(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_capw"))
            .args(extra)
            .args(["apiserver", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("capw apiserver starts"),
    );
    let stderr = child.stderr.take().expect("stderr");
    BufReader::new(stderr)
        .lines()
        .next()
        .expect("a log line")
        .expect("utf-8")
}

#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    let line = first_log_line(&[]);
    assert!(line.contains("capw-apiserver serving"), "{line}");
    assert!(
        !line.contains('\u{1b}'),
        "ANSI codes in piped logs: {line:?}"
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    let line = first_log_line(&["--log-format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(v["level"], "INFO");
    assert_eq!(v["fields"]["message"], "capw-apiserver serving");
}
