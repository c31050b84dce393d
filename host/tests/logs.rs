//! Log output: plain text without colour codes when stderr is not a terminal, and one JSON
//! object per line with `--log-format json`.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use support::KillOnDrop;
use support::up::Up;

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

/// A `capw up` with the hostile bootstrap provider and the in-memory provider dropped in.
fn up(format: &str) -> Up {
    Up::start(
        &["--log-format", format],
        &["hostile-bootstrap", "inmemory"],
    )
}

/// What a plugin makes the host log, as `plugin_lines` reads it back: one host line.
#[derive(Debug)]
struct PluginLine {
    bytes: usize,
    plugin: String,
    version: String,
    object: String,
    call: u64,
    message: String,
}

/// The host's lines for plugin log calls, in either format; `bytes` counts the newline.
fn plugin_lines(log: &str, json: bool) -> Vec<PluginLine> {
    let target = "capw_runtime::capabilities::log::glue";
    // The host may be mid-line as the log is read: only whole lines count.
    let whole = log.rsplit_once('\n').map_or("", |(w, _)| w);
    whole
        .split('\n')
        .filter(|l| l.contains(target))
        .map(|l| {
            let bytes = l.len() + 1;
            if json {
                let v: serde_json::Value = serde_json::from_str(l).expect("a JSON log line");
                assert_eq!(v["target"], target, "{l}");
                let f = &v["fields"];
                let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
                PluginLine {
                    bytes,
                    plugin: s("plugin"),
                    version: s("version"),
                    object: s("object"),
                    call: f["call"].as_u64().unwrap_or(0),
                    message: s("message"),
                }
            } else {
                // `... glue: MESSAGE plugin=P version=V object=O call=N`
                let field = |k: &str| {
                    l.rsplit(&format!(" {k}="))
                        .next()
                        .and_then(|r| r.split(' ').next())
                        .unwrap_or_default()
                        .to_string()
                };
                let after = l.split_once(&format!("{target}: ")).map_or("", |(_, m)| m);
                let message = after
                    .rsplit_once(" plugin=")
                    .map_or(after, |(m, _)| m)
                    .to_string();
                PluginLine {
                    bytes,
                    plugin: field("plugin"),
                    version: field("version"),
                    object: field("object"),
                    // An untagged line reads as call 0, which the test refuses.
                    call: field("call").parse().unwrap_or(0),
                    message,
                }
            }
        })
        .collect()
}

/// A Cluster on the in-memory provider with stand-alone Machines whose bootstrap configs are
/// the hostile provider's, each logging what its spec says.
fn log_cluster(forged: &[&str]) -> String {
    let machine = |name: &str, spec: serde_json::Value| {
        format!(
            "---\napiVersion: cluster.x-k8s.io/v1beta2\nkind: Machine\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  clusterName: logs\n  bootstrap:\n    configRef: {{apiGroup: bootstrap.cluster.x-k8s.io, kind: HostileConfig, name: {name}}}\n  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: InMemoryMachine, name: {name}}}\n---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: InMemoryMachine\nmetadata: {{name: {name}, namespace: default}}\nspec: {{}}\n---\n{}\n",
            serde_json::json!({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "HostileConfig",
                "metadata": {"name": name, "namespace": "default"}, "spec": spec})
        )
    };
    format!(
        "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {{name: logs, namespace: default}}\nspec:\n  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: InMemoryCluster, name: logs}}\n---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: InMemoryCluster\nmetadata: {{name: logs, namespace: default}}\nspec: {{}}\n{}{}",
        machine("forger", serde_json::json!({"logMessages": forged})),
        machine("flood", serde_json::json!({"logLines": 100000})),
    )
}

/// The lines of `object`'s calls, by call.
fn calls_of<'a>(
    lines: &'a [PluginLine],
    object: &str,
) -> std::collections::BTreeMap<u64, Vec<&'a PluginLine>> {
    let mut calls = std::collections::BTreeMap::<u64, Vec<&PluginLine>>::new();
    for p in lines.iter().filter(|p| p.object == object) {
        calls.entry(p.call).or_default().push(p);
    }
    calls
}

/// The bytes of the flood's fullest call, and of its longest line.
fn flood_extent(lines: &[PluginLine]) -> (usize, usize) {
    let calls = calls_of(lines, "default/flood");
    let fullest = calls
        .values()
        .map(|c| c.iter().map(|p| p.bytes).sum())
        .max()
        .unwrap_or(0);
    let longest = calls.values().flatten().map(|p| p.bytes).max().unwrap_or(0);
    (fullest, longest)
}

