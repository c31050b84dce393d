//! The WIT side of `capw:host/container-runtime`: converts between the generated types and the
//! backend's, scoped to the calling plugin.

use crate::bindings::container_runtime;
use crate::host::HostState;

/// Granted only to plugins whose WasmProvider asks for it; implemented on the Docker engine,
/// scoped to what was created for this plugin.
impl container_runtime::Host for HostState {
    async fn create_network(
        &mut self,
        name: String,
    ) -> Result<String, container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.create_network(&self.log.plugin, &name)
            .await
            .map_err(to_wit)
    }
    async fn remove_network(
        &mut self,
        name: String,
    ) -> Result<(), container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.remove_network(&self.log.plugin, &name)
            .await
            .map_err(to_wit)
    }
    async fn create(
        &mut self,
        spec: container_runtime::ContainerSpec,
    ) -> Result<String, container_runtime::RuntimeError> {
        let rt = self.docker()?;
        let spec = cr::ContainerSpec {
            name: spec.name,
            image: spec.image,
            command: spec.command,
            env: spec.env,
            labels: spec.labels,
            network: spec.network,
            ports: spec
                .ports
                .into_iter()
                .map(|p| cr::PortMapping {
                    container_port: p.container_port,
                    host_port: p.host_port,
                })
                .collect(),
            privileged: spec.privileged,
        };
        rt.create(
            &self.log.plugin,
            &self.grants.get::<cr::ContainerGrant>(),
            spec,
        )
        .await
        .map_err(to_wit)
    }
    async fn start(&mut self, name: String) -> Result<(), container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.start(&self.log.plugin, &name).await.map_err(to_wit)
    }
    async fn inspect(
        &mut self,
        name: String,
    ) -> Result<container_runtime::ContainerInfo, container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.inspect(&self.log.plugin, &name)
            .await
            .map(info_to_wit)
            .map_err(to_wit)
    }
    async fn exec(
        &mut self,
        name: String,
        command: Vec<String>,
    ) -> Result<container_runtime::ExecOutput, container_runtime::RuntimeError> {
        let rt = self.docker()?;
        let out = rt
            .exec(&self.log.plugin, &name, command)
            .await
            .map_err(to_wit)?;
        Ok(container_runtime::ExecOutput {
            exit_code: out.exit_code,
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }
    async fn stop(&mut self, name: String) -> Result<(), container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.stop(&self.log.plugin, &name).await.map_err(to_wit)
    }
    async fn remove(&mut self, name: String) -> Result<(), container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.remove(&self.log.plugin, &name).await.map_err(to_wit)
    }
    async fn list(
        &mut self,
        labels: Vec<(String, String)>,
    ) -> Result<Vec<container_runtime::ContainerInfo>, container_runtime::RuntimeError> {
        let rt = self.docker()?;
        rt.list(&self.log.plugin, labels)
            .await
            .map(|v| v.into_iter().map(info_to_wit).collect())
            .map_err(to_wit)
    }
}

use crate::capabilities::container_runtime as cr;

fn to_wit(e: cr::RuntimeError) -> container_runtime::RuntimeError {
    match e {
        cr::RuntimeError::NotFound(m) => container_runtime::RuntimeError::NotFound(m),
        cr::RuntimeError::Unavailable(m) => container_runtime::RuntimeError::Unavailable(m),
        cr::RuntimeError::Invalid(m) => container_runtime::RuntimeError::Invalid(m),
        cr::RuntimeError::Other(m) => container_runtime::RuntimeError::Other(m),
    }
}

fn info_to_wit(i: cr::ContainerInfo) -> container_runtime::ContainerInfo {
    container_runtime::ContainerInfo {
        id: i.id,
        name: i.name,
        running: i.running,
        labels: i.labels,
        addresses: i.addresses,
        ports: i
            .ports
            .into_iter()
            .map(|p| container_runtime::PortMapping {
                container_port: p.container_port,
                host_port: p.host_port,
            })
            .collect(),
    }
}

impl HostState {
    /// The Docker engine, shared by the process (an `Arc`, so the call can hold it across awaits).
    fn docker(
        &self,
    ) -> Result<std::sync::Arc<cr::ContainerRuntime>, container_runtime::RuntimeError> {
        self.services
            .backends
            .get_or_try_init(|| cr::ContainerRuntime::connect(std::time::Duration::from_secs(30)))
            .map_err(to_wit)
    }
}
