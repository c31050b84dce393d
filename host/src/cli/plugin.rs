//! `capw plugin inspect|verify FILE.wasm`.

use anyhow::Context as _;
use capw_runtime::cache::ArtifactCache;
use capw_runtime::plugin::{self, CallError, Context, Plugin, provider_type_name};
use capw_runtime::{Capability, Limits, engine};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Print a component's metadata, imports, exports and sizes (compiles it; runs only
    /// `metadata()`).
    Inspect {
        /// The component (`.wasm`) to look at.
        file: PathBuf,
    },
    /// Check a component against the provider contract: valid metadata, the trust checks
    /// loading applies (its name is the one it will be registered under, its kinds are in
    /// provider groups, its CRDs are exactly its kinds' and take no name another plugin's CRD
    /// has), CRDs that parse and carry the contract label, and `reconcile`/`delete` on sample
    /// objects of every kind returning within limits without trapping. Exits non-zero with a
    /// report otherwise.
    Verify {
        /// The component (`.wasm`) to check.
        file: PathBuf,
        /// The WasmProvider name it will be registered under; dropped into a plugin directory
        /// as NAME.wasm, that is NAME. Default: the file's name without `.wasm`.
        #[arg(long)]
        name: Option<String>,
        /// A plugin directory whose components it must fit beside: no kind or CRD name of
        /// theirs may be taken (as `capw up --plugins DIR` would refuse it).
        #[arg(long, value_name = "DIR")]
        beside: Option<PathBuf>,
        /// Deadline of each sample call, in seconds.
        #[arg(long, default_value_t = 5)]
        timeout: u64,
    },
}

fn all_capabilities() -> BTreeSet<Capability> {
    capw_runtime::capabilities::ALL
        .iter()
        .filter_map(|c| Capability::parse(c.name()))
        .collect()
}

fn read(file: &PathBuf) -> anyhow::Result<Vec<u8>> {
    std::fs::read(file).with_context(|| format!("reading {}", file.display()))
}

pub async fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Inspect { file } => inspect(&file).await,
        Command::Verify {
            file,
            name,
            beside,
            timeout,
        } => verify(&file, name, beside.as_deref(), timeout).await,
    }
}

async fn inspect(file: &PathBuf) -> anyhow::Result<()> {
    let bytes = read(file)?;
    let rt = engine::build()?;
    let tmp = tempfile::tempdir().context("creating a scratch cache")?;
    let cache = ArtifactCache::new(tmp.path(), &rt.engine);
    let (info, _) = plugin::inspect(&rt, &cache, &bytes)?;
    println!("file:     {}", file.display());
    println!("size:     {} bytes", info.size);
    println!("sha256:   {}", info.digest);
    match Plugin::load(
        &rt,
        &cache,
        &bytes,
        None,
        all_capabilities(),
        Limits::default(),
    )
    .await
    {
        Ok(p) => {
            let m = &p.metadata;
            println!("name:     {}", m.name);
            println!("version:  {}", m.version);
            println!("type:     {}", provider_type_name(m.provider_type));
            println!("contract: {}", m.contract_version);
            println!("kinds:");
            for (k, crd) in m.kinds.iter().zip(&m.crds) {
                println!(
                    "  {}.{}/{} (CRD {} bytes)",
                    k.kind,
                    k.group,
                    k.version,
                    crd.len()
                );
            }
        }
        Err(e) => println!("metadata: unavailable ({e})"),
    }
    println!("imports:");
    for i in &info.imports {
        println!("  {i}");
    }
    println!("exports:");
    for e in &info.exports {
        println!("  {e}");
    }
    Ok(())
}

fn sample(group: &str, version: &str, kind: &str) -> Context {
    let object = serde_json::json!({
        "apiVersion": format!("{group}/{version}"),
        "kind": kind,
        "metadata": {"name": "verify-sample", "namespace": "default", "uid": "00000000-0000-4000-8000-000000000000", "generation": 1},
        "spec": {},
    });
    let cluster = serde_json::json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "verify-cluster", "namespace": "default"}, "spec": {}});
    Context {
        object: object.to_string(),
        cluster: Some(cluster.to_string()),
        machine: None,
        infrastructure_cluster: None,
        bootstrap_data: None,
        secrets: vec![],
        owned_machines: vec![],
    }
}

struct Report {
    problems: usize,
}

impl Report {
    fn line(&mut self, ok: bool, what: &str) {
        if !ok {
            self.problems += 1;
        }
        println!("  {} {what}", if ok { "ok  " } else { "FAIL" });
    }

    fn call<T>(&mut self, what: &str, started: Instant, r: Result<T, CallError>) {
        let ms = started.elapsed().as_millis();
        match r {
            Ok(_) => self.line(true, &format!("{what} ({ms} ms)")),
            // The contract allows a provider to refuse a sample object with an error.
            Err(CallError::Provider(e)) => {
                self.line(true, &format!("{what} answered with {e} ({ms} ms)"))
            }
            Err(e) => self.line(false, &format!("{what}: {e}")),
        }
    }
}

