//! Plugin runtime measurements, side by side in one run:
//!
//! (a) a fresh-instance call (instantiate + `reconcile` with ~1 KB of context) through the
//!     async/epoch path, p50 and p99, against the same provider logic compiled natively;
//! (b) compile time and cached-load time of a ~1 MB component;
//! (c) swap latency (load, validate, smoke-test, swap) cold and with a warm artifact cache;
//! (d) resident memory per concurrent call;
//! (e) drop-in end to end: from writing `NAME.wasm` into a running `capw up`'s plugin directory
//!     to the WasmProvider's status naming the new version as active, p50 and max over 20
//!     swaps (warm artifact cache). With `CAPW_BASELINE=/path/to/capw`, the same is measured for
//!     that binary in the same run, side by side.
//!
//! Run: `scripts/build-plugins && cargo bench -p capw-cli --bench runtime`.

// Benchmark code: a failed step aborts the run where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capw_runtime::cache::ArtifactCache;
use capw_runtime::plugin::{Context, Plugin};
use capw_runtime::slot::{Rollout, Slot};
use capw_runtime::{Capability, Limits, engine};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn wasm(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/plugins")
        .join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/build-plugins first", path.display()))
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn ctx() -> Context {
    let object = serde_json::json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "EchoMachine",
        "metadata": {"name": "m1", "namespace": "default", "uid": "00000000-0000-4000-8000-000000000000"},
        "spec": {"pad": "x".repeat(850)}});
    Context::of(object.to_string())
}

/// What echo's `reconcile_machine` does, compiled into the host.
fn native_echo(ctx: &Context) -> (bool, String, String) {
    let v: serde_json::Value = serde_json::from_str(&ctx.object).unwrap_or_default();
    let s = |p: &str| {
        v.pointer(p)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let id = format!(
        "echo:///{}/{}",
        s("/metadata/namespace"),
        s("/metadata/name")
    );
    let patch = serde_json::json!({"echo": "1.0.0"}).to_string();
    (true, id, patch)
}

fn grants() -> BTreeSet<Capability> {
    [Capability::LOG].into()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rt = engine::build().expect("engine");
    println!("allocator: {:?}", rt.allocator);
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = ArtifactCache::new(dir.path(), &rt.engine);
    let echo = Plugin::load(
        &rt,
        &cache,
        &wasm("echo-v1"),
        None,
        grants(),
        Limits::default(),
    )
    .await
    .expect("echo");
    let c = ctx();

    // (a)
    let n = 3000;
    for _ in 0..200 {
        echo.reconcile_machine(&c).await.expect("warm-up");
    }
    let mut wasm_lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let st = echo.reconcile_machine(&c).await.expect("call");
        wasm_lat.push(t.elapsed());
        std::hint::black_box(st);
    }
    let mut native_lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        std::hint::black_box(native_echo(std::hint::black_box(&c)));
        native_lat.push(t.elapsed());
    }
    let (wp50, wp99) = (pct(&mut wasm_lat, 0.5), pct(&mut wasm_lat, 0.99));
    let np50 = pct(&mut native_lat, 0.5);
    println!(
        "(a) fresh instance + reconcile (~1 KB context): p50 {wp50:?}, p99 {wp99:?}; native {np50:?}; ratio p50 {:.1}x",
        wp50.as_secs_f64() / np50.as_secs_f64()
    );

    // (b)
    let bulk = wasm("bulk");
    let cold_dir = tempfile::tempdir().expect("tempdir");
    let cold = ArtifactCache::new(cold_dir.path(), &rt.engine);
    let digest = capw_runtime::cache::sha256_hex(&bulk);
    let t = Instant::now();
    cold.load(&rt.engine, &digest, &bulk).expect("compile");
    let compile = t.elapsed();
    let mut cached = vec![];
    for _ in 0..20 {
        let t = Instant::now();
        cold.load(&rt.engine, &digest, &bulk).expect("cached load");
        cached.push(t.elapsed());
    }
    println!(
        "(b) {} KB component: compile {compile:?}; cached load (verify + deserialize) p50 {:?}",
        bulk.len() / 1024,
        pct(&mut cached, 0.5)
    );

    // (c)
    let slot = Slot::new(
        Plugin::load(
            &rt,
            &cache,
            &wasm("echo-v1"),
            None,
            grants(),
            Limits::default(),
        )
        .await
        .expect("v1"),
        Rollout::default(),
    );
    let v2 = wasm("echo-v2");
    let swap_dir = tempfile::tempdir().expect("tempdir");
    let swap_cache = ArtifactCache::new(swap_dir.path(), &rt.engine);
    let t = Instant::now();
    slot.swap(
        Plugin::load(&rt, &swap_cache, &v2, None, grants(), Limits::default())
            .await
            .expect("v2"),
    )
    .expect("swap");
    let swap_cold = t.elapsed();
    slot.swap(
        Plugin::load(
            &rt,
            &swap_cache,
            &wasm("echo-v1"),
            None,
            grants(),
            Limits::default(),
        )
        .await
        .expect("v1"),
    )
    .expect("swap back");
    let t = Instant::now();
    slot.swap(
        Plugin::load(&rt, &swap_cache, &v2, None, grants(), Limits::default())
            .await
            .expect("v2"),
    )
    .expect("swap");
    let swap_warm = t.elapsed();
    println!(
        "(c) swap (validate, compile or load, smoke metadata(), swap): cold {swap_cold:?}, cached {swap_warm:?} (drop-in end to end in (e))"
    );

    // (d)
    let spin = Arc::new(
        Plugin::load(
            &rt,
            &cache,
            &wasm("infinite-loop"),
            None,
            grants(),
            Limits {
                reconcile_timeout: Duration::from_millis(500),
                ..Limits::default()
            },
        )
        .await
        .expect("spin"),
    );
    let before = rss_kib();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(before));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let concurrent = 64;
    let calls: Vec<_> = (0..concurrent)
        .map(|_| {
            let spin = spin.clone();
            tokio::spawn(async move { spin.reconcile_machine(&ctx()).await })
        })
        .collect();
    for c in calls {
        let _ = c.await;
    }
    sampler.abort();
    let delta = peak
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_sub(before);
    println!(
        "(d) {concurrent} concurrent calls: peak RSS +{delta} KiB, {} KiB per call",
        delta / concurrent
    );
    // (e)
    let ours = dropin_latency(std::path::Path::new(env!("CARGO_BIN_EXE_capw")), 20).await;
    report_dropin("this build", &ours);
    if let Some(base) = std::env::var_os("CAPW_BASELINE") {
        let theirs = dropin_latency(std::path::Path::new(&base), 20).await;
        report_dropin(&format!("baseline {}", base.to_string_lossy()), &theirs);
        println!(
            "(e) ratio of p50s, baseline / this build: {:.1}",
            pct(&mut theirs.clone(), 0.5).as_secs_f64() / pct(&mut ours.clone(), 0.5).as_secs_f64()
        );
    }
}

