//! One call on the wire: SigV4 over the exact bytes sent, retries with backoff for throttling
//! and server errors, a deadline per attempt and a cap on what is read back.

use super::AwsError;
use super::credentials::{CredentialSource, Credentials};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use std::time::{Duration, SystemTime};

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// How calls are retried and bounded.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Attempts per call, the first included.
    pub attempts: u32,
    /// The wait before the first retry; it doubles, up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// The deadline of one attempt (connect, send, read).
    pub attempt_timeout: Duration,
    /// The most bytes of an answer passed on.
    pub max_body: usize,
}

impl Default for Policy {
    /// Five attempts over about three seconds: inside the 30 s call deadline, with room for
    /// the plugin's other calls.
    fn default() -> Self {
        Policy {
            attempts: 5,
            backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(2),
            attempt_timeout: Duration::from_secs(10),
            max_body: 4 << 20,
        }
    }
}

/// What AWS answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub request_id: String,
    pub body: String,
}

/// The error codes AWS throttles with; such an answer is retried like a 5xx.
const THROTTLED: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "SlowDown",
];

/// The error codes of credentials AWS does not take.
const REFUSED_CREDENTIALS: &[&str] = &[
    "AuthFailure",
    "SignatureDoesNotMatch",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "InvalidAccessKeyId",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "ExpiredToken",
];

/// The HTTP side: one connection pool for every plugin.
pub struct Sender {
    client: Client<Https, Full<Bytes>>,
    policy: Policy,
}

impl Sender {
    pub fn new(policy: Policy) -> Result<Self, AwsError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| AwsError::Unavailable(format!("no TLS root certificates: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Sender {
            client: Client::builder(hyper_util::rt::TokioExecutor::new()).build(https),
            policy,
        })
    }

    /// Signs `body` for `service` in `region` with `creds` and posts it to `url`, retrying as
    /// the policy says.
    pub async fn send(
        &self,
        url: &http::Uri,
        region: &str,
        service: &str,
        body: Bytes,
        creds: &Credentials,
        source: &CredentialSource,
    ) -> Result<Answer, AwsError> {
        let mut wait = self.policy.backoff;
        let mut last = AwsError::Unavailable(format!("{url}: no attempt was made"));
        for attempt in 0..self.policy.attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(self.policy.max_backoff);
            }
            // Signed per attempt: the signature carries the time.
            let request = sign(url, region, service, body.clone(), creds)?;
            let answer = tokio::time::timeout(self.policy.attempt_timeout, self.once(request))
                .await
                .unwrap_or_else(|_| {
                    Err(AwsError::Unavailable(format!(
                        "{url} did not answer within {:?}",
                        self.policy.attempt_timeout
                    )))
                });
            match answer {
                Ok(a) => {
                    let code = error_code(&a.body);
                    if a.status == 401 || code.is_some_and(|c| REFUSED_CREDENTIALS.contains(&c)) {
                        return Err(AwsError::Credentials(format!(
                            "AWS refused the credentials from {source} (access key {}): {}",
                            creds.access_key_id,
                            error_text(&a)
                        )));
                    }
                    let throttled = a.status == 429
                        || a.status >= 500
                        || code.is_some_and(|c| THROTTLED.contains(&c));
                    if !throttled {
                        return Ok(a);
                    }
                    tracing::debug!(%url, status = a.status, attempt, "AWS throttled or failed; retrying");
                    last = AwsError::Throttled(self.policy.max_backoff.as_secs().max(1) as u32);
                }
                Err(e @ AwsError::TooLarge(..)) => return Err(e),
                Err(e) => {
                    tracing::debug!(%url, error = %e, attempt, "AWS endpoint failed; retrying");
                    last = e;
                }
            }
        }
        Err(last)
    }

    async fn once(&self, request: http::Request<Full<Bytes>>) -> Result<Answer, AwsError> {
        let url = request.uri().to_string();
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| AwsError::Unavailable(format!("{url}: {}", chain(&e))))?;
        let status = response.status().as_u16();
        let header_id = ["x-amzn-requestid", "x-amz-request-id"]
            .iter()
            .find_map(|h| response.headers().get(*h))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let max = self.policy.max_body;
        let bytes = Limited::new(response.into_body(), max)
            .collect()
            .await
            .map_err(|e| {
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some()
                {
                    AwsError::TooLarge(max as u64 + 1, max as u64)
                } else {
                    AwsError::Unavailable(format!("{url}: reading the answer: {e}"))
                }
            })?
            .to_bytes();
        let body = String::from_utf8_lossy(&bytes).into_owned();
        let request_id = header_id
            .or_else(|| {
                ["requestId", "RequestId", "RequestID"]
                    .iter()
                    .find_map(|t| element(&body, t))
                    .map(str::to_string)
            })
            .unwrap_or_default();
        Ok(Answer {
            status,
            request_id,
            body,
        })
    }
}

