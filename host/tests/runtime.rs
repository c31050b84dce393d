//! The plugin runtime against the real components built from `plugins/` by
//! `scripts/build-plugins`: containment of misbehaving plugins, grants, digests, hot reload
//! under load and rollback.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use capw_runtime::cache::ArtifactCache;
use capw_runtime::engine::{self, RuntimeEngine};
use capw_runtime::plugin::{CallError, Context, Plugin, PluginError, ProviderFailure};
use capw_runtime::slot::{Rollout, Slot, SwapError};
use capw_runtime::{Capability, Limits};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn wasm(name: &str) -> Vec<u8> {
    let path = support::repo_root()
        .join("target/plugins")
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/build-plugins first", path.display()))
}

struct Fixture {
    rt: RuntimeEngine,
    cache: ArtifactCache,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let rt = engine::build().expect("engine");
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = ArtifactCache::new(dir.path(), &rt.engine);
    Fixture {
        rt,
        cache,
        _dir: dir,
    }
}

fn log_only() -> BTreeSet<Capability> {
    [Capability::LOG].into()
}

fn limits(timeout: Duration) -> Limits {
    Limits {
        reconcile_timeout: timeout,
        memory_bytes: 64 << 20,
        ..Limits::default()
    }
}

async fn load(f: &Fixture, name: &str, l: Limits) -> Plugin {
    Plugin::load(&f.rt, &f.cache, &wasm(name), None, log_only(), l)
        .await
        .unwrap_or_else(|e| panic!("{name} loads: {e}"))
}

fn ctx(name: &str) -> Context {
    Context::of(
        serde_json::json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "EchoMachine",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"pad": "x".repeat(800)}})
        .to_string(),
    )
}

