//! `docker`: the bundled Docker infrastructure provider, a subset of upstream CAPD that accepts
//! CAPD-shaped manifests. It reaches the Docker engine only through the host's
//! `capw:host/container-runtime`, which shows it nothing but the containers made for it.
//!
//! - A DockerCluster gets a bridge network `capw-<cluster>` and a load-balancer container
//!   `<cluster>-lb` running `capw lb`, published on 127.0.0.1 with a free port: that is the
//!   control-plane endpoint. Its backends file lists the control-plane containers.
//! - A DockerMachine is a container `<cluster>-<machine>` from the node image (or
//!   `spec.customImage`). Its bootstrap data's `write_files` and `runcmd` run through exec, in
//!   the background, and the sentinel file says when they finished. Inside every machine a local
//!   `capw lb` forwards the endpoint (127.0.0.1:PORT) to the load balancer by name, so the endpoint
//!   means the same inside a machine as on the host.
//!
//! Nothing is kept between calls: names and labels find everything again.

mod cloud_config;
mod names;
mod provider;
mod runtime;

pub use provider::Docker;