/// What the plugins in `dir` (other than `file`) hold, each named after its file.
async fn claims_beside(
    rt: &capw_runtime::engine::RuntimeEngine,
    cache: &ArtifactCache,
    dir: &std::path::Path,
    file: &std::path::Path,
) -> anyhow::Result<Vec<capw_runtime::trust::Claim>> {
    let mut out = vec![];
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        let Some(stem) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|_| path.extension().is_some_and(|e| e == "wasm"))
        else {
            continue;
        };
        if path.canonicalize().ok() == file.canonicalize().ok() {
            continue;
        }
        let bytes = read(&path)?;
        let p = Plugin::load(
            rt,
            cache,
            &bytes,
            None,
            all_capabilities(),
            Limits::default(),
        )
        .await
        .with_context(|| format!("loading {}", path.display()))?;
        out.push(capw_runtime::trust::Claim::of(stem, &p.metadata));
    }
    Ok(out)
}

async fn verify(
    file: &PathBuf,
    name: Option<String>,
    beside: Option<&std::path::Path>,
    timeout: u64,
) -> anyhow::Result<()> {
    let bytes = read(file)?;
    let rt = engine::build()?;
    let tmp = tempfile::tempdir().context("creating a scratch cache")?;
    let cache = ArtifactCache::new(tmp.path(), &rt.engine);
    let limits = Limits {
        reconcile_timeout: std::time::Duration::from_secs(timeout),
        ..Limits::default()
    };
    println!("verifying {}", file.display());
    let mut report = Report { problems: 0 };
    let plugin = match Plugin::load(&rt, &cache, &bytes, None, all_capabilities(), limits).await {
        Ok(p) => p,
        Err(e) => {
            report.line(false, &format!("load: {e}"));
            anyhow::bail!(
                "{} does not meet the provider contract (1 problem)",
                file.display()
            );
        }
    };
    let m = &plugin.metadata;
    report.line(
        true,
        &format!(
            "metadata: {} {} ({}, contract {})",
            m.name,
            m.version,
            provider_type_name(m.provider_type),
            m.contract_version
        ),
    );
    report.line(
        !m.kinds.is_empty(),
        &format!("serves {} kinds", m.kinds.len()),
    );
    let name = name.unwrap_or_else(|| {
        file.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let others = match beside {
        Some(dir) => claims_beside(&rt, &cache, dir, file).await?,
        None => vec![],
    };
    match capw_runtime::trust::check(&name, m, &others, &[]) {
        Ok(()) => report.line(
            true,
            &format!(
                "trust: registered as {name}, its kinds and CRDs are its own{}",
                beside.map_or(String::new(), |d| format!(" beside {}", d.display()))
            ),
        ),
        Err(e) => report.line(false, &format!("trust ({}): {e}", e.reason())),
    }
    report.line(
        true,
        &format!(
            "{} CRDs parse and carry the label cluster.x-k8s.io/v1beta2",
            m.crds.len()
        ),
    );
    use plugin::KindRole;
    let sample_kind = |kind: &str, role| plugin::ServedKind {
        group: "infrastructure.cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        kind: kind.into(),
        role,
    };
    let kinds = if m.kinds.is_empty() {
        vec![
            sample_kind("SampleCluster", KindRole::InfrastructureCluster),
            sample_kind("SampleMachine", KindRole::InfrastructureMachine),
        ]
    } else {
        m.kinds.clone()
    };
    // Each kind is called through the interface of the role it declares; templates are only
    // cloned by the host, so there is nothing to call.
    for k in kinds {
        let (kind, ctx) = (&k.kind, sample(&k.group, &k.version, &k.kind));
        let reconcile = format!("{kind} reconcile");
        let delete = format!("{kind} delete");
        let t = Instant::now();
        match k.role {
            KindRole::InfrastructureCluster => {
                report.call(&reconcile, t, plugin.reconcile_cluster(&ctx).await);
                let t = Instant::now();
                report.call(&delete, t, plugin.delete_cluster(&ctx).await);
            }
            KindRole::InfrastructureMachine => {
                report.call(&reconcile, t, plugin.reconcile_machine(&ctx).await);
                let t = Instant::now();
                report.call(&delete, t, plugin.delete_machine(&ctx).await);
            }
            KindRole::BootstrapConfig => {
                report.call(&reconcile, t, plugin.reconcile_bootstrap(&ctx).await);
                let t = Instant::now();
                report.call(&delete, t, plugin.delete_bootstrap(&ctx).await);
            }
            KindRole::ControlPlane(_) => {
                report.call(&reconcile, t, plugin.reconcile_control_plane(&ctx).await);
                let t = Instant::now();
                report.call(&delete, t, plugin.delete_control_plane(&ctx).await);
            }
            KindRole::InfrastructureClusterTemplate(_)
            | KindRole::InfrastructureMachineTemplate(_)
            | KindRole::InfrastructureMachinePoolTemplate(_)
            | KindRole::BootstrapConfigTemplate(_)
            | KindRole::ControlPlaneTemplate(_) => {}
        }
    }
    if report.problems > 0 {
        anyhow::bail!(
            "{} does not meet the provider contract ({} problems)",
            file.display(),
            report.problems
        );
    }
    println!("{} meets the provider contract", file.display());
    Ok(())
}
