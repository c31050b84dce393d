//! The `capw` command: a Cluster API management plane whose providers are WebAssembly components.

mod cli;

use clap::Parser;
use std::process::ExitCode;

/// The host and the embedded API server allocate and free many small objects per request;
/// glibc's allocator spent more CPU on that than the controllers did (`cargo bench -p capw-cli
/// --bench clusters`, see docs/benchmarks.md); musl's, in the static build, spent more still.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long the runtime's tasks get to stop once the command is done.
const SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(5);

fn main() -> ExitCode {
    capw_manager::memory::no_transparent_huge_pages();
    let args = cli::Cli::parse();
    // Colour codes only where a person reads them: `capw up > up.log` stays plain text.
    capw_runtime::logging::install(
        args.log_format == cli::LogFormat::Json,
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
    );
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| {
            let result = rt.block_on(cli::run(args));
            // Dropping the runtime waits for every task to yield; one that never does (a watch
            // retrying without backoff did) must not keep a host that lost its Lease running.
            rt.shutdown_timeout(SHUTDOWN);
            result
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The chain of causes says what failed and why; a backtrace would only bury it.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
