//! `bulk`: the same contract as `echo`, with enough real code (a regex engine) to weigh about
//! 1 MB, so compile and cached-load times are measured on a realistic size.

use capw_sdk::*;

struct Bulk;

impl Provider for Bulk {
    fn metadata() -> Metadata {
        Metadata::new("bulk", "1.0.0", ProviderType::Infrastructure)
    }

    fn reconcile_machine(ctx: Context) -> Result<MachineStatus, ProviderError> {
        let obj = ctx.view()?;
        let re = regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
            .map_err(|e| ProviderError::Other(e.to_string()))?;
        if !re.is_match(obj.name()) {
            return Err(ProviderError::InvalidSpec(format!(
                "metadata.name {:?} is not a DNS label",
                obj.name()
            )));
        }
        Ok(MachineStatus {
            provisioned: true,
            provider_id: Some(format!("bulk:///{}", obj.name())),
            addresses: vec![],
            failure_domain: None,
            interruptible: false,
            common: common(vec![], None),
        })
    }
}

capw_sdk::export_provider!(Bulk);
