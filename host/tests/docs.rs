//! The docs' command sessions, run: every ```` ```console ```` block in `README.md` and `docs/*.md`
//! is a session whose `$` lines run in order, in a scratch directory that looks like a clone
//! (`target`, `examples`, `apiserver`, `plugins`, `tests` and `.tools` link to this one), with
//! `capw` on `PATH`.
//! What a block shows under a command is compared with what the command prints, by shape: the
//! same lines and words, where an age (`8s`, `2m3s`), a generated name suffix (`-x7kq2`) and a
//! loopback port count as the same word, and a `...` line stands for any lines. A command the
//! block shows no output for must succeed; one whose output ends in `error:` must fail. So a
//! stale output block fails CI.
//!
//! A few lines do not run as typed, because the test has already done what they do:
//! `scripts/build-plugins` and `cargo build` (done by `scripts/test` before the tests: the test
//! checks their output is there), `alias capw=...` (`capw` is on `PATH`), and `kubectl get ... -w`
//! (a watch never ends; the next reading command is retried until the state the block shows,
//! which is what the watch waits for). A line ending in `&` starts in the background, on ports
//! of its own, and the session waits until its API answers and its plugins are active.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use regex::Regex;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// One `$` line (with its here-document) and the lines the doc shows under it.
#[derive(Debug, PartialEq)]
struct Step {
    command: String,
    expected: Vec<String>,
}

#[derive(Debug)]
struct Block {
    /// `file:line` of the fence.
    at: String,
    steps: Vec<Step>,
}

fn parse(file: &str, text: &str) -> Vec<Block> {
    let mut blocks = vec![];
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        if line.trim() != "```console" {
            continue;
        }
        let mut steps: Vec<Step> = vec![];
        while let Some((_, line)) = lines.next() {
            if line.trim() == "```" {
                break;
            }
            if let Some(command) = line.strip_prefix("$ ") {
                let mut command = command.to_string();
                if let Some(tag) = heredoc_tag(&command) {
                    for (_, body) in lines.by_ref() {
                        command.push('\n');
                        command.push_str(body);
                        if body == tag {
                            break;
                        }
                    }
                }
                steps.push(Step {
                    command,
                    expected: vec![],
                });
            } else if let Some(step) = steps.last_mut() {
                step.expected.push(line.to_string());
            }
        }
        blocks.push(Block {
            at: format!("{file}:{}", n + 1),
            steps,
        });
    }
    blocks
}

fn heredoc_tag(command: &str) -> Option<String> {
    static HEREDOC: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"<<-?'?(\w+)'?").unwrap());
    HEREDOC.captures(command).map(|c| c[1].to_string())
}

