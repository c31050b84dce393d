//! The one wasmtime engine of the process.

use std::sync::Arc;
use std::time::Duration;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Why the engine could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// wasmtime rejected the configuration even without the pooling allocator.
    #[error("building the wasmtime engine failed: {0}")]
    Build(String),
}

/// How instance memory is allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocator {
    Pooling,
    /// The pool could not reserve its address space (e.g. under an RLIMIT_AS).
    OnDemand,
}

/// Slots the pool keeps: calls running at the same time.
pub const MAX_CONCURRENT_CALLS: u32 = 128;
/// The ceiling on any one linear memory, whatever a plugin's limits say.
pub const MAX_MEMORY: usize = 256 << 20;

fn base_config() -> Config {
    let mut c = Config::new();
    c.wasm_component_model(true);
    c.epoch_interruption(true);
    // Providers are sync-lifted WASI P2 components: skip the component-model-async machinery
    // every Store would otherwise set up.
    c.concurrency_support(false);
    c.max_wasm_stack(512 << 10);
    c.async_stack_size(2 << 20);
    c.memory_reservation(4 << 30);
    c
}

fn pooling() -> PoolingAllocationConfig {
    let mut p = PoolingAllocationConfig::default();
    p.total_component_instances(MAX_CONCURRENT_CALLS)
        .total_core_instances(MAX_CONCURRENT_CALLS * 8)
        .total_memories(MAX_CONCURRENT_CALLS * 2)
        .total_tables(MAX_CONCURRENT_CALLS * 4)
        .total_stacks(MAX_CONCURRENT_CALLS)
        .max_core_instances_per_component(20)
        .max_memories_per_component(4)
        .max_tables_per_component(20)
        .max_memory_size(MAX_MEMORY)
        // Reset the first pages of a reused slot with memset instead of madvise: every call
        // gets a fresh instance, so page faults on those pages would be paid on every call.
        .linear_memory_keep_resident(128 << 10)
        .table_keep_resident(64 << 10);
    p
}

/// The engine and its epoch ticker (10 ms): deadlines are measured in ticks.
pub struct RuntimeEngine {
    pub engine: Engine,
    pub allocator: Allocator,
    /// What granted host interfaces call into.
    pub services: Arc<super::Services>,
    _ticker: Arc<Ticker>,
}

struct Ticker {
    stop: std::sync::atomic::AtomicBool,
}

impl Drop for RuntimeEngine {
    fn drop(&mut self) {
        self._ticker
            .stop
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Builds the engine: the pooling allocator when its reservation succeeds, on-demand otherwise.
pub fn build() -> Result<RuntimeEngine, EngineError> {
    let mut pooled = base_config();
    pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling()));
    let (engine, allocator) = match Engine::new(&pooled) {
        Ok(e) => (e, Allocator::Pooling),
        Err(e) => {
            tracing::warn!(error = %e, "the pooling allocator could not reserve its memory; allocating per instance");
            (
                Engine::new(&base_config()).map_err(|e| EngineError::Build(e.to_string()))?,
                Allocator::OnDemand,
            )
        }
    };
    let ticker = Arc::new(Ticker {
        stop: std::sync::atomic::AtomicBool::new(false),
    });
    let weak = engine.weak();
    let t = ticker.clone();
    std::thread::Builder::new()
        .name("capw-epoch".into())
        .spawn(move || {
            while !t.stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
                match weak.upgrade() {
                    Some(e) => e.increment_epoch(),
                    None => return,
                }
            }
        })
        .map_err(|e| EngineError::Build(format!("starting the epoch ticker: {e}")))?;
    Ok(RuntimeEngine {
        engine,
        allocator,
        services: Arc::default(),
        _ticker: ticker,
    })
}
