//! `capw up` (the embedded API server plus the host) and `capw run` (the host against any API
//! server).

use anyhow::Context as _;
use capw::controllers::{dropin, wasmprovider};
use capw::runtime::{Registry, Runtime};
use capw_apiserver::{Config, Server};
use kube::runtime::events::Recorder;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Directory for the API server's data, its kubeconfig and the compiled-plugin cache.
    #[arg(long, env = "CAPW_DATA_DIR", default_value = ".capw")]
    pub data_dir: PathBuf,
    /// Address of the embedded API server (loopback by default; port 0 picks one).
    #[arg(long, env = "CAPW_LISTEN", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// Plugin directory: every NAME.wasm dropped here (with an optional NAME.yaml of grants and
    /// limits) becomes the WasmProvider NAME.
    #[arg(long, env = "CAPW_PLUGINS", default_value = "plugins.d")]
    pub plugins: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The kubeconfig of the management cluster (default: the usual kubeconfig lookup).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Plugin directory, as for `capw up`.
    #[arg(long, env = "CAPW_PLUGINS", default_value = "plugins.d")]
    pub plugins: PathBuf,
    /// Where compiled plugins are cached.
    #[arg(long, env = "CAPW_CACHE_DIR", default_value = ".capw/cache")]
    pub cache_dir: PathBuf,
}

async fn client_from(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig (pass --kubeconfig)")?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// Runs the host's controllers until Ctrl-C, printing a one-line status now and then.
async fn host(client: kube::Client, plugins: PathBuf, cache_dir: PathBuf) -> anyhow::Result<()> {
    std::fs::create_dir_all(&plugins)
        .with_context(|| format!("creating the plugin directory {}", plugins.display()))?;
    wasmprovider::install_crd(&client)
        .await
        .context("installing the WasmProvider CRD")?;
    let runtime = Arc::new(Runtime::new(&cache_dir)?);
    let registry = Arc::new(Registry::default());
    let ctx = Arc::new(wasmprovider::Ctx {
        client: client.clone(),
        plugins_dir: plugins.clone(),
        runtime,
        registry: registry.clone(),
        recorder: Recorder::new(client.clone(), wasmprovider::reporter()),
    });
    tokio::spawn(wasmprovider::run(ctx));
    tokio::spawn(dropin::run(client, plugins.clone(), Duration::from_secs(1)));
    println!(
        "watching {} for plugins (drop NAME.wasm there)",
        plugins.display()
    );
    let status = async {
        let mut last = String::new();
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let active: Vec<String> = registry
                .names()
                .iter()
                .filter_map(|n| {
                    registry
                        .get(n)
                        .map(|s| format!("{n} {}", s.current().metadata.version))
                })
                .collect();
            let line = format!(
                "plugins active: {}",
                if active.is_empty() {
                    "none".into()
                } else {
                    active.join(", ")
                }
            );
            if line != last {
                println!("{line}");
                last = line;
            }
        }
    };
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
        _ = status => {}
    }
    Ok(())
}

pub async fn up(args: UpArgs) -> anyhow::Result<()> {
    let mut config = Config::ephemeral(&args.data_dir);
    config.listen = args.listen;
    let server = Server::start(config)
        .await
        .context("starting the embedded API server")?;
    println!("capw up: API server at {}", server.url());
    println!("kubeconfig: {}", server.kubeconfig_path().display());
    let client = client_from(Some(server.kubeconfig_path())).await?;
    host(client, args.plugins, args.data_dir.join("cache")).await?;
    server.shutdown().await;
    Ok(())
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let client = client_from(args.kubeconfig.as_deref()).await?;
    host(client, args.plugins, args.cache_dir).await
}