fn reason(st: &capw_runtime::plugin::MachineStatus) -> String {
    st.common
        .conditions
        .first()
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_reconciles_and_declares_its_kinds() {
    let f = fixture();
    let p = load(&f, "echo-v1", Limits::default()).await;
    assert_eq!(
        (p.metadata.name.as_str(), p.metadata.version.as_str()),
        ("echo", "1.0.0")
    );
    assert_eq!(p.metadata.kinds.len(), 2);
    assert!(
        p.imports.iter().any(|i| i == "capw:host/log@0.2.0"),
        "{:?}",
        p.imports
    );
    let st = p.reconcile_machine(&ctx("m1")).await.expect("reconcile");
    assert!(st.provisioned);
    assert_eq!(st.provider_id.as_deref(), Some("echo:///default/m1"));
    assert_eq!(reason(&st), "EchoedV1");
    let v2 = load(&f, "echo-v2", Limits::default()).await;
    assert_eq!(
        reason(&v2.reconcile_machine(&ctx("m1")).await.expect("v2")),
        "EchoedV2"
    );
}

/// Runs one misbehaving call while a well-behaved plugin keeps being called.
async fn contained(name: &str, timeout: Duration) -> (CallError, Duration, Arc<Plugin>) {
    let f = fixture();
    let bad = Arc::new(load(&f, name, limits(timeout)).await);
    let good = Arc::new(load(&f, "echo-v1", Limits::default()).await);
    let stop = Arc::new(AtomicBool::new(false));
    let ok_calls = Arc::new(AtomicU64::new(0));
    let neighbour = {
        let (good, stop, ok_calls) = (good.clone(), stop.clone(), ok_calls.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                good.reconcile_machine(&ctx("neighbour"))
                    .await
                    .expect("the well-behaved plugin keeps succeeding");
                ok_calls.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        })
    };
    let wait_for = |n: u64| {
        let ok_calls = ok_calls.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            while ok_calls.load(Ordering::Relaxed) < n {
                assert!(
                    Instant::now() < deadline,
                    "the well-behaved neighbour stopped making progress"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    wait_for(1).await;
    let started = Instant::now();
    let err = bad
        .reconcile_machine(&ctx("victim"))
        .await
        .expect_err("a misbehaving call fails");
    let took = started.elapsed();
    // The neighbour kept (and keeps) succeeding around the bad call.
    wait_for(ok_calls.load(Ordering::Relaxed) + 1).await;
    stop.store(true, Ordering::Relaxed);
    neighbour.await.expect("neighbour task");
    // The host is still fine: the same plugin can be called again (a fresh Store).
    let again = bad.reconcile_machine(&ctx("victim")).await;
    assert!(again.is_err());
    (err, took, bad)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_loop_is_cut_off_at_its_deadline() {
    let deadline = Duration::from_secs(1);
    let (err, took, p) = contained("infinite-loop", deadline).await;
    assert_eq!(err, CallError::Timeout(deadline));
    assert!(
        took < deadline + Duration::from_millis(100),
        "took {took:?}"
    );
    assert_eq!(p.counters.timeouts.load(Ordering::Relaxed), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bomb_hits_the_memory_limit() {
    let (err, _, p) = contained("memory-bomb", Duration::from_secs(10)).await;
    assert!(
        matches!(&err, CallError::Trap(m) if m.contains("memory")),
        "{err}"
    );
    assert_eq!(p.counters.traps.load(Ordering::Relaxed), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbounded_recursion_overflows_the_stack() {
    let (err, _, _) = contained("recursion", Duration::from_secs(10)).await;
    assert!(
        matches!(&err, CallError::Trap(m) if m.contains("stack")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_is_a_trap() {
    let (err, _, _) = contained("panic", Duration::from_secs(10)).await;
    assert!(
        matches!(&err, CallError::Trap(m) if m.contains("unreachable")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_output_is_refused() {
    let (err, _, _) = contained("huge-output", Duration::from_secs(10)).await;
    let refused = match &err {
        CallError::InvalidResult(m) => m.contains("over the limit"),
        CallError::Trap(m) => m.contains("memory") || m.contains("fuel"),
        _ => false,
    };
    assert!(refused, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_results_are_rejected() {
    let (err, _, p) = contained("invalid-results", Duration::from_secs(10)).await;
    assert!(
        matches!(&err, CallError::InvalidResult(m) if m.contains("status-patch is not JSON")),
        "{err}"
    );
    assert_eq!(p.counters.errors.load(Ordering::Relaxed), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_grants_no_files_sockets_or_environment() {
    let f = fixture();
    let p = load(&f, "sandbox-escape", Limits::default()).await;
    let st = p
        .reconcile_machine(&ctx("x"))
        .await
        .expect("it reports what it saw");
    let seen: serde_json::Value =
        serde_json::from_str(st.common.status_patch.as_deref().expect("patch")).expect("json");
    assert!(
        seen["file"]
            .as_str()
            .is_some_and(|s| s.starts_with("denied")),
        "{seen}"
    );
    assert!(
        seen["socket"]
            .as_str()
            .is_some_and(|s| s.starts_with("denied")),
        "{seen}"
    );
    assert_eq!(seen["env"], serde_json::json!([]), "{seen}");
}

/// A component built against the previous WIT (plugins/testing/old-wit, capw:provider@0.1.0)
/// is refused before anything runs, with what to do, rather than as an ungranted import.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_of_the_previous_wit_is_refused_with_what_to_do() {
    let f = fixture();
    let err = Plugin::load(
        &f.rt,
        &f.cache,
        &wasm("old-wit"),
        None,
        log_only(),
        Limits::default(),
    )
    .await
    .err()
    .expect("refused");
    assert!(
        matches!(&err, PluginError::OtherWitVersion { found } if found.ends_with("@0.1.0")),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("capw:provider@0.2.0"), "{text}");
    assert!(text.contains("rebuild it with the capw SDK"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ungranted_imports_and_wrong_digests_never_load() {
    let f = fixture();
    let err = Plugin::load(
        &f.rt,
        &f.cache,
        &wasm("ungranted-import"),
        None,
        log_only(),
        Limits::default(),
    )
    .await
    .err()
    .expect("refused");
    assert!(
        matches!(&err, PluginError::UngrantedImport { import, .. } if import == "capw:host/container-runtime@0.2.0"),
        "{err}"
    );
    // Granted, it loads (and its stub capability answers).
    let granted: BTreeSet<Capability> = [Capability::LOG, Capability::CONTAINER_RUNTIME].into();
    let p = Plugin::load(
        &f.rt,
        &f.cache,
        &wasm("ungranted-import"),
        None,
        granted,
        Limits::default(),
    )
    .await
    .expect("loads");
    assert!(matches!(
        p.reconcile_machine(&ctx("x")).await,
        Err(CallError::Provider(ProviderFailure::Other(_)))
    ));

    let err = Plugin::load(
        &f.rt,
        &f.cache,
        &wasm("echo-v1"),
        Some(&"0".repeat(64)),
        log_only(),
        Limits::default(),
    )
    .await
    .err()
    .expect("refused");
    assert!(matches!(err, PluginError::DigestMismatch { .. }), "{err}");
    let err = Plugin::load(
        &f.rt,
        &f.cache,
        b"not wasm",
        None,
        log_only(),
        Limits::default(),
    )
    .await
    .err()
    .expect("refused");
    assert!(matches!(err, PluginError::Invalid(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_artifacts_are_cached_and_verified() {
    let f = fixture();
    let a = load(&f, "echo-v1", Limits::default()).await;
    assert_eq!(a.source, capw_runtime::cache::Source::Compiled);
    let b = load(&f, "echo-v1", Limits::default()).await;
    assert_eq!(b.source, capw_runtime::cache::Source::Cached);
}

/// Every `*.cwasm` under the cache with its MAC file.
fn artifacts(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read cache dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "cwasm") {
                out.push(p);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_artifact_with_its_tag_copied_along_is_recompiled_and_the_cache_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let v1 = load(&f, "echo-v1", Limits::default()).await;
    let v2 = load(&f, "echo-v2", Limits::default()).await;
    let arts = artifacts(f._dir.path());
    let path_of = |digest: &str| {
        arts.iter()
            .find(|p| p.to_string_lossy().contains(digest))
            .cloned()
            .expect("artifact")
    };
    let (a1, a2) = (path_of(&v1.digest), path_of(&v2.digest));
    // An attacker with write access to the cache puts v2's native code and v2's tag (or a
    // checksum recomputed for it) in v1's place.
    std::fs::copy(&a2, &a1).expect("swap artifact");
    let tag = |p: &std::path::Path| p.with_extension("cwasm.mac");
    std::fs::copy(tag(&a2), tag(&a1)).expect("swap tag");
    std::fs::write(
        a1.with_extension("cwasm.sha256"),
        capw_runtime::cache::sha256_hex(&std::fs::read(&a1).expect("read")),
    )
    .expect("forged checksum");
    let again = load(&f, "echo-v1", Limits::default()).await;
    assert_eq!(again.source, capw_runtime::cache::Source::Compiled);
    assert_eq!(again.metadata.version, v1.metadata.version);
    // Private: directories 0700, files 0600, the key included.
    let mut seen = 0;
    let mut dirs = vec![f._dir.path().join("artifact-key")];
    dirs.extend(arts.iter().flat_map(|a| [a.clone(), tag(a)]));
    for p in dirs {
        let mode = std::fs::metadata(&p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", p.display());
        let dir_mode = std::fs::metadata(p.parent().expect("parent"))
            .expect("stat")
            .permissions()
            .mode()
            & 0o777;
        assert!(
            dir_mode == 0o700 || p.parent() == Some(f._dir.path()),
            "{}",
            p.display()
        );
        seen += 1;
    }
    assert!(seen >= 5, "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_under_load_never_fails_a_call() {
    let f = Arc::new(fixture());
    let slot = Arc::new(Slot::new(
        load(&f, "echo-v1", Limits::default()).await,
        Rollout::default(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let callers: Vec<_> = (0..4)
        .map(|i| {
            let (slot, stop, calls) = (slot.clone(), stop.clone(), calls.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let (version, r) = slot.reconcile_machine(&ctx(&format!("m{i}"))).await;
                    let st = r.unwrap_or_else(|e| panic!("a call failed during hot reload: {e}"));
                    // Exactly one version answered: its reason names the same version.
                    assert_eq!(reason(&st), format!("EchoedV{}", &version[..1]));
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for i in 0..100 {
        let next = if i % 2 == 0 { "echo-v2" } else { "echo-v1" };
        slot.swap(load(&f, next, Limits::default()).await)
            .expect("swap");
        // A call that began before a swap completes on the version it started with.
        let pinned = slot.current();
        let in_flight = tokio::spawn({
            let pinned = pinned.clone();
            async move { pinned.reconcile_machine(&ctx("pinned")).await }
        });
        let other = if next == "echo-v2" {
            "echo-v1"
        } else {
            "echo-v2"
        };
        slot.swap(load(&f, other, Limits::default()).await)
            .expect("swap back");
        let st = in_flight.await.expect("task").expect("in-flight call");
        assert_eq!(
            reason(&st),
            format!("EchoedV{}", &pinned.metadata.version[..1])
        );
        slot.swap(load(&f, next, Limits::default()).await)
            .expect("swap again");
    }
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        c.await.expect("caller");
    }
    assert!(calls.load(Ordering::Relaxed) > 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_version_is_rolled_back_and_quarantined() {
    let f = fixture();
    let rollout = Rollout {
        bake: Duration::from_secs(60),
        max_failure_rate: 0.5,
        min_calls: 3,
    };
    let slot = Slot::new(load(&f, "echo-v2", Limits::default()).await, rollout);
    slot.swap(load(&f, "echo-v3", Limits::default()).await)
        .expect("v3 validates (metadata works)");
    let mut versions = vec![];
    for _ in 0..6 {
        let (v, _) = slot.reconcile_machine(&ctx("m")).await;
        versions.push(v);
    }
    assert_eq!(&versions[..3], &["3.0.0", "3.0.0", "3.0.0"]);
    assert_eq!(
        versions.last().map(String::as_str),
        Some("2.0.0"),
        "rolled back: {versions:?}"
    );
    let rb = slot.rollbacks();
    assert_eq!(
        (
            rb.len(),
            rb[0].from_version.as_str(),
            rb[0].to_version.as_str()
        ),
        (1, "3.0.0", "2.0.0")
    );
    let v3 = load(&f, "echo-v3", Limits::default()).await;
    let digest = v3.digest.clone();
    assert!(slot.is_quarantined(&digest));
    assert_eq!(slot.swap(v3), Err(SwapError::Quarantined(digest)));
    let (_, r) = slot.reconcile_machine(&ctx("m")).await;
    assert_eq!(reason(&r.expect("v2 serves again")), "EchoedV2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incompatible_versions_are_not_swapped_in() {
    let f = fixture();
    let slot = Slot::new(
        load(&f, "echo-v1", Limits::default()).await,
        Rollout::default(),
    );
    let other = load(&f, "panic", Limits::default()).await;
    assert!(matches!(slot.swap(other), Err(SwapError::Incompatible(_))));
}

/// SECURITY.md "fair share": a plugin whose calls all spin to their deadline runs only a few of
/// them at once (`CALLS_PER_PLUGIN`), so a neighbour's calls finish while the spinners are still
/// queued. Without the share, 200 spinners on two threads make every wake-up of the neighbour
/// wait for a full round of them (10 ms each), and its calls outlast the spinners' deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_spin_to_their_deadline_do_not_starve_another_plugin() {
    let f = fixture();
    let spin = Arc::new(load(&f, "infinite-loop", limits(Duration::from_secs(10))).await);
    let good = Arc::new(load(&f, "echo-v1", Limits::default()).await);
    let spins_done = Arc::new(AtomicU64::new(0));
    let spinners: Vec<_> = (0..200)
        .map(|i| {
            let (spin, done) = (spin.clone(), spins_done.clone());
            tokio::spawn(async move {
                let r = spin.reconcile_machine(&ctx(&format!("spin{i}"))).await;
                assert!(
                    matches!(r, Err(CallError::Timeout(_))),
                    "a spinner returned"
                );
                done.fetch_add(1, Ordering::Relaxed);
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A neighbour's reconciles wait on I/O between calls (the API, the engine); each wait puts
    // it back in the executor's queue behind every runnable call.
    for i in 0..60 {
        good.reconcile_machine(&ctx(&format!("neighbour{i}")))
            .await
            .expect("the neighbour's call");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(
        spins_done.load(Ordering::Relaxed),
        0,
        "the neighbour's 60 calls took longer than a spinner's whole deadline"
    );
    for s in spinners {
        s.abort();
    }
}
