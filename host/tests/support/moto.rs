//! moto, the EC2 and Elastic Load Balancing emulator, as a child process on a loopback port
//! (`.tools/moto`, installed by `scripts/test`), with the CAPA-named AMIs of
//! `tests/aws/amis.json`. A strict one checks every SigV4 signature against an IAM key.

#![allow(dead_code)]

use super::KillOnDrop;
use capw_runtime::capabilities::aws::{AwsBackend, AwsPermit, Call, Environment, Policy};
use std::process::{Command, Stdio};
use std::time::Duration;

pub struct Moto {
    pub url: String,
    /// The IAM key a strict emulator checks signatures against.
    pub key: (String, String),
    _child: KillOnDrop,
    /// Holds the routes file of [`Moto::sim_ec2`].
    dir: tempfile::TempDir,
}

impl Moto {
    /// Starts moto; `strict` turns its signature check on and makes an IAM user's key.
    pub fn start(strict: bool) -> Moto {
        let server = super::tool(
            "CAPW_MOTO_SERVER",
            ".tools/moto/bin/moto_server",
            "run scripts/test once to install the EC2 emulator",
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut cmd = Command::new(&server);
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .env(
                "MOTO_AMIS_PATH",
                super::repo_root().join("tests/aws/amis.json"),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if strict {
            cmd.env("INITIAL_NO_AUTH_ACTION_COUNT", "3");
        }
        let child = KillOnDrop(cmd.spawn().expect("moto_server starts"));
        let url = format!("http://127.0.0.1:{port}");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "moto did not listen on {url}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let key = if strict {
            let python = server.with_file_name("python");
            let out = Command::new(python)
                .arg(super::repo_root().join("tests/aws/iam_key.py"))
                .arg(&url)
                .output()
                .expect("iam_key.py runs");
            assert!(
                out.status.success(),
                "iam_key.py: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("key JSON");
            (
                v["id"].as_str().unwrap().to_string(),
                v["secret"].as_str().unwrap().to_string(),
            )
        } else {
            ("AKIDCAPWTEST".into(), "capw-test-secret".into())
        };
        Moto {
            url,
            key,
            _child: child,
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// The host environment that points capw:host/aws here, with `secret` as the secret key.
    pub fn env_with(&self, secret: &str) -> Environment {
        self.env_at(&self.url, secret)
    }

    /// The host environment that sends to `url` (a proxy in front of this emulator).
    pub fn env_at(&self, url: &str, secret: &str) -> Environment {
        Environment::from_pairs([
            ("AWS_ENDPOINT_URL", url),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", self.key.0.as_str()),
            ("AWS_SECRET_ACCESS_KEY", secret),
        ])
    }

    pub fn env(&self) -> Environment {
        self.env_with(&self.key.1)
    }

    /// Where [`Moto::sim_ec2`] writes its routes: give the host the same file.
    pub fn routes(&self) -> std::path::PathBuf {
        self.dir.path().join("connect-to")
    }

    /// `capw sim ec2` booting this emulator's instances. Its lines go to the test's output.
    pub fn sim_ec2(&self) -> KillOnDrop {
        let routes = self.routes();
        KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_capw"))
                .args([
                    "sim",
                    "ec2",
                    "--endpoint",
                    &self.url,
                    "--interval-ms",
                    "300",
                ])
                .args(["--boot-delay-ms", "100", "--node-delay-ms", "200"])
                .arg("--connect-to")
                .arg(&routes)
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ACCESS_KEY_ID", &self.key.0)
                .env("AWS_SECRET_ACCESS_KEY", &self.key.1)
                .env_remove("AWS_ENDPOINT_URL")
                .stdin(Stdio::null())
                .spawn()
                .expect("capw sim ec2 starts"),
        )
    }

    /// One signed call, as the test's own look at the emulator; answers the XML.
    pub async fn call(&self, service: &str, action: &str, params: &[(&str, &str)]) -> String {
        let backend = AwsBackend::with(self.env(), None, Policy::default()).expect("backend");
        let version = if service == "ec2" {
            "2016-11-15"
        } else {
            "2015-12-01"
        };
        // The test's own look is granted whatever it asks.
        let mut permit = AwsPermit::default();
        permit
            .actions
            .entry(service.to_string())
            .or_default()
            .insert(action.to_string());
        let a = backend
            .call(
                "test",
                &permit,
                Call {
                    region: "us-east-1".into(),
                    service: service.into(),
                    version: version.into(),
                    action: action.into(),
                    params: params
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{service}:{action}: {e}"));
        assert!(
            a.status < 300,
            "{service}:{action} answered {}: {}",
            a.status,
            a.body
        );
        a.body
    }

    /// How many EC2 resources of `describe` (listing `id_tag` elements) carry `cluster`'s
    /// owned tag.
    pub async fn tagged(
        &self,
        cluster: &str,
        describe: &str,
        id_tag: &str,
        extra: &[(&str, &str)],
    ) -> usize {
        let key = format!("tag:sigs.k8s.io/cluster-api-provider-aws/cluster/{cluster}");
        let mut params = vec![
            ("Filter.1.Name", key.as_str()),
            ("Filter.1.Value.1", "owned"),
        ];
        params.extend_from_slice(extra);
        let body = self.call("ec2", describe, &params).await;
        body.matches(&format!("<{id_tag}>")).count()
    }
}

/// What a [`FaultProxy`] answers instead of forwarding.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// `503 Service Unavailable`.
    Unavailable,
    /// EC2's throttling answer: 503 with `RequestLimitExceeded`, as AWS sends it.
    Throttled,
}

/// A loopback proxy in front of moto that answers the first faults itself, then forwards every
/// connection: AWS having a bad minute, with a real emulator behind it.
pub struct FaultProxy {
    pub url: String,
    /// Faults still to answer.
    pub left: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    pub async fn start(upstream: &str, fault: Fault, count: usize) -> FaultProxy {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let left = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(count));
        let counter = left.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let counter = counter.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let take = counter
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if !take {
                        let Ok(mut out) = tokio::net::TcpStream::connect(&upstream).await else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                        return;
                    }
                    // Read the whole request, so the client sees an answer, not a reset.
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 8192];
                    loop {
                        let Ok(n) = inbound.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&buf);
                        if let Some(end) = text.find("\r\n\r\n") {
                            let len = text[..end]
                                .lines()
                                .find_map(|l| {
                                    let (k, v) = l.split_once(':')?;
                                    k.eq_ignore_ascii_case("content-length")
                                        .then(|| v.trim().parse::<usize>().ok())?
                                })
                                .unwrap_or(0);
                            if buf.len() >= end + 4 + len {
                                break;
                            }
                        }
                    }
                    let body = match fault {
                        Fault::Unavailable => {
                            "<Response><Errors><Error><Code>ServiceUnavailable</Code><Message>try again</Message></Error></Errors><RequestID>fault</RequestID></Response>"
                        }
                        Fault::Throttled => {
                            "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>fault</RequestID></Response>"
                        }
                    };
                    let answer = format!(
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = inbound.write_all(answer.as_bytes()).await;
                    let _ = inbound.shutdown().await;
                });
            }
        });
        FaultProxy { url, left, task }
    }
}

