//! The `capw` command: a Cluster API management plane whose providers are WebAssembly components.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(cli::run(args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The chain of causes says what failed and why; a backtrace would only bury it.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
