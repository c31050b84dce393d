//! Compiled components on disk, keyed by wasmtime version, engine compatibility hash and the
//! component's sha256; written atomically and verified before they are loaded.
//!
//! A compiled artifact is native code the host maps and runs, so a swapped `.cwasm` must never
//! load. A checksum beside it proves nothing (whoever swaps one recomputes the other): each
//! artifact carries an HMAC-SHA256 over the component digest and the artifact bytes, keyed by a
//! random key in `artifact-key` (0600) that only the host reads. An artifact whose MAC does not
//! verify is recompiled. The cache directories are 0700 and their files 0600.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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
    root: PathBuf,
    dir: PathBuf,
}

const KEY_FILE: &str = "artifact-key";

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
        ArtifactCache {
            root: root.to_path_buf(),
            dir,
        }
    }

    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CacheError + '_ {
        move |source| CacheError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    /// Creates `dir` (and its parents under the root) as 0700.
    fn private_dir(&self, dir: &Path) -> Result<(), CacheError> {
        std::fs::create_dir_all(dir).map_err(Self::io(dir))?;
        let mut d = dir;
        loop {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
                .map_err(Self::io(d))?;
            match d.parent() {
                Some(p) if d != self.root && p.starts_with(&self.root) => d = p,
                _ => return Ok(()),
            }
        }
    }

    /// The host's MAC key, made on first use.
    fn key(&self) -> Result<Vec<u8>, CacheError> {
        let path = self.root.join(KEY_FILE);
        if let Ok(k) = std::fs::read(&path)
            && k.len() == 32
        {
            return Ok(k);
        }
        self.private_dir(&self.root)?;
        let key: [u8; 32] = rand::random();
        self.store(&path, &key)?;
        Ok(key.to_vec())
    }

    fn mac(key: &[u8], digest: &str, artifact: &[u8]) -> Result<Hmac<Sha256>, CacheError> {
        let mut m = Hmac::<Sha256>::new_from_slice(key)
            .map_err(|e| CacheError::Compile(format!("artifact MAC key: {e}")))?;
        m.update(digest.as_bytes());
        m.update(&[0]);
        m.update(artifact);
        Ok(m)
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
        let tag = self.dir.join(format!("{digest}.cwasm.mac"));
        let key = self.key()?;
        if let (Ok(data), Ok(expected)) = (std::fs::read(&art), std::fs::read_to_string(&tag))
            && let Ok(expected) = hex::decode(expected.trim())
            && Self::mac(&key, digest, &data)?
                .verify_slice(&expected)
                .is_ok()
        {
            // SAFETY: the artifact was produced by this host for this engine configuration
            // (the directory is keyed by version and compatibility hash), for this component
            // digest, and its MAC under the host's own key verifies, so it is unmodified.
            if let Ok(c) = unsafe { Component::deserialize(engine, &data) } {
                return Ok((c, Source::Cached));
            }
        }
        let compile = || {
            compiler(engine)
                .as_ref()
                .unwrap_or(engine)
                .precompile_component(bytes)
                .map_err(|e| CacheError::Compile(format!("{e:#}")))
        };
        // Cranelift compiles a component's functions on rayon's threads. The global pool's
        // threads live as long as the process and, idle, never hand back what the allocator
        // cached for them: about 40 MiB after the bundled components (docs/benchmarks.md). A
        // pool of this compile's own ends its threads when it is dropped, and their memory
        // goes back with them; compiling on one thread instead took twice as long.
        let compiled = match rayon::ThreadPoolBuilder::new().build() {
            Ok(pool) => pool.install(compile),
            Err(_) => compile(),
        }?;
        // SAFETY: produced just above, by this engine or one of its configuration.
        let component = unsafe { Component::deserialize(engine, &compiled) }
            .map_err(|e| CacheError::Compile(format!("{e:#}")))?;
        self.private_dir(&self.dir)?;
        self.store(&art, &compiled)?;
        let mac = Self::mac(&key, digest, &compiled)?.finalize().into_bytes();
        self.store(&tag, hex::encode(mac).as_bytes())?;
        Ok((component, Source::Compiled))
    }

    fn store(&self, path: &Path, data: &[u8]) -> Result<(), CacheError> {
        let io = |source| CacheError::Io {
            path: path.display().to_string(),
            source,
        };
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io)?;
        f.write_all(data).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}

/// An engine of `engine`'s configuration to compile on, dropped with what it compiled: an
/// engine keeps Cranelift's compile state (register allocator, arenas; about 13 MiB after the
/// bundled components) for its whole life, and the host's engine compiles only when a
/// component is new. Its artifacts load into `engine` (same compilation settings; the
/// instance allocator is not one of them). `None` falls back to compiling on `engine`.
fn compiler(engine: &Engine) -> Option<Engine> {
    let mut config = engine.config().clone();
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::OnDemand);
    Engine::new(&config).ok()
}

fn wasmtime_version() -> &'static str {
    // The crate version is part of the key so artifacts of another wasmtime are never tried.
    "48"
}