/// What the emulator holds for a cluster, by CAPA's owned tag.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Inventory {
    pub vpcs: usize,
    pub subnets: usize,
    pub groups: usize,
    pub gateways: usize,
    pub addresses: usize,
    /// NAT gateways not deleted.
    pub nats: usize,
    /// Instances pending or running.
    pub instances: usize,
}

impl Moto {
    pub async fn inventory(&self, cluster: &str) -> Inventory {
        let live = [
            ("Filter.2.Name", "instance-state-name"),
            ("Filter.2.Value.1", "pending"),
            ("Filter.2.Value.2", "running"),
        ];
        let available = [
            ("Filter.2.Name", "state"),
            ("Filter.2.Value.1", "available"),
        ];
        Inventory {
            vpcs: self.tagged(cluster, "DescribeVpcs", "vpcId", &[]).await,
            subnets: self
                .tagged(cluster, "DescribeSubnets", "subnetId", &[])
                .await,
            groups: self
                .tagged(cluster, "DescribeSecurityGroups", "groupId", &[])
                .await,
            gateways: self
                .tagged(
                    cluster,
                    "DescribeInternetGateways",
                    "internetGatewayId",
                    &[],
                )
                .await,
            addresses: self
                .tagged(cluster, "DescribeAddresses", "allocationId", &[])
                .await,
            nats: self
                .tagged(cluster, "DescribeNatGateways", "natGatewayId", &available)
                .await,
            instances: self
                .tagged(cluster, "DescribeInstances", "instanceId", &live)
                .await,
        }
    }
}
