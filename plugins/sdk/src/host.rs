//! The host interfaces a provider calls: `capw:host/log`, `sim-cloud`, `container-runtime` and
//! `aws`.
//!
//! In a component each function is the import. In a native build (a provider's unit tests, the
//! host's native-versus-Wasm benchmark) there is no host to import from, so each function calls
//! the [`Native`] backend installed with [`install`]; with none installed, the calls answer
//! `unavailable` and logging does nothing. Provider code calls the same functions either way.

#[cfg(not(target_arch = "wasm32"))]
use std::sync::{Arc, RwLock};

/// What a native build answers host calls with. Every method has a default (`unavailable`, or
/// nothing for logs), so a test fake implements only what its provider calls.
#[cfg(not(target_arch = "wasm32"))]
pub trait Native: Send + Sync {
    /// `log.log`.
    fn log(&self, level: log::Level, message: &str) {
        let _ = (level, message);
    }
    /// `sim-cloud.ensure-vm`.
    fn ensure_vm(
        &self,
        cluster: &str,
        name: &str,
        bootstrap_data: &str,
    ) -> Result<sim_cloud::Vm, sim_cloud::SimCloudError> {
        let _ = (cluster, name, bootstrap_data);
        Err(sim_cloud::unavailable())
    }
    /// `sim-cloud.ensure-vm-from-image`; by default `ensure_vm`, which drops the image.
    fn ensure_vm_from_image(
        &self,
        cluster: &str,
        name: &str,
        image: &sim_cloud::VmImage,
        bootstrap_data: &str,
    ) -> Result<sim_cloud::Vm, sim_cloud::SimCloudError> {
        let _ = image;
        self.ensure_vm(cluster, name, bootstrap_data)
    }
    /// `sim-cloud.delete-vm`.
    fn delete_vm(&self, cluster: &str, name: &str) -> Result<bool, sim_cloud::SimCloudError> {
        let _ = (cluster, name);
        Err(sim_cloud::unavailable())
    }
    /// `sim-cloud.ensure-api-server`.
    fn ensure_api_server(
        &self,
        cluster: &str,
    ) -> Result<sim_cloud::ApiServer, sim_cloud::SimCloudError> {
        let _ = cluster;
        Err(sim_cloud::unavailable())
    }
    /// `sim-cloud.ensure-api-server-at`; by default `ensure_api_server`, which drops the port.
    fn ensure_api_server_at(
        &self,
        cluster: &str,
        port: u16,
    ) -> Result<sim_cloud::ApiServer, sim_cloud::SimCloudError> {
        let _ = port;
        self.ensure_api_server(cluster)
    }
    /// `sim-cloud.delete-api-server`.
    fn delete_api_server(&self, cluster: &str) -> Result<bool, sim_cloud::SimCloudError> {
        let _ = cluster;
        Err(sim_cloud::unavailable())
    }
    /// `aws.call`.
    fn aws(&self, call: &aws::Call<'_>) -> Result<aws::AwsResponse, aws::AwsError> {
        let _ = call;
        Err(aws::AwsError::Unavailable(
            "no AWS in this native build".into(),
        ))
    }
    /// Any `container-runtime` call, by function name and JSON arguments; answers JSON.
    fn container(
        &self,
        function: &str,
        args: crate::Value,
    ) -> Result<crate::Value, container_runtime::RuntimeError> {
        let _ = (function, args);
        Err(container_runtime::RuntimeError::Unavailable(
            "no container runtime in this native build".into(),
        ))
    }
}

#[cfg(not(target_arch = "wasm32"))]
static NATIVE: RwLock<Option<Arc<dyn Native>>> = RwLock::new(None);

/// Installs the backend a native build's host calls go to, for the whole process.
#[cfg(not(target_arch = "wasm32"))]
pub fn install(native: Arc<dyn Native>) {
    *NATIVE.write().unwrap_or_else(|p| p.into_inner()) = Some(native);
}

