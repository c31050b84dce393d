//! `capw:host/container-runtime` on the Docker engine, through bollard.
//!
//! Every container and network is created with the host's ownership labels, naming the plugin
//! it was created for; a plugin sees and touches only those. Asking for anything else, a
//! container another plugin or a person made, answers `not-found`, exactly as if it did not
//! exist. Every call has a deadline.
//!
//! Names are namespaced per plugin: the engine knows a plugin's container or network `NAME` as
//! `PLUGIN.NAME` (plugin names are DNS labels, so the dot cannot be forged), so no plugin can
//! take a name first that another derives. On the plugin's own networks a container is also
//! reachable by its plain name (a network alias), which only that plugin's containers share.
//!
//! What a plugin asks to create is checked against its [`ContainerGrant`] before the engine
//! sees it (SECURITY.md, "container-runtime"): no privileged container and no host or foreign
//! network namespace unless granted, only networks made for the same plugin, only images on the
//! grant's allow-list, and memory, CPU and process limits on every container.

mod glue;
mod image;

pub use image::PatternError;

use crate::host::HostState;
use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, HostConfig, NetworkCreateRequest, PortBinding,
};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, RemoveContainerOptions, StopContainerOptions,
};
use futures::StreamExt;
use std::collections::HashMap;
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker};

/// Its short name.
pub const NAME: &str = "container-runtime";

/// `capw:host/container-runtime`; its grant's options are the WasmProvider's
/// `spec.containerRuntime`, read into a [`ContainerGrant`].
pub struct ContainerRuntimeCapability;

impl super::HostCapability for ContainerRuntimeCapability {
    fn name(&self) -> &'static str {
        NAME
    }
    fn interface(&self) -> &'static str {
        "capw:host/container-runtime@0.2.0"
    }
    fn link(&self, l: &mut Linker<HostState>) -> wasmtime::Result<()> {
        crate::bindings::container_runtime::add_to_linker::<HostState, HasSelf<HostState>>(l, |s| s)
    }
    fn grant(
        &self,
        spec: &capw_api::wasmprovider::WasmProviderSpec,
        grants: &mut super::Grants,
    ) -> Result<(), String> {
        let grant = ContainerGrant::from_spec(spec.container_runtime.as_ref());
        let wrong = grant.image_errors().first().map(|e| format!("spec.{e}"));
        grants.insert(grant);
        wrong.map_or(Ok(()), Err)
    }
    fn show(
        &self,
        grants: &super::Grants,
        status: &mut capw_api::wasmprovider::WasmProviderStatus,
    ) {
        status.container_runtime = Some(grants.get::<ContainerGrant>().to_spec());
    }
}

/// The label every object the host creates carries.
pub const MANAGED_BY: &str = "capw.dev/managed-by";
/// The label naming the plugin an object was created for.
pub const PLUGIN: &str = "capw.dev/plugin";

/// Why a container-runtime call failed (the WIT's `runtime-error`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Other(String),
}

/// The options of a plugin's `container-runtime` grant, defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerGrant {
    pub privileged: bool,
    pub host_namespaces: bool,
    /// Exact image references, or `REPOSITORY:*` for any tag (see [`image`]).
    pub images: Vec<String>,
    pub memory_bytes: i64,
    pub nano_cpus: i64,
    pub pids: i64,
}

/// The node image `capw image build` makes; every grant may run it unless it lists images.
pub const DEFAULT_IMAGES: &str = "capw-node:*";

impl Default for ContainerGrant {
    fn default() -> Self {
        ContainerGrant::from_spec(None)
    }
}

impl ContainerGrant {
    pub fn from_spec(g: Option<&capw_api::wasmprovider::ContainerRuntimeGrant>) -> Self {
        let g = g.cloned().unwrap_or_default();
        ContainerGrant {
            privileged: g.privileged,
            host_namespaces: g.host_namespaces,
            images: g.images.unwrap_or_else(|| vec![DEFAULT_IMAGES.to_string()]),
            memory_bytes: i64::from(g.memory_mib.unwrap_or(2048).max(16)) << 20,
            nano_cpus: i64::from(g.cpu_millis.unwrap_or(2000).max(10)) * 1_000_000,
            pids: i64::from(g.pids.unwrap_or(4096).max(16)),
        }
    }

