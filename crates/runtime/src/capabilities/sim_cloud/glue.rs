//! The WIT side of `capw:host/sim-cloud`.

use super::{SimCloud, SimError};
use crate::bindings::sim_cloud::{self, SimCloudError};
use crate::host::HostState;

impl From<SimError> for SimCloudError {
    fn from(e: SimError) -> Self {
        match e {
            SimError::BadCluster(_) | SimError::Bootstrap { .. } | SimError::Template { .. } => {
                SimCloudError::Invalid(e.to_string())
            }
            SimError::Bind { .. } | SimError::NoEndpoint(_) => {
                SimCloudError::Unavailable(e.to_string())
            }
        }
    }
}

/// Granted only to the in-memory provider; implemented with the simulated clusters.
impl sim_cloud::Host for HostState {
    fn ensure_vm(
        &mut self,
        cluster: String,
        name: String,
        bootstrap_data: String,
    ) -> Result<sim_cloud::Vm, SimCloudError> {
        self.ensure_vm_from_image(
            cluster,
            name,
            sim_cloud::VmImage {
                kubernetes_version: String::new(),
            },
            bootstrap_data,
        )
    }
    fn ensure_vm_from_image(
        &mut self,
        cluster: String,
        name: String,
        image: sim_cloud::VmImage,
        bootstrap_data: String,
    ) -> Result<sim_cloud::Vm, SimCloudError> {
        let vm =
            self.sim()?
                .ensure_vm(&cluster, &name, &image.kubernetes_version, &bootstrap_data)?;
        Ok(sim_cloud::Vm {
            name: vm.name,
            provider_id: vm.provider_id,
            running: vm.running,
            addresses: vm.addresses,
        })
    }
    fn delete_vm(&mut self, cluster: String, name: String) -> Result<bool, SimCloudError> {
        Ok(self.sim()?.delete_vm(&cluster, &name))
    }
    fn ensure_api_server(
        &mut self,
        cluster: String,
    ) -> Result<sim_cloud::ApiServer, SimCloudError> {
        let (host, port) = self.sim()?.ensure_api_server(&cluster)?;
        Ok(sim_cloud::ApiServer { host, port })
    }
    fn ensure_api_server_at(
        &mut self,
        cluster: String,
        port: u16,
    ) -> Result<sim_cloud::ApiServer, SimCloudError> {
        let (host, port) = self.sim()?.ensure_api_server_at(&cluster, Some(port))?;
        Ok(sim_cloud::ApiServer { host, port })
    }
    fn delete_api_server(&mut self, cluster: String) -> Result<bool, SimCloudError> {
        Ok(self.sim()?.delete_api_server(&cluster))
    }
}

impl HostState {
    fn sim(&self) -> Result<std::sync::Arc<SimCloud>, SimCloudError> {
        self.services.backends.get::<SimCloud>().ok_or_else(|| {
            SimCloudError::Unavailable(
                "the simulated cloud is not running in this host (capw up and capw run start it)"
                    .to_string(),
            )
        })
    }
}