#[cfg(not(target_arch = "wasm32"))]
fn native() -> Option<Arc<dyn Native>> {
    NATIVE.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Writes to the host log (which caps what one call may log).
pub fn log(level: log::Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::bindings::capw::host::log::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(n) = native() {
        n.log(level, message);
    }
}

/// `capw:host/log`'s types.
pub mod log {
    pub use crate::bindings::capw::host::log::Level;
}

/// `capw:host/sim-cloud`: simulated VMs and workload API servers (the in-memory provider).
pub mod sim_cloud {
    #[cfg(target_arch = "wasm32")]
    use crate::bindings::capw::host::sim_cloud as import;
    pub use crate::bindings::capw::host::sim_cloud::{ApiServer, SimCloudError, Vm, VmImage};

    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn unavailable() -> SimCloudError {
        SimCloudError::Unavailable("no simulated cloud in this native build".into())
    }

    /// Creates (or returns) the VM `name` of `cluster`, booting it from `bootstrap_data`.
    pub fn ensure_vm(cluster: &str, name: &str, bootstrap_data: &str) -> Result<Vm, SimCloudError> {
        #[cfg(target_arch = "wasm32")]
        return import::ensure_vm(cluster, name, bootstrap_data);
        #[cfg(not(target_arch = "wasm32"))]
        super::native()
            .ok_or_else(unavailable)?
            .ensure_vm(cluster, name, bootstrap_data)
    }

    /// Creates (or returns) the VM `name` of `cluster`, booting `image` with `bootstrap_data`.
    pub fn ensure_vm_from_image(
        cluster: &str,
        name: &str,
        image: &VmImage,
        bootstrap_data: &str,
    ) -> Result<Vm, SimCloudError> {
        #[cfg(target_arch = "wasm32")]
        return import::ensure_vm_from_image(cluster, name, image, bootstrap_data);
        #[cfg(not(target_arch = "wasm32"))]
        super::native()
            .ok_or_else(unavailable)?
            .ensure_vm_from_image(cluster, name, image, bootstrap_data)
    }

    /// Deletes the VM and its Node; true once it is gone.
    pub fn delete_vm(cluster: &str, name: &str) -> Result<bool, SimCloudError> {
        #[cfg(target_arch = "wasm32")]
        return import::delete_vm(cluster, name);
        #[cfg(not(target_arch = "wasm32"))]
        super::native()
            .ok_or_else(unavailable)?
            .delete_vm(cluster, name)
    }

    /// Reserves (or returns) the endpoint of the cluster's simulated workload API server.
    pub fn ensure_api_server(cluster: &str) -> Result<ApiServer, SimCloudError> {
        #[cfg(target_arch = "wasm32")]
        return import::ensure_api_server(cluster);
        #[cfg(not(target_arch = "wasm32"))]
        super::native()
            .ok_or_else(unavailable)?
            .ensure_api_server(cluster)
    }

    /// Reserves the endpoint of the cluster's workload API at `port`, where it was before the
    /// host restarted (see the WIT).
    pub fn ensure_api_server_at(cluster: &str, port: u16) -> Result<ApiServer, SimCloudError> {
        #[cfg(target_arch = "wasm32")]
        return import::ensure_api_server_at(cluster, port);
        #[cfg(not(target_arch = "wasm32"))]
        super::native()
            .ok_or_else(unavailable)?
            .ensure_api_server_at(cluster, port)
    }

    /// Releases the endpoint and everything the cluster's VMs left; true once gone.
    pub fn delete_api_server(cluster: &str) -> Result<bool, SimCloudError> {
        #[cfg(target_arch = "wasm32")]
        return import::delete_api_server(cluster);
        #[cfg(not(target_arch = "wasm32"))]
        super::native()
            .ok_or_else(unavailable)?
            .delete_api_server(cluster)
    }
}

/// `capw:host/container-runtime`: the plugin's own containers and networks on the host's engine.
pub mod container_runtime {
    #[cfg(target_arch = "wasm32")]
    use crate::bindings::capw::host::container_runtime as import;
    pub use crate::bindings::capw::host::container_runtime::{
        ContainerInfo, ContainerSpec, ExecOutput, PortMapping, RuntimeError,
    };

    /// A native build's call: arguments and answer cross as JSON, so one fake can serve all.
    #[cfg(not(target_arch = "wasm32"))]
    fn call<T: serde::de::DeserializeOwned>(
        function: &str,
        args: crate::Value,
    ) -> Result<T, RuntimeError> {
        let n = super::native().ok_or_else(|| {
            RuntimeError::Unavailable("no container runtime in this native build".into())
        })?;
        let out = n.container(function, args)?;
        serde_json::from_value(out)
            .map_err(|e| RuntimeError::Other(format!("native {function} answered badly: {e}")))
    }

    macro_rules! calls {
        ($($(#[$doc:meta])* $f:ident($($a:ident: $t:ty),*) -> $r:ty;)*) => {$(
            $(#[$doc])*
            pub fn $f($($a: $t),*) -> Result<$r, RuntimeError> {
                #[cfg(target_arch = "wasm32")]
                return import::$f($($a),*);
                #[cfg(not(target_arch = "wasm32"))]
                call(stringify!($f), serde_json::json!({$(stringify!($a): $a),*}))
            }
        )*};
    }

    calls! {
        /// Creates the bridge network `name`, or returns the id of the one this plugin made.
        create_network(name: &str) -> String;
        /// Removes a network this plugin made.
        remove_network(name: &str) -> ();
        /// Creates (does not start) a container.
        create(spec: &ContainerSpec) -> String;
        /// Starts a container.
        start(name: &str) -> ();
        /// Inspects a container.
        inspect(name: &str) -> ContainerInfo;
        /// Runs an argv in a running container and waits for it.
        exec(name: &str, command: &[String]) -> ExecOutput;
        /// Stops a container.
        stop(name: &str) -> ();
        /// Removes a container with its anonymous volumes.
        remove(name: &str) -> ();
        /// This plugin's containers carrying every given label.
        list(labels: &[(String, String)]) -> Vec<ContainerInfo>;
    }
}

/// `capw:host/aws`: AWS Query API calls the host signs and sends (the component never holds a
/// credential).
pub mod aws {
    pub use crate::bindings::capw::host::aws::{AwsError, AwsResponse};

    /// One call, as a native backend sees it.
    #[derive(Debug, Clone)]
    pub struct Call<'a> {
        /// Empty: the grant's default.
        pub region: &'a str,
        /// `ec2`, `elasticloadbalancing`.
        pub service: &'a str,
        /// The API version (`2016-11-15`).
        pub version: &'a str,
        /// The action (`RunInstances`).
        pub action: &'a str,
        /// The parameters, in order.
        pub params: &'a [(String, String)],
    }

    /// Signs and sends one call; a non-2xx answer from AWS is `Ok` with its error XML.
    pub fn call(c: &Call<'_>) -> Result<AwsResponse, AwsError> {
        #[cfg(target_arch = "wasm32")]
        return crate::bindings::capw::host::aws::call(
            c.region, c.service, c.version, c.action, c.params,
        );
        #[cfg(not(target_arch = "wasm32"))]
        super::native()
            .ok_or_else(|| AwsError::Unavailable("no AWS in this native build".into()))?
            .aws(c)
    }
}