    pub fn to_spec(&self) -> capw_api::wasmprovider::ContainerRuntimeGrant {
        capw_api::wasmprovider::ContainerRuntimeGrant {
            privileged: self.privileged,
            host_namespaces: self.host_namespaces,
            images: Some(self.images.clone()),
            memory_mib: u32::try_from(self.memory_bytes >> 20).ok(),
            cpu_millis: u32::try_from(self.nano_cpus / 1_000_000).ok(),
            pids: u32::try_from(self.pids).ok(),
        }
    }

    /// Parsed per container asked for: rare next to what creating it costs.
    fn allows_image(&self, image: &str) -> bool {
        image::AllowList::new(&self.images).allows(image)
    }

    /// The `images` entries that are not image references (they admit nothing).
    pub fn image_errors(&self) -> Vec<PatternError> {
        image::AllowList::new(&self.images).errors().to_vec()
    }
}

pub struct PortMapping {
    pub container_port: u16,
    pub host_port: u16,
}

pub struct ContainerSpec {
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub labels: Vec<(String, String)>,
    pub network: Option<String>,
    pub ports: Vec<PortMapping>,
    pub privileged: bool,
}

pub struct ContainerInfo {
    pub id: String,
    pub name: String,
    pub running: bool,
    pub labels: Vec<(String, String)>,
    pub addresses: Vec<String>,
    pub ports: Vec<PortMapping>,
}

pub struct ExecOutput {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The Docker engine, with the deadline every call gets.
pub struct ContainerRuntime {
    docker: Docker,
    timeout: Duration,
    network_lock: tokio::sync::Mutex<()>,
}

fn engine_error(what: &str, e: bollard::errors::Error) -> RuntimeError {
    use bollard::errors::Error as E;
    match e {
        E::DockerResponseServerError {
            status_code: 404,
            message,
        } => RuntimeError::NotFound(format!("{what}: {message}")),
        E::DockerResponseServerError {
            status_code: 400 | 409,
            message,
        } => RuntimeError::Invalid(format!("{what}: {message}")),
        E::DockerResponseServerError {
            status_code,
            message,
        } => RuntimeError::Other(format!(
            "{what}: the engine answered {status_code}: {message}"
        )),
        other => RuntimeError::Unavailable(format!(
            "{what}: cannot reach the Docker engine ({other}); is dockerd running?"
        )),
    }
}

fn owned_by(labels: Option<&HashMap<String, String>>, plugin: &str) -> bool {
    labels.is_some_and(|l| {
        l.get(MANAGED_BY).map(String::as_str) == Some("capw")
            && l.get(PLUGIN).map(String::as_str) == Some(plugin)
    })
}

/// A loopback port nothing listens on now. The engine binds it moments later; if something
/// else takes it first, creation fails with the engine's "port is already allocated" and the
/// plugin's next reconcile asks again.
fn free_loopback_port() -> Result<u16, RuntimeError> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| RuntimeError::Unavailable(format!("no free loopback port to publish on: {e}")))
}

/// The engine's name for a plugin's container or network.
pub fn engine_name(plugin: &str, name: &str) -> String {
    format!("{plugin}.{name}")
}

/// The plugin's name for an engine name; `None` for one not in its namespace.
fn plugin_name<'a>(plugin: &str, engine: &'a str) -> Option<&'a str> {
    engine
        .trim_start_matches('/')
        .strip_prefix(plugin)?
        .strip_prefix('.')
}

fn not_yours(kind: &str, name: &str, plugin: &str) -> RuntimeError {
    RuntimeError::NotFound(format!(
        "no {kind} {name:?} was created for plugin {plugin}"
    ))
}

impl ContainerRuntime {
    /// Connects to the local engine (`DOCKER_HOST`, or the Unix socket).
    pub fn connect(timeout: Duration) -> Result<ContainerRuntime, RuntimeError> {
        let docker = Docker::connect_with_local_defaults()
            .map_err(|e| engine_error("connecting", e))?
            .with_timeout(timeout);
        Ok(ContainerRuntime {
            docker,
            timeout,
            network_lock: tokio::sync::Mutex::new(()),
        })
    }

    async fn deadline<T>(
        &self,
        what: &str,
        f: impl std::future::Future<Output = Result<T, bollard::errors::Error>>,
    ) -> Result<T, RuntimeError> {
        match tokio::time::timeout(self.timeout, f).await {
            Ok(r) => r.map_err(|e| engine_error(what, e)),
            Err(_) => Err(RuntimeError::Unavailable(format!(
                "{what}: the Docker engine did not answer within {:?}",
                self.timeout
            ))),
        }
    }

