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
    /// The MAC key once read or made. Plugins load concurrently at start: each making its own
    /// key on a fresh data directory left all but the last one's artifacts unverifiable.
    key: std::sync::Mutex<Option<Vec<u8>>>,
}

/// Numbers each temporary file of the process, so concurrent writes never share one.
static TMP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
            key: Default::default(),
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

    /// The host's MAC key, made on first use, once for the process.
    fn key(&self) -> Result<Vec<u8>, CacheError> {
        let mut slot = self
            .key
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(k) = slot.as_ref() {
            return Ok(k.clone());
        }
        let path = self.root.join(KEY_FILE);
        let key = match std::fs::read(&path) {
            Ok(k) if k.len() == 32 => k,
            _ => {
                self.private_dir(&self.root)?;
                let key: [u8; 32] = rand::random();
                self.store(&path, &key)?;
                key.to_vec()
            }
        };
        *slot = Some(key.clone());
        Ok(key)
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
        let seq = TMP_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp{}.{seq}", std::process::id()));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty component with a custom section named `name`, so each has its own digest.
    fn component(name: &str) -> Vec<u8> {
        let mut c = b"\0asm\x0d\x00\x01\x00".to_vec();
        c.extend([0, name.len() as u8 + 1, name.len() as u8]);
        c.extend(name.as_bytes());
        c
    }

    #[test]
    fn plugins_loading_at_once_on_a_fresh_directory_share_one_key_and_all_load() {
        let engine = Engine::default();
        // The first start of a host loads every plugin at once; a few rounds, as it is a race.
        for round in 0..4 {
            let dir = tempfile::tempdir().unwrap();
            let cache = ArtifactCache::new(dir.path(), &engine);
            let components: Vec<Vec<u8>> = (0..6).map(|i| component(&format!("c{i}"))).collect();
            let barrier = std::sync::Barrier::new(components.len());
            std::thread::scope(|s| {
                for c in &components {
                    let (cache, engine, barrier) = (&cache, &engine, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        let loaded = cache.load(engine, &sha256_hex(c), c);
                        assert!(loaded.is_ok(), "round {round}: {:?}", loaded.err());
                    });
                }
            });
            // A later start (a cache of its own) verifies every artifact under the one key.
            let again = ArtifactCache::new(dir.path(), &engine);
            for c in &components {
                let (_, source) = again.load(&engine, &sha256_hex(c), c).unwrap();
                assert_eq!(source, Source::Cached, "round {round}: recompiled");
            }
        }
    }
}
