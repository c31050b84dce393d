//! `capw image build`: the node image for the Docker provider, built locally.

use std::path::PathBuf;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Build the node image with `docker import`: a static musl capw plus busybox, nothing
    /// pulled. Machines run `capw apiserver` and `capw node-agent` from it, load balancers
    /// `capw lb`.
    ///
    /// The static capw comes from --capw, or is this binary when it is static, or the newest
    /// build in target/x86_64-unknown-linux-musl/. Make one with
    /// `cargo build --release --target x86_64-unknown-linux-musl -p capw-cli`.
    ///
    /// The image is labelled with a digest of what it holds: building again from the same
    /// binaries keeps it, and a new import removes the image it replaces unless a container
    /// still uses it.
    Build(BuildArgs),
}

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// The image's tag; DockerMachines without spec.customImage run the default.
    #[arg(long, default_value = capw_node::image::DEFAULT_TAG)]
    pub tag: String,
    /// A statically linked capw to put in the image.
    #[arg(long)]
    pub capw: Option<PathBuf>,
    /// A statically linked busybox (Debian: busybox-static).
    #[arg(long, default_value = "/bin/busybox")]
    pub busybox: PathBuf,
}

pub fn run(cmd: Command) -> anyhow::Result<()> {
    let Command::Build(args) = cmd;
    let capw = capw_node::image::find_static_capw(args.capw.as_deref())?;
    let opts = capw_node::image::BuildOptions {
        tag: &args.tag,
        capw: &capw,
        busybox: &args.busybox,
    };
    let built = capw_node::image::build(&opts, |step| println!("==> {step}"))?;
    if built.imported {
        println!("built {} ({})", args.tag, built.id);
    } else {
        println!("{} is up to date ({})", args.tag, built.id);
    }
    Ok(())
}
