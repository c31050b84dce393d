//! The drop-in path: a new or changed `NAME.wasm` in the plugin directory (with an optional
//! `NAME.yaml` holding grants, limits and rollout settings) creates or updates the WasmProvider
//! `NAME`. Removing the file keeps the active version running; the WasmProvider then reports
//! the module as missing.
//!
//! The directory is watched with `notify` (inotify on Linux), so a dropped file is applied
//! moments after it is written; a slow poll stays as the fallback for filesystems that send no
//! events (network mounts, some container volumes) and for a watcher that cannot start.

use capw_api::wasmprovider::{
    ContainerRuntimeGrant, WasmProvider, WasmProviderLimits, WasmProviderRollout,
};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const MANAGER: &str = "capw-dropin";

/// `NAME.yaml` beside `NAME.wasm`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    #[serde(default)]
    pub capabilities: Vec<String>,
    #[serde(default)]
    pub limits: Option<WasmProviderLimits>,
    #[serde(default)]
    pub rollout: Option<WasmProviderRollout>,
    #[serde(default)]
    pub container_runtime: Option<ContainerRuntimeGrant>,
    #[serde(default)]
    pub take_over_kinds: Vec<String>,
    #[serde(default)]
    pub aws: Option<capw_api::wasmprovider::AwsGrant>,
}

/// What a file looked like when it was last applied.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    wasm: (SystemTime, u64),
    manifest: Option<(SystemTime, u64)>,
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The WasmProvider a drop-in file asks for, or why the files cannot be used.
pub fn desired(dir: &Path, name: &str) -> Result<serde_json::Value, String> {
    let wasm = dir.join(format!("{name}.wasm"));
    let bytes = std::fs::read(&wasm).map_err(|e| format!("reading {}: {e}", wasm.display()))?;
    let yaml = dir.join(format!("{name}.yaml"));
    let manifest: Manifest = match std::fs::read_to_string(&yaml) {
        Ok(text) => serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", yaml.display()))?,
        Err(_) => Manifest::default(),
    };
    let mut spec = serde_json::json!({
        "module": format!("{name}.wasm"),
        "sha256": crate::cache::sha256_hex(&bytes),
        "capabilities": manifest.capabilities,
    });
    if let Some(l) = manifest.limits {
        spec["limits"] = serde_json::to_value(l).unwrap_or_default();
    }
    if let Some(r) = manifest.rollout {
        spec["rollout"] = serde_json::to_value(r).unwrap_or_default();
    }
    if !manifest.take_over_kinds.is_empty() {
        spec["takeOverKinds"] = serde_json::json!(manifest.take_over_kinds);
    }
    if let Some(g) = manifest.container_runtime {
        spec["containerRuntime"] = serde_json::to_value(g).unwrap_or_default();
    }
    if let Some(g) = manifest.aws {
        spec["aws"] = serde_json::to_value(g).unwrap_or_default();
    }
    Ok(serde_json::json!({
        "apiVersion": "runtime.capw.dev/v1alpha1",
        "kind": "WasmProvider",
        "metadata": {"name": name, "annotations": {"capw.dev/drop-in": "true"}},
        "spec": spec,
    }))
}

/// Scans the directory once; applies what changed and flags what disappeared.
async fn scan(api: &Api<WasmProvider>, dir: &Path, seen: &mut HashMap<String, Seen>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        tracing::warn!(dir = %dir.display(), "the plugin directory cannot be read");
        return;
    };
    let mut present = vec![];
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("wasm") {
            continue;
        }
        let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(String::from) else {
            continue;
        };
        if !is_dns_label(&name) {
            tracing::warn!(file = %path.display(), "ignored: the file name must be a DNS label (lowercase letters, digits, '-') to name its WasmProvider");
            continue;
        }
        present.push(name.clone());
        let Some(wasm) = stamp(&path) else { continue };
        let now = Seen {
            wasm,
            manifest: stamp(&dir.join(format!("{name}.yaml"))),
        };
        if seen.get(&name) == Some(&now) {
            continue;
        }
        match desired(dir, &name) {
            Ok(obj) => match api
                .patch(
                    &name,
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(&obj),
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(plugin = %name, "applied drop-in WasmProvider");
                    seen.insert(name, now);
                }
                Err(e) => {
                    tracing::warn!(plugin = %name, error = %e, "could not apply the drop-in WasmProvider; retrying")
                }
            },
            Err(e) => {
                tracing::warn!(plugin = %name, error = %e, "drop-in ignored until the files are fixed");
                seen.insert(name, now);
            }
        }
    }
    let gone: Vec<String> = seen
        .keys()
        .filter(|n| !present.contains(n))
        .cloned()
        .collect();
    for name in gone {
        seen.remove(&name);
        let stamp = jiff::Timestamp::now().to_string();
        let patch =
            serde_json::json!({"metadata": {"annotations": {"capw.dev/module-removed-at": stamp}}});
        if let Err(e) = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(plugin = %name, error = %e, "could not flag the removed module");
        }
    }
}

/// How long the watcher waits for a burst of events to end before it scans: a copy writes a
/// file in several chunks, and each chunk is an event.
const SETTLE: Duration = Duration::from_millis(15);

/// Watches `dir` until the process ends: scans on every change the watcher reports, and every
/// `poll` whether or not it reports one.
pub async fn run(client: Client, dir: PathBuf, poll: Duration) {
    let api: Api<WasmProvider> = Api::all(client);
    let mut seen = HashMap::new();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    let _watcher = watch(&dir, tx);
    loop {
        scan(&api, &dir, &mut seen).await;
        tokio::select! {
            Some(()) = rx.recv() => {
                // Let the burst end, then take every event it left in one scan.
                tokio::time::sleep(SETTLE).await;
                while rx.try_recv().is_ok() {}
            }
            () = tokio::time::sleep(poll) => {}
        }
    }
}

/// Starts a watcher on `dir` that sends on `tx` at every change; `None` (and the poll alone)
/// when the platform or its limits refuse one. Keep the watcher alive as long as events matter.
fn watch(dir: &Path, tx: tokio::sync::mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    use notify::{EventKind, RecursiveMode, Watcher};
    let handler = move |event: notify::Result<notify::Event>| {
        if let Ok(e) = event
            && !matches!(
                e.kind,
                EventKind::Access(notify::event::AccessKind::Open(_))
            )
        {
            // A full channel already holds a wake-up: this change is in the coming scan.
            let _ = tx.try_send(());
        }
    };
    let started = notify::recommended_watcher(handler)
        .and_then(|mut w| w.watch(dir, RecursiveMode::NonRecursive).map(|()| w));
    match started {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the plugin directory for changes; polling it only");
            None
        }
    }
}