/// A line as compared: words, with what changes from run to run made alike.
fn shape(line: &str) -> String {
    static AGE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^(\d+[smhd])+$").unwrap());
    // The suffix alphabet of generated names (no vowels, as apimachinery's).
    static SUFFIX: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"-[bcdfghjklmnpqrstvwxz2456789]{5}\b").unwrap());
    static PORT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"127\.0\.0\.1:\d+").unwrap());
    static MILLIS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\(\d+ ms\)").unwrap());
    MILLIS
        .replace_all(line, "(<ms>)")
        .split_whitespace()
        .map(|w| {
            if AGE.is_match(w) {
                return "<age>".to_string();
            }
            let w = SUFFIX.replace_all(w, "-<suffix>");
            PORT.replace_all(&w, "127.0.0.1:<port>").into_owned()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `actual` has the shape of `expected`; otherwise the first difference.
fn compare(expected: &[String], actual: &str) -> Result<(), String> {
    let actual: Vec<String> = actual.lines().map(shape).collect();
    let mut at = 0;
    let mut skipping = false;
    for e in expected {
        if e.trim() == "..." {
            skipping = true;
            continue;
        }
        let e = shape(e);
        if skipping {
            match actual[at..].iter().position(|a| *a == e) {
                Some(p) => at += p,
                None => return Err(format!("no line like {e:?} after line {at}")),
            }
            skipping = false;
        }
        match actual.get(at) {
            Some(a) if *a == e => at += 1,
            Some(a) => return Err(format!("line {}: expected {e:?}, got {a:?}", at + 1)),
            None => return Err(format!("expected {e:?}, but the output ended")),
        }
    }
    if !skipping && at < actual.len() {
        return Err(format!("unexpected line {}: {:?}", at + 1, actual[at]));
    }
    Ok(())
}

/// A session's scratch clone, its environment and its background processes.
struct Session {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
    background: Vec<Child>,
    /// Shell commands that remove what the session leaves outside its directory (containers),
    /// run before it starts and when it ends, passed or not.
    cleanup: Vec<String>,
}

impl Drop for Session {
    fn drop(&mut self) {
        for c in &mut self.background {
            let _ = c.kill();
            let _ = c.wait();
        }
        for c in &self.cleanup {
            let _ = self.run(c);
        }
    }
}

impl Session {
    fn new() -> Session {
        let dir = tempfile::tempdir().unwrap();
        let root = support::repo_root();
        for link in [
            "target",
            "examples",
            "apiserver",
            "plugins",
            "tests",
            ".tools",
        ] {
            std::os::unix::fs::symlink(root.join(link), dir.path().join(link)).unwrap();
        }
        let bin = dir.path().join(".bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_capw"), bin.join("capw")).unwrap();
        let home = dir.path().join(".home");
        std::fs::create_dir_all(&home).unwrap();
        let env = vec![
            ("HOME".into(), home.display().to_string()),
            ("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())),
            // Sessions run beside other tests: every server picks free ports.
            ("CAPW_LISTEN".into(), "127.0.0.1:0".into()),
            ("CAPW_METRICS".into(), "127.0.0.1:0".into()),
            ("RUST_LOG".into(), "warn".into()),
        ];
        Session {
            dir,
            env,
            background: vec![],
            cleanup: vec![],
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn bash(&self, script: &str) -> Command {
        let mut c = Command::new("bash");
        c.arg("-c")
            .arg(script)
            .current_dir(self.path())
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// Runs `command` with stderr after stdout in one stream, as a terminal shows it.
    fn run(&self, command: &str) -> (bool, String) {
        let out = self
            .bash(&format!("{{ {command}\n}} 2>&1"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    fn kubeconfig(&self) -> PathBuf {
        self.path().join(".capw/kubeconfig")
    }

    /// Starts `command` (without its `&`) and waits until its API answers and the plugins of
    /// its `--plugins` directory are active.
    fn start(&mut self, command: &str) {
        let log = std::fs::File::create(self.path().join("background.log")).unwrap();
        let child = self
            .bash(&format!("exec {command}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.background.push(child);
        let kubeconfig = self.kubeconfig().display().to_string();
        self.wait_for(&format!("{command} to serve"), 120, || {
            self.run(&format!(
                "kubectl --kubeconfig {kubeconfig} get --raw /readyz"
            ))
            .0
        });
        let plugins = command
            .split_whitespace()
            .skip_while(|w| *w != "--plugins")
            .nth(1)
            .map(|d| self.path().join(d));
        for wasm in plugins
            .and_then(|d| std::fs::read_dir(d).ok())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        {
            let name = wasm.file_stem().unwrap().to_string_lossy().into_owned();
            let get = format!(
                "kubectl --kubeconfig {kubeconfig} get wasmprovider {name} -o jsonpath='{{.status.activeVersion}}'"
            );
            self.wait_for(&format!("the {name} plugin to be active"), 180, || {
                let (ok, out) = self.run(&get);
                ok && !out.trim().is_empty()
            });
        }
    }

    fn wait_for(&self, what: &str, secs: u64, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !done() {
            let log =
                std::fs::read_to_string(self.path().join("background.log")).unwrap_or_default();
            assert!(
                Instant::now() < deadline,
                "timed out after {secs}s waiting for {what}; background log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Whether a command only reads, so that it may be repeated until the state settles.
fn reads_only(command: &str) -> bool {
    let first_line = command.lines().next().unwrap_or_default();
    !first_line.contains('>')
        && (first_line.starts_with("kubectl get")
            || first_line.starts_with("kubectl api-resources")
            || (first_line.starts_with("kubectl --kubeconfig") && first_line.contains(" get "))
            || first_line.starts_with("capw describe")
            || first_line.starts_with("docker ps"))
}

/// Runs one block as a session; panics naming the block, the command and the difference.
fn run_block(block: &Block, cleanup: &[&str]) {
    let mut session = Session::new();
    session.cleanup = cleanup.iter().map(|c| c.to_string()).collect();
    for c in &session.cleanup {
        session.run(c);
    }
    for step in &block.steps {
        let command = step.command.as_str();
        let word = |i: usize| command.split_whitespace().nth(i).unwrap_or_default();
        match word(0) {
            "scripts/build-plugins" => {
                support::plugin("bundled");
                continue;
            }
            "cargo" if word(1) == "build" => {
                let musl = support::repo_root().join("target/x86_64-unknown-linux-musl");
                assert!(
                    ["debug", "release"]
                        .iter()
                        .any(|p| musl.join(p).join("capw").exists()),
                    "{}: no static capw in {}: scripts/test builds it",
                    block.at,
                    musl.display()
                );
                continue;
            }
            "alias" => continue,
            "export" => {
                let (name, value) = command["export ".len()..].split_once('=').unwrap();
                let (_, value) = session.run(&format!("printf %s {value}"));
                session.env.push((name.to_string(), value));
                continue;
            }
            _ => {}
        }
        if word(0) == "kubectl" && command.split_whitespace().any(|w| w == "-w") {
            continue;
        }
        let line = command.split('#').next().unwrap_or_default().trim();
        if let Some(background) = line.strip_suffix('&') {
            session.start(background.trim());
            continue;
        }
        let expect_failure = step
            .expected
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .is_some_and(|l| l.starts_with("error:"));
        let deadline =
            Instant::now() + Duration::from_secs(if reads_only(command) { 180 } else { 0 });
        loop {
            let (ok, out) = session.run(&format!("timeout 300 {command}"));
            let verdict = if ok == expect_failure {
                Err(format!(
                    "it {} (expected it to {})",
                    if ok { "succeeded" } else { "failed" },
                    if expect_failure { "fail" } else { "succeed" }
                ))
            } else if step.expected.is_empty() {
                Ok(())
            } else {
                compare(&step.expected, &out)
            };
            match verdict {
                Ok(()) => break,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(500))
                }
                Err(why) => panic!(
                    "{}: `{command}` does not print what the doc shows: {why}\n--- it printed:\n{out}--- background log:\n{}",
                    block.at,
                    std::fs::read_to_string(session.path().join("background.log"))
                        .unwrap_or_default()
                ),
            }
        }
    }
}

fn doc_blocks() -> Vec<Block> {
    let root = support::repo_root();
    let mut files = vec![root.join("README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
        .iter()
        .flat_map(|f| {
            let name = f.strip_prefix(&root).unwrap().display().to_string();
            parse(&name, &std::fs::read_to_string(f).unwrap())
        })
        .collect()
}

/// The blocks whose first line mentions `needle`; there must be one.
fn blocks_with(needle: &str) -> Vec<Block> {
    let blocks: Vec<Block> = doc_blocks()
        .into_iter()
        .filter(|b| b.steps.iter().any(|s| s.command.contains(needle)))
        .collect();
    assert!(!blocks.is_empty(), "no console block runs `{needle}`");
    blocks
}

#[test]
fn every_console_block_is_run_by_a_test_here() {
    let covered = [
        "capw image build",
        "examples/inmemory-cluster.yaml",
        "examples/clusterclass-inmemory.yaml",
        "capw apiserver",
        "echo-v1.wasm",
        "examples/aws-cluster.yaml",
    ];
    for block in doc_blocks() {
        assert!(
            block
                .steps
                .iter()
                .any(|s| covered.iter().any(|c| s.command.contains(c))),
            "{}: a console block no test runs; add a test for it in host/tests/docs.rs",
            block.at
        );
    }
}

#[test]
fn the_api_server_session_prints_what_its_doc_shows() {
    for block in blocks_with("capw apiserver") {
        run_block(&block, &[]);
    }
}

#[test]
fn the_plugin_session_prints_what_its_doc_shows() {
    for block in blocks_with("echo-v1.wasm") {
        run_block(&block, &[]);
    }
}

#[test]
fn the_in_memory_quickstart_prints_what_the_readme_shows() {
    for block in blocks_with("examples/inmemory-cluster.yaml") {
        run_block(&block, &[]);
    }
}

/// Needs the EC2 emulator in `.tools/moto` (`scripts/test` installs it).
#[test]
fn the_aws_session_prints_what_its_doc_shows() {
    for block in blocks_with("examples/aws-cluster.yaml") {
        run_block(&block, &[]);
    }
}

#[test]
fn the_in_memory_topology_session_prints_what_its_doc_shows() {
    for block in blocks_with("examples/clusterclass-inmemory.yaml") {
        run_block(&block, &[]);
    }
}

/// Needs dockerd and the static capw (`scripts/test` builds it; CI starts dockerd).
#[test]
fn the_docker_quickstart_prints_what_the_readme_shows() {
    // A session that failed half-way leaves the cluster's containers and network behind, and
    // the next run's load balancer would meet the old one's name.
    let cleanup = [
        "docker ps -aq --filter label=capw.dev/cluster=default.quickstart | xargs -r docker rm -f",
        "docker network rm docker.capw-quickstart",
        "docker ps -aq --filter label=capw.dev/cluster=default.capi-quickstart | xargs -r docker rm -f",
        "docker network rm docker.capw-capi-quickstart",
    ];
    for block in blocks_with("capw image build") {
        run_block(&block, &cleanup);
    }
}

#[test]
fn a_drifted_output_block_fails() {
    let expected: Vec<String> = [
        "NAME                                  AVAILABLE   PHASE         AGE",
        "cluster.cluster.x-k8s.io/quickstart   True        Provisioned   8s",
    ]
    .map(String::from)
    .to_vec();
    let same =
        "NAME AVAILABLE PHASE AGE\ncluster.cluster.x-k8s.io/quickstart True Provisioned 2m3s\n";
    assert_eq!(compare(&expected, same), Ok(()));
    // A renamed column, a changed value, a missing line and an extra line all fail.
    for drifted in [
        "NAME READY PHASE AGE\ncluster.cluster.x-k8s.io/quickstart True Provisioned 8s\n",
        "NAME AVAILABLE PHASE AGE\ncluster.cluster.x-k8s.io/quickstart False Provisioned 8s\n",
        "NAME AVAILABLE PHASE AGE\n",
        "NAME AVAILABLE PHASE AGE\ncluster.cluster.x-k8s.io/quickstart True Provisioned 8s\nmore\n",
    ] {
        assert!(compare(&expected, drifted).is_err(), "{drifted}");
    }
    // `...` stands for any lines; the line after it must still come.
    let elided: Vec<String> = ["a", "...", "z"].map(String::from).to_vec();
    assert_eq!(compare(&elided, "a\nb\nc\nz\n"), Ok(()));
    assert!(compare(&elided, "a\nb\nc\n").is_err());
    assert_eq!(
        shape(
            "machine.cluster.x-k8s.io/demo-control-plane-h2ltw  True   25s  127.0.0.1:32769->6443/tcp"
        ),
        "machine.cluster.x-k8s.io/demo-control-plane-<suffix> True <age> 127.0.0.1:<port>->6443/tcp"
    );
    assert_eq!(
        shape("  ok   SampleMachine delete (12 ms)"),
        "ok SampleMachine delete (<ms>)"
    );
}

#[test]
fn a_session_parses_commands_heredocs_and_outputs() {
    let text =
        "x\n```console\n$ kubectl apply -f - <<'YAML'\nkind: W\nYAML\nw created\n$ true\n```\n";
    let blocks = parse("t.md", text);
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].at, "t.md:2");
    assert_eq!(
        blocks[0].steps,
        vec![
            Step {
                command: "kubectl apply -f - <<'YAML'\nkind: W\nYAML".into(),
                expected: vec!["w created".into()],
            },
            Step {
                command: "true".into(),
                expected: vec![],
            },
        ]
    );
}
