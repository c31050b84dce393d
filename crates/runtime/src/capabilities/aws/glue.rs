//! The WIT side of `capw:host/aws`.

use super::{AwsBackend, AwsError, AwsPermit, Call};
use crate::bindings::aws;
use crate::host::HostState;

impl From<AwsError> for aws::AwsError {
    fn from(e: AwsError) -> Self {
        match e {
            AwsError::Denied(m) => aws::AwsError::Denied(m),
            AwsError::Invalid(m) => aws::AwsError::Invalid(m),
            AwsError::Credentials(m) => aws::AwsError::Credentials(m),
            AwsError::Throttled(s) => aws::AwsError::Throttled(s),
            AwsError::Unavailable(m) => aws::AwsError::Unavailable(m),
            AwsError::TooLarge(size, cap) => aws::AwsError::TooLarge((size, cap)),
        }
    }
}

/// Granted only to plugins whose WasmProvider asks for `aws`; scoped by that grant.
impl aws::Host for HostState {
    async fn call(
        &mut self,
        region: String,
        service: String,
        version: String,
        action: String,
        params: Vec<(String, String)>,
    ) -> Result<aws::AwsResponse, aws::AwsError> {
        let backend = self
            .services
            .backends
            .get_or_try_init(|| AwsBackend::new(None))?;
        let permit = self.grants.get::<AwsPermit>();
        let call = Call {
            region,
            service,
            version,
            action,
            params,
        };
        let a = backend.call(&self.log.plugin, &permit, call).await?;
        Ok(aws::AwsResponse {
            status: a.status,
            request_id: a.request_id,
            body: a.body,
        })
    }
}