/// The POST of `body` to `url`, signed with SigV4 over exactly these headers and bytes.
fn sign(
    url: &http::Uri,
    region: &str,
    service: &str,
    body: Bytes,
    creds: &Credentials,
) -> Result<http::Request<Full<Bytes>>, AwsError> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    let internal = |e: &dyn std::fmt::Display| AwsError::Invalid(format!("signing: {e}"));
    let host = url
        .authority()
        .map(|a| a.as_str().to_string())
        .ok_or_else(|| AwsError::Invalid(format!("{url} has no host")))?;
    let mut request = http::Request::post(url.clone())
        .header(http::header::HOST, &host)
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded; charset=utf-8",
        )
        .body(Full::new(body.clone()))
        .map_err(|e| internal(&e))?;
    let identity = aws_credential_types::Credentials::new(
        &creds.access_key_id,
        &creds.secret_access_key,
        creds.session_token.clone(),
        None,
        "capw-host",
    )
    .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| internal(&e))?
        .into();
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let uri = url.to_string();
    let signable = SignableRequest::new(
        "POST",
        uri.as_str(),
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::Bytes(&body),
    )
    .map_err(|e| internal(&e))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| internal(&e))?
        .into_parts();
    instructions.apply_to_request_http1x(&mut request);
    Ok(request)
}

/// The text of the first `<tag>` element: AWS's error bodies are flat enough that the host
/// needs no XML parser to find a code (the component parses the answer).
fn element<'a>(body: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = body.find(&open)? + open.len();
    let end = body[start..].find("</")? + start;
    Some(body[start..end].trim())
}

fn error_code(body: &str) -> Option<&str> {
    if body.contains("<Error") {
        element(body, "Code")
    } else {
        None
    }
}

fn error_text(a: &Answer) -> String {
    match (error_code(&a.body), element(&a.body, "Message")) {
        (Some(c), Some(m)) => format!("{c}: {m}"),
        (Some(c), None) => c.to_string(),
        _ => format!("HTTP {}", a.status),
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn codes_and_request_ids_are_found_in_both_error_shapes() {
        let ec2 = "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>slow down</Message></Error></Errors><RequestID>r-1</RequestID></Response>";
        assert_eq!(error_code(ec2), Some("RequestLimitExceeded"));
        assert_eq!(element(ec2, "RequestID"), Some("r-1"));
        let elb = "<ErrorResponse><Error><Type>Sender</Type><Code>AuthFailure</Code><Message>bad</Message></Error><RequestId>r-2</RequestId></ErrorResponse>";
        assert_eq!(error_code(elb), Some("AuthFailure"));
        let ok = "<DescribeVpcsResponse><requestId>r-3</requestId><vpcSet/></DescribeVpcsResponse>";
        assert_eq!(error_code(ok), None);
        assert_eq!(element(ok, "requestId"), Some("r-3"));
    }

    #[test]
    fn the_signature_covers_host_and_body_and_carries_the_token() {
        let creds = Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: Some("tok".into()),
        };
        let url: http::Uri = "http://127.0.0.1:5055/".parse().unwrap();
        let r = sign(
            &url,
            "us-east-1",
            "ec2",
            Bytes::from_static(b"Action=DescribeVpcs"),
            &creds,
        )
        .unwrap();
        let auth = r.headers()["authorization"].to_str().unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"),
            "{auth}"
        );
        assert!(auth.contains("/us-east-1/ec2/aws4_request"), "{auth}");
        assert!(
            auth.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"),
            "{auth}"
        );
        assert_eq!(r.headers()["x-amz-security-token"], "tok");
        assert!(!auth.contains("wJalr"), "the secret is never sent");
    }
}