/// SECURITY.md "log": line breaks, carriage returns, ANSI escapes and a forged timestamp in a
/// plugin's messages never make a host line of their own: each log call is exactly one line,
/// carrying its plugin, version, object and call; and the per-call cap and the rate are
/// charged what the host's writer really wrote, which the WasmProvider reports.
fn each_log_call_is_one_tagged_line_charged_what_it_wrote(format: &str) {
    let json = format == "json";
    let forged = [
        "first\n2026-12-03T00:00:00.000000Z  WARN capw_runtime: FORGED plugin docker refused: NameMismatch",
        "second\rFORGED overwrite",
        "\u{1b}[2K\u{1b}[1GFORGED ansi \u{1b}[31mred",
        "2026-12-03T00:00:00.000000Z ERROR capw: FORGED timestamp",
    ];
    let up = up(format);
    // Both providers' kinds are applied together: each plugin installs its CRDs once active,
    // in whichever order the two load.
    up.eventually("both providers to serve", 60, || {
        let (ok, out) = support::kubectl(
            &up.kubeconfig,
            &up.home,
            &[
                "get",
                "crd",
                "hostileconfigs.bootstrap.cluster.x-k8s.io",
                "inmemoryclusters.infrastructure.cluster.x-k8s.io",
                "inmemorymachines.infrastructure.cluster.x-k8s.io",
            ],
            None,
        );
        ok.then_some(out)
    });
    up.kubectl(&["apply", "-f", "-"], Some(&log_cluster(&forged)));
    // The log is read while the host writes it: wait for a whole call of each (the forger's
    // four lines, the flood's up to its cap), not merely the first line of each.
    let cap = capw_runtime::Limits::default().log_bytes;
    let lines = up.eventually(
        "a whole call of the forger and a flood call stopped by the cap",
        120,
        || {
            let l = plugin_lines(&up.log_text(), json);
            let forger_whole = calls_of(&l, "default/forger")
                .values()
                .any(|c| c.len() >= forged.len());
            let (fullest, longest) = flood_extent(&l);
            (forger_whole && fullest + 2 * longest >= cap).then_some(l)
        },
    );
    let text = up.log_text();
    // No line of the host's log is the plugin's own: every line that holds forged text is a
    // tagged plugin line, and nothing starts a line or moves the cursor.
    for l in text.split('\n').filter(|l| l.contains("FORGED")) {
        assert!(
            l.contains("capw_runtime::capabilities::log::glue"),
            "a forged line: {l:?}"
        );
        assert!(
            !l.starts_with("FORGED") && !l.starts_with("2026-12-03T00:00:00"),
            "{l:?}"
        );
    }
    assert!(
        !text.contains('\r') && !text.contains('\u{1b}'),
        "raw control characters in the log"
    );
    for p in &lines {
        assert_eq!(p.plugin, "hostile-bootstrap", "{p:?}");
        assert_eq!(p.version, "0.1.0", "{p:?}");
        assert!(p.call > 0, "{p:?}");
        // Escaped by the host, not only by the JSON encoder: the text itself holds none.
        assert!(!p.message.chars().any(char::is_control), "{p:?}");
    }
    // Each call of the forger logged four messages: four lines, the escaped messages.
    let forger: Vec<&PluginLine> = lines
        .iter()
        .filter(|p| p.object == "default/forger")
        .collect();
    let mut calls: Vec<u64> = forger.iter().map(|p| p.call).collect();
    calls.sort_unstable();
    calls.dedup();
    // Lines are dropped only whole, at the end of a call, when the plugin's rate runs dry.
    let want: Vec<String> = forged
        .iter()
        .map(|m| capw_runtime::logging::escape(m).into_owned())
        .collect();
    let mut whole = 0;
    for call in &calls {
        let of_call: Vec<&str> = forger
            .iter()
            .filter(|p| p.call == *call)
            .map(|p| p.message.as_str())
            .collect();
        assert!(of_call.len() <= want.len(), "call {call}: {of_call:?}");
        for (got, m) in of_call.iter().zip(&want) {
            assert_eq!(got, m, "call {call}");
        }
        whole += usize::from(of_call.len() == want.len());
    }
    assert!(
        whole > 0,
        "no call of the forger logged all four messages: {forger:?}"
    );
    // The flood's calls: each stops at the per-call cap (64 KiB) of bytes really written, not
    // of a guessed 128 bytes a line (which let through several times as much).
    for (call, of_call) in &calls_of(&lines, "default/flood") {
        let bytes: usize = of_call.iter().map(|p| p.bytes).sum();
        assert!(
            bytes <= cap + 64,
            "call {call} wrote {bytes} bytes over the cap {cap}"
        );
    }
    let (fullest, longest) = flood_extent(&lines);
    assert!(
        fullest + 2 * longest >= cap
            && longest > capw_runtime::capabilities::log::LOG_LINE_COST + 1,
        "the cap ({cap}) was not what stopped the flood: {fullest} bytes in its fullest call, lines of up to {longest}"
    );
    // What the WasmProvider reports is what the log holds, to the byte.
    up.eventually(
        "status.logBytes to equal the bytes of the plugin's lines",
        90,
        || {
            let written: usize = plugin_lines(&up.log_text(), json)
                .iter()
                .map(|p| p.bytes)
                .sum();
            let wp = up.kubectl(
                &[
                    "get",
                    "wasmprovider",
                    "hostile-bootstrap",
                    "-o",
                    "jsonpath={.status.logBytes}",
                ],
                None,
            );
            (wp.trim().parse::<usize>().ok() == Some(written)).then_some(())
        },
    );
    drop(up.child);
}

#[test]
fn plugin_log_lines_are_one_tagged_line_each_in_text() {
    each_log_call_is_one_tagged_line_charged_what_it_wrote("text");
}

#[test]
fn plugin_log_lines_are_one_tagged_line_each_in_json() {
    each_log_call_is_one_tagged_line_charged_what_it_wrote("json");
}