    fn labels(plugin: &str, extra: &[(String, String)]) -> HashMap<String, String> {
        let mut l: HashMap<String, String> = extra.iter().cloned().collect();
        l.insert(MANAGED_BY.into(), "capw".into());
        l.insert(PLUGIN.into(), plugin.into());
        l
    }

    /// The container the plugin calls `name`, if it was created for `plugin`.
    async fn owned(
        &self,
        plugin: &str,
        name: &str,
    ) -> Result<ContainerInspectResponse, RuntimeError> {
        self.owned_ref(plugin, name, &engine_name(plugin, name))
            .await
    }

    /// As [`Self::owned`], by the engine's id or name.
    async fn owned_ref(
        &self,
        plugin: &str,
        name: &str,
        engine_ref: &str,
    ) -> Result<ContainerInspectResponse, RuntimeError> {
        let c = self
            .deadline(
                &format!("inspecting container {name}"),
                self.docker.inspect_container(
                    engine_ref,
                    None::<bollard::query_parameters::InspectContainerOptions>,
                ),
            )
            .await?;
        if !owned_by(c.config.as_ref().and_then(|c| c.labels.as_ref()), plugin) {
            return Err(not_yours("container", name, plugin));
        }
        Ok(c)
    }

    /// The networks called exactly `name` (the engine's name filter also matches substrings,
    /// and it allows several networks of one name).
    async fn networks_named(
        &self,
        name: &str,
    ) -> Result<Vec<bollard::models::Network>, RuntimeError> {
        let opts = bollard::query_parameters::ListNetworksOptions {
            filters: Some(HashMap::from([(
                "name".to_string(),
                vec![name.to_string()],
            )])),
        };
        let all = self
            .deadline(
                &format!("listing networks named {name}"),
                self.docker.list_networks(Some(opts)),
            )
            .await?;
        Ok(all
            .into_iter()
            .filter(|n| n.name.as_deref() == Some(name))
            .collect())
    }

    pub async fn create_network(&self, plugin: &str, name: &str) -> Result<String, RuntimeError> {
        // One creation at a time, so two calls cannot both find no network and make two.
        let _one = self.network_lock.lock().await;
        let engine = engine_name(plugin, name);
        let existing = self.networks_named(&engine).await?;
        if let Some(n) = existing
            .iter()
            .find(|n| owned_by(n.labels.as_ref(), plugin))
        {
            return Ok(n.id.clone().unwrap_or_default());
        }
        if !existing.is_empty() {
            return Err(RuntimeError::Invalid(format!(
                "network {name:?} exists and was not created for plugin {plugin}"
            )));
        }
        let req = NetworkCreateRequest {
            name: engine,
            labels: Some(Self::labels(plugin, &[])),
            ..Default::default()
        };
        let r = self
            .deadline(
                &format!("creating network {name}"),
                self.docker.create_network(req),
            )
            .await?;
        Ok(r.id)
    }

    /// Removes every network of that name made for the plugin; `NotFound` when there is none.
    pub async fn remove_network(&self, plugin: &str, name: &str) -> Result<(), RuntimeError> {
        let mine: Vec<String> = self
            .networks_named(&engine_name(plugin, name))
            .await?
            .into_iter()
            .filter(|n| owned_by(n.labels.as_ref(), plugin))
            .filter_map(|n| n.id)
            .collect();
        if mine.is_empty() {
            return Err(not_yours("network", name, plugin));
        }
        for id in mine {
            self.deadline(
                &format!("removing network {name}"),
                self.docker.remove_network(&id),
            )
            .await?;
        }
        Ok(())
    }

