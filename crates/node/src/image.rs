//! The node image: a static musl `capw` and busybox, put together on this machine and loaded
//! with `docker import`, so nothing is pulled. The Docker provider runs machines and load
//! balancers from it.

use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The tag `capw image build` gives by default, and the one the docker provider runs.
pub const DEFAULT_TAG: &str = concat!("capw-node:", env!("CARGO_PKG_VERSION"));

/// PID 1 of every machine. A restarted container is a rebooted machine: `/run` is cleared, as a
/// tmpfs would be, so the provider sees no sentinel and runs the bootstrap data again.
const INIT: &str = "#!/bin/sh
rm -rf /run/capw /run/cluster-api
mkdir -p /run/capw /var/log /tmp /etc/capw
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
";

const NOHUP: &str = "#!/bin/sh\ntrap '' HUP\nexec \"$@\"\n";

/// The node image's `kubeadm`: capw's, which runs `init` and `join` from the files the
/// kubeadm bootstrap provider's user data writes.
const KUBEADM: &str = "#!/bin/sh\nexec capw kubeadm \"$@\"\n";

const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n";

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(
        "{0} is not a statically linked binary, and node containers have no C library. Build a static capw with \
         `cargo build --release --target x86_64-unknown-linux-musl -p capw-cli` (Debian: apt-get install musl-tools) \
         and pass --capw target/x86_64-unknown-linux-musl/release/capw"
    )]
    NotStatic(PathBuf),
    #[error(
        "no static capw found (looked at {0}). Build one with \
         `cargo build --release --target x86_64-unknown-linux-musl -p capw-cli` (Debian: apt-get install musl-tools), \
         or pass --capw PATH"
    )]
    NoStaticCapw(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{tool} failed: {detail}{}", engine_hint(tool))]
    Tool { tool: String, detail: String },
}

