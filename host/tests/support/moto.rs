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
            .env("MOTO_AMIS_PATH", super::repo_root().join("tests/aws/amis.json"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if strict {
            cmd.env("INITIAL_NO_AUTH_ACTION_COUNT", "3");
        }
        let child = KillOnDrop(cmd.spawn().expect("moto_server starts"));
        let url = format!("http://127.0.0.1:{port}");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "moto did not listen on {url}");
            std::thread::sleep(Duration::from_millis(100));
        }
        let key = if strict {
            let python = server.with_file_name("python");
            let out = Command::new(python)
                .arg(super::repo_root().join("tests/aws/iam_key.py"))
                .arg(&url)
                .output()
                .expect("iam_key.py runs");
            assert!(out.status.success(), "iam_key.py: {}", String::from_utf8_lossy(&out.stderr));
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("key JSON");
            (v["id"].as_str().unwrap().to_string(), v["secret"].as_str().unwrap().to_string())
        } else {
            ("AKIDCAPWTEST".into(), "capw-test-secret".into())
        };
        Moto {
            url,
            key,
            _child: child,
        }
    }

    /// The host environment that points capw:host/aws here, with `secret` as the secret key.
    pub fn env_with(&self, secret: &str) -> Environment {
        Environment::from_pairs([
            ("AWS_ENDPOINT_URL", self.url.as_str()),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", self.key.0.as_str()),
            ("AWS_SECRET_ACCESS_KEY", secret),
        ])
    }

    pub fn env(&self) -> Environment {
        self.env_with(&self.key.1)
    }

    /// One signed call, as the test's own look at the emulator; answers the XML.
    pub async fn call(&self, service: &str, action: &str, params: &[(&str, &str)]) -> String {
        let backend = AwsBackend::with(self.env(), None, Policy::default()).expect("backend");
        let version = if service == "ec2" { "2016-11-15" } else { "2015-12-01" };
        let a = backend
            .call(
                "test",
                &AwsPermit::default(),
                Call {
                    region: "us-east-1".into(),
                    service: service.into(),
                    version: version.into(),
                    action: action.into(),
                    params: params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{service}:{action}: {e}"));
        assert!(a.status < 300, "{service}:{action} answered {}: {}", a.status, a.body);
        a.body
    }

    /// How many EC2 resources of `describe` (listing `id_tag` elements) carry `cluster`'s
    /// owned tag.
    pub async fn tagged(&self, cluster: &str, describe: &str, id_tag: &str, extra: &[(&str, &str)]) -> usize {
        let key = format!("tag:sigs.k8s.io/cluster-api-provider-aws/cluster/{cluster}");
        let mut params = vec![("Filter.1.Name", key.as_str()), ("Filter.1.Value.1", "owned")];
        params.extend_from_slice(extra);
        let body = self.call("ec2", describe, &params).await;
        body.matches(&format!("<{id_tag}>")).count()
    }
}
