//! Calls through `capw:host/aws`: the Query parameters CAPA's SDK calls would send, and AWS's
//! answers as either a parsed tree or an AWS error code the caller can act on.

use crate::xml::Node;
use capw_sdk::aws::{self, AwsError};
use capw_sdk::{ProviderError, Retry};

pub const EC2: (&str, &str) = ("ec2", "2016-11-15");
pub const ELBV2: (&str, &str) = ("elasticloadbalancing", "2015-12-01");

/// Query parameters, in order.
#[derive(Debug, Default, Clone)]
pub struct Params(pub Vec<(String, String)>);

impl Params {
    pub fn new() -> Self {
        Params::default()
    }

    pub fn set(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.0.push((k.into(), v.into()));
        self
    }

    /// `Filter.N.Name` / `Filter.N.Value.M`, numbered after the filters already set.
    pub fn filter(mut self, name: &str, values: &[&str]) -> Self {
        let n = self
            .0
            .iter()
            .filter(|(k, _)| k.ends_with(".Name") && k.starts_with("Filter."))
            .count()
            + 1;
        self.0.push((format!("Filter.{n}.Name"), name.to_string()));
        for (i, v) in values.iter().enumerate() {
            self.0
                .push((format!("Filter.{n}.Value.{}", i + 1), v.to_string()));
        }
        self
    }

    /// EC2's `TagSpecification.1` for a resource type created by this call.
    pub fn tag_spec(mut self, resource: &str, tags: &[(String, String)]) -> Self {
        self.0
            .push(("TagSpecification.1.ResourceType".into(), resource.into()));
        for (i, (k, v)) in tags.iter().enumerate() {
            self.0
                .push((format!("TagSpecification.1.Tag.{}.Key", i + 1), k.clone()));
            self.0
                .push((format!("TagSpecification.1.Tag.{}.Value", i + 1), v.clone()));
        }
        self
    }

    /// A numbered list: `PREFIX.1`, `PREFIX.2`…
    pub fn list(mut self, prefix: &str, values: &[String]) -> Self {
        for (i, v) in values.iter().enumerate() {
            self.0.push((format!("{prefix}.{}", i + 1), v.clone()));
        }
        self
    }
}

/// Why a call did not give what was asked.
#[derive(Debug)]
pub enum Fail {
    /// AWS answered with an error code (`InvalidVpcID.NotFound`, `DependencyViolation`).
    Aws { code: String, message: String },
    /// The host could not get an answer, or refused the call: the provider error to return.
    Host(ProviderError),
}

impl Fail {
    pub fn code(&self) -> Option<&str> {
        match self {
            Fail::Aws { code, .. } => Some(code),
            Fail::Host(_) => None,
        }
    }
}

impl From<Fail> for ProviderError {
    /// An AWS error code nothing handled is retried with backoff: the cloud may settle
    /// (dependencies still deleting, eventual consistency).
    fn from(f: Fail) -> ProviderError {
        match f {
            Fail::Aws { code, message } => ProviderError::Other(format!("AWS {code}: {message}")),
            Fail::Host(e) => e,
        }
    }
}

/// The region every call of this reconcile goes to.
pub struct Client {
    pub region: String,
}

impl Client {
    pub fn ec2(&self, action: &str, params: Params) -> Result<Node, Fail> {
        self.call(EC2, action, params)
    }

    pub fn elb(&self, action: &str, params: Params) -> Result<Node, Fail> {
        self.call(ELBV2, action, params)
    }

    fn call(
        &self,
        (service, version): (&str, &str),
        action: &str,
        params: Params,
    ) -> Result<Node, Fail> {
        let answer = aws::call(&aws::Call {
            region: &self.region,
            service,
            version,
            action,
            params: &params.0,
        })
        .map_err(|e| Fail::Host(host_error(service, action, e)))?;
        let node = Node::parse(&answer.body).map_err(Fail::Host)?;
        if (200..300).contains(&answer.status) {
            return Ok(node);
        }
        let err = node.find("Error");
        let code = err.map(|e| e.text("Code")).filter(|c| !c.is_empty());
        Err(Fail::Aws {
            code: code.unwrap_or("Unknown").to_string(),
            message: format!(
                "{service}:{action} answered {}: {}",
                answer.status,
                err.map(|e| e.text("Message")).unwrap_or_default()
            ),
        })
    }
}

/// What the host's refusals mean for the reconcile. A missing grant or refused credentials need
/// a person, who changes the WasmProvider or a Secret rather than this object's spec: they are
/// retried slowly, so the fix takes effect without touching the object. A malformed call is
/// this plugin's bug (terminal); throttling and outages are waited out.
fn host_error(service: &str, action: &str, e: AwsError) -> ProviderError {
    match e {
        AwsError::Denied(m) => ProviderError::Transient(Retry {
            message: format!("{service}:{action} was refused by the host: {m}"),
            retry_after_seconds: Some(60),
        }),
        AwsError::Invalid(m) => {
            ProviderError::Terminal(format!("{service}:{action} is malformed: {m}"))
        }
        AwsError::Credentials(m) => ProviderError::Transient(Retry {
            message: format!("AWS credentials: {m}"),
            retry_after_seconds: Some(30),
        }),
        AwsError::Throttled(s) => ProviderError::Transient(Retry {
            message: format!("{service}:{action} is throttled; waiting {s} s"),
            retry_after_seconds: Some(s.max(1)),
        }),
        AwsError::Unavailable(m) => ProviderError::Transient(Retry {
            message: format!("{service}:{action}: {m}"),
            retry_after_seconds: Some(10),
        }),
        AwsError::TooLarge((size, cap)) => ProviderError::Other(format!(
            "{service}:{action} answered more than {cap} bytes ({size})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_and_tags_number_as_the_sdk_does() {
        let p = Params::new()
            .filter("vpc-id", &["vpc-1"])
            .filter("tag:Name", &["a", "b"])
            .tag_spec("vpc", &[("Name".into(), "c".into())]);
        let keys: Vec<&str> = p.0.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "Filter.1.Name",
                "Filter.1.Value.1",
                "Filter.2.Name",
                "Filter.2.Value.1",
                "Filter.2.Value.2",
                "TagSpecification.1.ResourceType",
                "TagSpecification.1.Tag.1.Key",
                "TagSpecification.1.Tag.1.Value"
            ]
        );
    }
}