fn report_dropin(label: &str, v: &[Duration]) {
    let mut v = v.to_vec();
    println!(
        "(e) drop-in, file written -> status names the new version ({label}): p50 {:?}, max {:?} over {} swaps",
        pct(&mut v, 0.5),
        pct(&mut v, 1.0),
        v.len()
    );
}

/// Runs `capw up` from `bin` with an empty plugin directory, then swaps echo 1.0.0 and 2.0.0 in
/// place `rounds` times, timing each from the write to the status that names the new version.
async fn dropin_latency(bin: &std::path::Path, rounds: usize) -> Vec<Duration> {
    use capw_api::wasmprovider::WasmProvider;
    use std::io::BufRead;
    let dir = tempfile::tempdir().expect("tempdir");
    let plugins = dir.path().join("plugins");
    let mut child = std::process::Command::new(bin)
        .args([
            "up",
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .arg("--plugins")
        .arg(&plugins)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("capw up starts");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut kubeconfig = None;
    for line in lines.by_ref() {
        let line = line.expect("line");
        if let Some(k) = line.strip_prefix("kubeconfig: ") {
            kubeconfig = Some(std::path::PathBuf::from(k));
        }
        if line.starts_with("watching ") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let kc = kube::config::Kubeconfig::read_from(kubeconfig.expect("kubeconfig line"))
        .expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    let api: kube::Api<WasmProvider> =
        kube::Api::all(kube::Client::try_from(config).expect("client"));
    let file = plugins.join("echo.wasm");
    let serving = |version: &'static str| {
        let api = api.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let active = api
                    .get_opt("echo")
                    .await
                    .ok()
                    .flatten()
                    .and_then(|w| w.status?.active_version);
                if active.as_deref() == Some(version) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "echo {version} never became active"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    };
    // Both versions once, so their artifacts are cached before timing.
    for (name, version) in [
        ("echo-v1", "1.0.0"),
        ("echo-v2", "2.0.0"),
        ("echo-v1", "1.0.0"),
    ] {
        std::fs::copy(wasm_path(name), &file).expect("drop");
        serving(version).await;
    }
    let mut took = vec![];
    for i in 0..rounds {
        let (name, version) = if i % 2 == 0 {
            ("echo-v2", "2.0.0")
        } else {
            ("echo-v1", "1.0.0")
        };
        let bytes = wasm(name);
        let t = Instant::now();
        std::fs::write(&file, &bytes).expect("write");
        serving(version).await;
        took.push(t.elapsed());
    }
    let _ = child.kill();
    let _ = child.wait();
    took
}

fn wasm_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/plugins")
        .join(format!("{name}.wasm"))
}