    /// Refuses what the grant does not allow, naming the option that would allow it; returns
    /// the network mode to give the engine.
    async fn admit(
        &self,
        plugin: &str,
        grant: &ContainerGrant,
        spec: &ContainerSpec,
    ) -> Result<String, RuntimeError> {
        let refuse = |what: String| {
            RuntimeError::Invalid(format!(
                "container {:?} refused for plugin {plugin}: {what}",
                spec.name
            ))
        };
        if spec.privileged && !grant.privileged {
            return Err(refuse(format!(
                "privileged containers need `containerRuntime: {{privileged: true}}` in WasmProvider {plugin}"
            )));
        }
        if !grant.allows_image(&spec.image) {
            return Err(refuse(format!(
                "image {:?} is not in the grant's images {:?}; an admin adds it to `containerRuntime.images` in WasmProvider {plugin}",
                spec.image, grant.images
            )));
        }
        let network = spec.network.clone().unwrap_or_default();
        match network.as_str() {
            // No network at all: isolated, nothing to check.
            "" | "none" => Ok("none".into()),
            "host" => {
                if grant.host_namespaces {
                    Ok(network)
                } else {
                    Err(refuse(format!(
                        "network mode host (the host's network namespace) needs `containerRuntime: {{hostNamespaces: true}}` in WasmProvider {plugin}"
                    )))
                }
            }
            n if n.starts_with("container:") => {
                if grant.host_namespaces {
                    Ok(network)
                } else {
                    Err(refuse(format!(
                        "network mode {n} (another container's namespace) needs `containerRuntime: {{hostNamespaces: true}}` in WasmProvider {plugin}"
                    )))
                }
            }
            n => {
                let engine = engine_name(plugin, n);
                let mine = self
                    .networks_named(&engine)
                    .await?
                    .iter()
                    .any(|net| owned_by(net.labels.as_ref(), plugin));
                if mine {
                    Ok(engine)
                } else {
                    Err(refuse(format!(
                        "network {n:?} was not created for plugin {plugin}: a container joins only networks its plugin made with create-network"
                    )))
                }
            }
        }
    }

    pub async fn create(
        &self,
        plugin: &str,
        grant: &ContainerGrant,
        spec: ContainerSpec,
    ) -> Result<String, RuntimeError> {
        if spec.name.is_empty() || spec.image.is_empty() {
            return Err(RuntimeError::Invalid(
                "a container needs a name and an image".into(),
            ));
        }
        let network_mode = self.admit(plugin, grant, &spec).await?;
        // On the plugin's own network, its plain name resolves too (the plugin derives names
        // and addresses from it; only its own containers are there to see it).
        let networking_config = (network_mode.starts_with(&format!("{plugin}."))).then(|| {
            bollard::models::NetworkingConfig {
                endpoints_config: Some(HashMap::from([(
                    network_mode.clone(),
                    bollard::models::EndpointSettings {
                        aliases: Some(vec![spec.name.clone()]),
                        ..Default::default()
                    },
                )])),
            }
        });
        let mut bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
        let mut exposed: HashMap<String, HashMap<(), ()>> = HashMap::new();
        for p in &spec.ports {
            let key = format!("{}/tcp", p.container_port);
            exposed.insert(key.clone(), HashMap::new());
            // Published on loopback only. For port 0 the host picks a free port and publishes
            // it explicitly: the engine keeps an explicit port across a restart of the engine
            // or the container, where a port it picked itself would change under every
            // endpoint built from it.
            let host_port = match p.host_port {
                0 => free_loopback_port()?,
                n => n,
            };
            bindings.insert(
                key,
                Some(vec![PortBinding {
                    host_ip: Some("127.0.0.1".into()),
                    host_port: Some(host_port.to_string()),
                }]),
            );
        }
        let body = ContainerCreateBody {
            // The container's name is its hostname, as kind and CAPD make it: kubeadm on the
            // node names the Node after it. A name that is no hostname keeps the engine's.
            hostname: is_hostname(&spec.name).then(|| spec.name.clone()),
            image: Some(spec.image.clone()),
            cmd: (!spec.command.is_empty()).then(|| spec.command.clone()),
            env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(Self::labels(plugin, &spec.labels)),
            exposed_ports: (!exposed.is_empty()).then_some(exposed),
            host_config: Some(HostConfig {
                privileged: Some(spec.privileged),
                port_bindings: (!bindings.is_empty()).then_some(bindings),
                network_mode: Some(network_mode),
                memory: Some(grant.memory_bytes),
                nano_cpus: Some(grant.nano_cpus),
                pids_limit: Some(grant.pids),
                ..Default::default()
            }),
            networking_config,
            ..Default::default()
        };
        let opts = CreateContainerOptions {
            name: Some(engine_name(plugin, &spec.name)),
            ..Default::default()
        };
        let r = self
            .deadline(
                &format!("creating container {}", spec.name),
                self.docker.create_container(Some(opts), body),
            )
            .await?;
        Ok(r.id)
    }

    pub async fn start(&self, plugin: &str, name: &str) -> Result<(), RuntimeError> {
        let id = self.owned(plugin, name).await?.id.unwrap_or_default();
        self.deadline(
            &format!("starting container {name}"),
            self.docker.start_container(
                &id,
                None::<bollard::query_parameters::StartContainerOptions>,
            ),
        )
        .await
    }

    pub async fn inspect(&self, plugin: &str, name: &str) -> Result<ContainerInfo, RuntimeError> {
        Ok(info(plugin, self.owned(plugin, name).await?))
    }

