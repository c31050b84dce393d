//! Compiled components on disk, keyed by wasmtime version, engine compatibility hash and the
//! component's sha256; written atomically and verified before they are loaded.

use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Why a component could not be compiled or loaded.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The bytes are not a valid component for this engine.
    #[error("compiling the component failed: {0}")]
    Compile(String),
    /// Reading or writing the cache directory failed.
    #[error("compiled-artifact cache at {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The sha256 of some bytes, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Where artifacts for this engine live.
pub struct ArtifactCache {
    dir: PathBuf,
}

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Compiled,
    Cached,
}

impl ArtifactCache {
    /// A cache under `root`, in a directory specific to this wasmtime build and engine config.
    pub fn new(root: &Path, engine: &Engine) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let dir = root
            .join(format!("wasmtime-{}", wasmtime_version()))
            .join(format!("{:016x}", h.finish()));
        ArtifactCache { dir }
    }

    /// Loads the compiled form of `bytes` (whose sha256 is `digest`), compiling and storing
    /// it on a miss. A damaged artifact is recompiled, never loaded.
    pub fn load(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
    ) -> Result<(Component, Source), CacheError> {
        let art = self.dir.join(format!("{digest}.cwasm"));
        let sum = self.dir.join(format!("{digest}.cwasm.sha256"));
        if let (Ok(data), Ok(expected)) = (std::fs::read(&art), std::fs::read_to_string(&sum))
            && sha256_hex(&data) == expected.trim()
        {
            // SAFETY: the artifact was produced by this host for this engine configuration
            // (the directory is keyed by version and compatibility hash) and its checksum
            // matches what was written with it, so it is unmodified.
            if let Ok(c) = unsafe { Component::deserialize(engine, &data) } {
                return Ok((c, Source::Cached));
            }
        }
        let compiled = engine
            .precompile_component(bytes)
            .map_err(|e| CacheError::Compile(format!("{e:#}")))?;
        // SAFETY: produced just above by this engine.
        let component = unsafe { Component::deserialize(engine, &compiled) }
            .map_err(|e| CacheError::Compile(format!("{e:#}")))?;
        self.store(&art, &compiled)?;
        self.store(&sum, sha256_hex(&compiled).as_bytes())?;
        Ok((component, Source::Compiled))
    }

    fn store(&self, path: &Path, data: &[u8]) -> Result<(), CacheError> {
        let io = |source| CacheError::Io {
            path: path.display().to_string(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(data).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}

fn wasmtime_version() -> &'static str {
    // The crate version is part of the key so artifacts of another wasmtime are never tried.
    "48"
}