/// The Docker engine is the usual suspect for a failed `docker` command, and never for tar or
/// busybox.
fn engine_hint(tool: &str) -> &'static str {
    if tool.starts_with("docker") {
        ". Is the Docker engine running? (`docker info`)"
    } else {
        ""
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ImageError + '_ {
    move |source| ImageError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// True when the ELF file asks for no program interpreter (no `PT_INTERP`), i.e. it runs
/// without a dynamic loader.
pub fn is_static(path: &Path) -> Result<bool, ImageError> {
    // The ELF header, then the program headers it points at: a few KiB of a binary that may
    // be hundreds of MiB.
    let prefix = |len: u64| -> Result<Vec<u8>, ImageError> {
        use std::io::Read as _;
        let mut bytes = vec![];
        std::fs::File::open(path)
            .and_then(|f| f.take(len).read_to_end(&mut bytes))
            .map_err(io(path))?;
        Ok(bytes)
    };
    // A little-endian field of `n` bytes at `o`.
    let field = |bytes: &[u8], o: u64, n: usize| {
        let o = usize::try_from(o).ok()?;
        let b = bytes.get(o..o.checked_add(n)?)?;
        Some(b.iter().rev().fold(0u64, |v, x| v << 8 | u64::from(*x)))
    };
    let header = prefix(64)?;
    // ELF64 only (class 2): the node image is x86_64.
    if header.get(..4) != Some(b"\x7fELF") || header.get(4) != Some(&2) {
        return Ok(false);
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (
        field(&header, 0x20, 8),
        field(&header, 0x36, 2),
        field(&header, 0x38, 2),
    ) else {
        return Ok(false);
    };
    let table = prefix(phoff.saturating_add(phentsize * phnum))?;
    const PT_INTERP: u64 = 3;
    Ok((0..phnum).all(|i| field(&table, phoff + i * phentsize, 4) != Some(PT_INTERP)))
}

/// The static capw to put in the image: `explicit` when given, else this binary when it is
/// static, else the newest musl build next to it in the cargo target directory.
pub fn find_static_capw(explicit: Option<&Path>) -> Result<PathBuf, ImageError> {
    if let Some(p) = explicit {
        return if is_static(p)? {
            Ok(p.to_path_buf())
        } else {
            Err(ImageError::NotStatic(p.to_path_buf()))
        };
    }
    let exe = std::env::current_exe().map_err(io(Path::new("/proc/self/exe")))?;
    if is_static(&exe)? {
        return Ok(exe);
    }
    // target/{debug,release}/capw (or deps/ in tests) -> target/x86_64-unknown-linux-musl/*/capw
    let mut looked = vec![];
    let mut candidates = vec![];
    for dir in exe.ancestors().skip(1).take(3) {
        for profile in ["release", "debug"] {
            let p = dir
                .join("x86_64-unknown-linux-musl")
                .join(profile)
                .join("capw");
            looked.push(p.display().to_string());
            if let Ok(meta) = p.metadata() {
                candidates.push((meta.modified().ok(), p));
            }
        }
    }
    candidates.sort();
    match candidates.pop() {
        Some((_, p)) if is_static(&p)? => Ok(p),
        Some((_, p)) => Err(ImageError::NotStatic(p)),
        None => Err(ImageError::NoStaticCapw(looked.join(", "))),
    }
}

pub struct BuildOptions<'a> {
    pub tag: &'a str,
    pub capw: &'a Path,
    pub busybox: &'a Path,
}

fn run(tool: &str, cmd: &mut Command) -> Result<String, ImageError> {
    checked(tool, cmd.output())
}

/// A finished command's stdout, or its failure (not started, or stderr when it exited non-zero).
fn checked(tool: &str, out: std::io::Result<std::process::Output>) -> Result<String, ImageError> {
    let failed = |detail: String| ImageError::Tool {
        tool: tool.into(),
        detail,
    };
    let out = out.map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Lays out the root filesystem in `root`: busybox with a link per applet, capw, the init.
fn layout(root: &Path, opts: &BuildOptions) -> Result<(), ImageError> {
    for d in [
        "bin",
        "usr/local/bin",
        "etc/capw",
        "run/capw",
        "var/log",
        "tmp",
        "root",
    ] {
        let p = root.join(d);
        std::fs::create_dir_all(&p).map_err(io(&p))?;
    }
    let bb = root.join("bin/busybox");
    std::fs::copy(opts.busybox, &bb).map_err(io(opts.busybox))?;
    let applets = run("busybox --list", Command::new(opts.busybox).arg("--list"))?;
    for applet in applets
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox")
    {
        let link = root.join("bin").join(applet);
        symlink("busybox", &link).map_err(io(&link))?;
    }
    // A debug capw is hundreds of MiB: a link where the file system allows one, not a copy.
    let capw = root.join("usr/local/bin/capw");
    if std::fs::hard_link(opts.capw, &capw).is_err() {
        std::fs::copy(opts.capw, &capw).map_err(io(opts.capw))?;
    }
    let init = root.join("etc/capw/init.sh");
    std::fs::write(&init, INIT).map_err(io(&init))?;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755)).map_err(io(&init))?;
    // Debian's static busybox has no nohup applet; bootstrap data backgrounds services with it.
    let nohup = root.join("bin/nohup");
    if !nohup.exists() {
        std::fs::write(&nohup, NOHUP).map_err(io(&nohup))?;
        std::fs::set_permissions(&nohup, std::fs::Permissions::from_mode(0o755))
            .map_err(io(&nohup))?;
    }
    let kubeadm = root.join("usr/local/bin/kubeadm");
    std::fs::write(&kubeadm, KUBEADM).map_err(io(&kubeadm))?;
    std::fs::set_permissions(&kubeadm, std::fs::Permissions::from_mode(0o755))
        .map_err(io(&kubeadm))?;
    let passwd = root.join("etc/passwd");
    std::fs::write(&passwd, PASSWD).map_err(io(&passwd))?;
    Ok(())
}

/// The label holding [`content_digest`]: what an image built here was built from.
const CONTENT_LABEL: &str = "dev.capw.node.content";

/// What [`build`] did.
pub struct Built {
    pub id: String,
    /// False when the tag already held an image of the same content, which was kept.
    pub imported: bool,
}

/// A digest of everything the image is made of: the two binaries and the files written here.
/// Two builds with the same digest would import the same filesystem.
fn content_digest(opts: &BuildOptions) -> Result<String, ImageError> {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    for text in [INIT, NOHUP, KUBEADM, PASSWD] {
        hasher.update((text.len() as u64).to_le_bytes());
        hasher.update(text.as_bytes());
    }
    for path in [opts.capw, opts.busybox] {
        let mut file = std::fs::File::open(path).map_err(io(path))?;
        let len = std::io::copy(&mut file, &mut hasher).map_err(io(path))?;
        hasher.update(len.to_le_bytes());
    }
    Ok(format!("sha256:{:x}", hasher.finalize()))
}

