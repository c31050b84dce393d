//! `capw crds`: the CRDs generated from the host's Rust types, as `crds/` holds them.

use anyhow::Context as _;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write one file per CRD into this directory instead of printing them.
    #[arg(long)]
    pub write: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    for (file, crd) in capw_api::crds() {
        let yaml = capw_api::crd_yaml(&crd).context("rendering a CRD")?;
        match &args.write {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                let path = dir.join(file);
                std::fs::write(&path, yaml)
                    .with_context(|| format!("writing {}", path.display()))?;
                println!("wrote {}", path.display());
            }
            None => print!("---\n{yaml}"),
        }
    }
    Ok(())
}