    pub async fn exec(
        &self,
        plugin: &str,
        name: &str,
        command: Vec<String>,
    ) -> Result<ExecOutput, RuntimeError> {
        let id = self.owned(plugin, name).await?.id.unwrap_or_default();
        let what = format!("running {command:?} in container {name}");
        let exec = self
            .deadline(
                &what,
                self.docker.create_exec(
                    &id,
                    CreateExecOptions {
                        cmd: Some(command.clone()),
                        attach_stdout: Some(true),
                        attach_stderr: Some(true),
                        ..Default::default()
                    },
                ),
            )
            .await?;
        let run = async {
            let mut out = ExecOutput {
                exit_code: -1,
                stdout: String::new(),
                stderr: String::new(),
            };
            if let StartExecResults::Attached { mut output, .. } = self
                .docker
                .start_exec(&exec.id, Some(StartExecOptions::default()))
                .await?
            {
                while let Some(chunk) = output.next().await {
                    match chunk? {
                        bollard::container::LogOutput::StdErr { message } => {
                            out.stderr.push_str(&String::from_utf8_lossy(&message))
                        }
                        other => out
                            .stdout
                            .push_str(&String::from_utf8_lossy(&other.into_bytes())),
                    }
                }
            }
            let inspect = self.docker.inspect_exec(&exec.id).await?;
            out.exit_code = inspect
                .exit_code
                .and_then(|c| i32::try_from(c).ok())
                .unwrap_or(-1);
            Ok(out)
        };
        self.deadline(&what, run).await
    }

    pub async fn stop(&self, plugin: &str, name: &str) -> Result<(), RuntimeError> {
        let id = self.owned(plugin, name).await?.id.unwrap_or_default();
        self.deadline(
            &format!("stopping container {name}"),
            self.docker.stop_container(
                &id,
                Some(StopContainerOptions {
                    t: Some(5),
                    ..Default::default()
                }),
            ),
        )
        .await
    }

    pub async fn remove(&self, plugin: &str, name: &str) -> Result<(), RuntimeError> {
        let id = self.owned(plugin, name).await?.id.unwrap_or_default();
        self.deadline(
            &format!("removing container {name}"),
            self.docker.remove_container(
                &id,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            ),
        )
        .await
    }

    /// The plugin's containers carrying every label in `labels`.
    pub async fn list(
        &self,
        plugin: &str,
        labels: Vec<(String, String)>,
    ) -> Result<Vec<ContainerInfo>, RuntimeError> {
        let mut filters: Vec<String> = Self::labels(plugin, &labels)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        filters.sort();
        let opts = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([("label".to_string(), filters)])),
            ..Default::default()
        };
        let found = self
            .deadline(
                "listing containers",
                self.docker.list_containers(Some(opts)),
            )
            .await?;
        let mut out = vec![];
        for c in found {
            let Some(id) = c.id else { continue };
            // Inspect for addresses and ports; one that vanished meanwhile is skipped.
            if let Ok(i) = self.owned_ref(plugin, &id, &id).await {
                out.push(info(plugin, i));
            }
        }
        Ok(out)
    }
}

fn info(plugin: &str, c: ContainerInspectResponse) -> ContainerInfo {
    let net = c.network_settings.unwrap_or_default();
    let mut addresses: Vec<String> = net
        .networks
        .unwrap_or_default()
        .into_values()
        .filter_map(|e| e.ip_address.filter(|a| !a.is_empty()))
        .collect();
    addresses.sort();
    let mut ports: Vec<PortMapping> = net
        .ports
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| {
            let container_port = k.split('/').next()?.parse().ok()?;
            let host_port = v?
                .iter()
                .find_map(|b| b.host_port.as_deref()?.parse().ok())?;
            Some(PortMapping {
                container_port,
                host_port,
            })
        })
        .collect();
    ports.sort_by_key(|p| p.container_port);
    let mut labels: Vec<(String, String)> = c
        .config
        .and_then(|c| c.labels)
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.sort();
    ContainerInfo {
        id: c.id.unwrap_or_default(),
        name: c
            .name
            .as_deref()
            .and_then(|n| plugin_name(plugin, n))
            .unwrap_or_default()
            .to_string(),
        running: c.state.and_then(|s| s.running).unwrap_or(false),
        labels,
        addresses,
        ports,
    }
}

/// Whether `name` can be a hostname: one DNS label, lowercase, at most 63 characters.
fn is_hostname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}