/// The id and content label of the image `tag` names now, if any.
fn tagged(tag: &str) -> Option<(String, Option<String>)> {
    let out = run(
        "docker image inspect",
        Command::new("docker")
            .args(["image", "inspect", tag])
            .stdin(Stdio::null()),
    )
    .ok()?;
    let images: serde_json::Value = serde_json::from_str(&out).ok()?;
    let image = images.get(0)?;
    let id = image.get("Id")?.as_str()?.to_string();
    let label = image
        .pointer(&format!("/Config/Labels/{CONTENT_LABEL}"))
        .and_then(serde_json::Value::as_str)
        .map(str::to_string);
    Some((id, label))
}

/// Builds the image and returns its id. `progress` hears each step.
///
/// Building again from the same binaries keeps the image the tag already names, and a new
/// import removes the image it replaces when no container uses it: each import holds a copy of
/// capw, and repeated builds would otherwise fill the engine's disk with untagged ones.
pub fn build(opts: &BuildOptions, mut progress: impl FnMut(&str)) -> Result<Built, ImageError> {
    if !is_static(opts.capw)? {
        return Err(ImageError::NotStatic(opts.capw.to_path_buf()));
    }
    if !is_static(opts.busybox)? {
        return Err(ImageError::NotStatic(opts.busybox.to_path_buf()));
    }
    let digest = content_digest(opts)?;
    let previous = tagged(opts.tag);
    if let Some((id, Some(label))) = &previous
        && *label == digest
    {
        progress(&format!(
            "{} already holds this capw and busybox ({digest}); nothing to import",
            opts.tag
        ));
        return Ok(Built {
            id: id.clone(),
            imported: false,
        });
    }
    let staging = tempfile::tempdir().map_err(io(&std::env::temp_dir()))?;
    progress(&format!(
        "laying out the root filesystem (capw from {}, busybox from {})",
        opts.capw.display(),
        opts.busybox.display()
    ));
    layout(staging.path(), opts)?;
    progress(&format!(
        "importing it as {} (tar | docker import)",
        opts.tag
    ));
    let id = import(staging.path(), opts.tag, &digest)?;
    if let Some((old, _)) = previous
        && old != id
    {
        // Refused while a container or another tag uses it; that image stays, and says why.
        if let Err(ImageError::Tool { detail, .. }) = run(
            "docker image rm",
            Command::new("docker")
                .args(["image", "rm", &old])
                .stdin(Stdio::null()),
        ) {
            progress(&format!(
                "kept the image {} the tag named before: {detail}",
                short(&old)
            ));
        }
    }
    Ok(Built { id, imported: true })
}

fn short(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    hex.get(..12).unwrap_or(hex)
}

/// `tar` of `root` streamed into `docker import`: no tarball on disk next to the layer the
/// engine writes.
fn import(root: &Path, tag: &str, digest: &str) -> Result<String, ImageError> {
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(root)
        .args(["-cf", "-", "."])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ImageError::Tool {
            tool: "tar".into(),
            detail: e.to_string(),
        })?;
    let stream = tar.stdout.take().map_or(Stdio::null(), Stdio::from);
    // The import's end of the pipe is dropped with its Command, so tar never waits on a reader
    // that is gone.
    let docker = Command::new("docker")
        .args([
            "import",
            "--change",
            r#"CMD ["/bin/sh", "/etc/capw/init.sh"]"#,
        ])
        .args(["--change", "ENV PATH=/usr/local/bin:/bin"])
        .args(["--change", &format!("LABEL {CONTENT_LABEL}={digest}")])
        .args(["-", tag])
        .stdin(stream)
        .output();
    // docker's failure first: tar fails too when the import stops reading.
    let id = checked("docker import", docker)?;
    checked("tar", tar.wait_with_output())?;
    Ok(id.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failed_docker_command_points_at_the_engine() {
        let err = |tool: &str| {
            ImageError::Tool {
                tool: tool.into(),
                detail: "boom".into(),
            }
            .to_string()
        };
        assert_eq!(err("busybox --list"), "busybox --list failed: boom");
        assert!(err("docker import").contains("Is the Docker engine running?"));
    }

    #[test]
    fn tells_static_binaries_from_dynamic_ones_and_other_files() {
        // Debian's coreutils link glibc dynamically; scripts/setup installs busybox-static. This
        // test binary is static exactly when built for musl (scripts/test builds for musl).
        assert!(!is_static(Path::new("/usr/bin/env")).unwrap());
        let exe = std::env::current_exe().unwrap();
        assert_eq!(is_static(&exe).unwrap(), cfg!(target_env = "musl"));
        assert!(is_static(Path::new("/bin/busybox")).unwrap());
        let text = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(text.path(), "#!/bin/sh\n").unwrap();
        assert!(!is_static(text.path()).unwrap());
    }
}
