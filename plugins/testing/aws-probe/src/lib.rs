//! `aws-probe`: a test provider for `capw:host/aws`. Reconciling a machine makes the calls its
//! `spec.calls` lists (`{region, service, action, params}`), tries a plain socket to
//! `spec.connect`, and then searches all of its linear memory for two strings given reversed
//! (so that asking does not put them there): `spec.needleReversed`, the secret key that must
//! not be found, and `spec.controlReversed`, a string the answers did bring in, which must be
//! (proof the search works). It returns what it saw as its status patch.

use capw_sdk::aws::{self, AwsError};
use capw_sdk::*;

struct Probe;

/// What a call answered; a body is kept in `bodies` so the memory search sees it.
fn outcome(r: Result<aws::AwsResponse, AwsError>, bodies: &mut Vec<String>) -> Value {
    match r {
        Ok(a) => {
            let v = json!({"status": a.status, "requestId": a.request_id, "bytes": a.body.len()});
            bodies.push(a.body);
            v
        }
        Err(AwsError::Denied(m)) => json!({"denied": m}),
        Err(AwsError::Invalid(m)) => json!({"invalid": m}),
        Err(AwsError::Credentials(m)) => json!({"credentials": m}),
        Err(AwsError::Throttled(s)) => json!({"throttled": s}),
        Err(AwsError::Unavailable(m)) => json!({"unavailable": m}),
        Err(AwsError::TooLarge((size, cap))) => json!({"tooLarge": [size, cap]}),
    }
}

/// Whether `reversed`, read backwards, occurs anywhere in this instance's linear memory. The
/// comparison walks `reversed` from its end, so the forward string is never built.
fn in_memory(reversed: &[u8]) -> (bool, usize) {
    #[cfg(target_arch = "wasm32")]
    {
        let len = core::arch::wasm32::memory_size(0) * 65536;
        let n = reversed.len();
        if n == 0 {
            return (false, len);
        }
        let at = |i: usize| -> u8 {
            // SAFETY: every address below memory_size * 64 KiB is mapped linear memory; address
            // 0 is skipped so no null pointer is formed.
            unsafe { core::ptr::read_volatile(i as *const u8) }
        };
        let first = reversed[n - 1];
        for start in 1..len.saturating_sub(n) {
            if at(start) == first && (1..n).all(|k| at(start + k) == reversed[n - 1 - k]) {
                return (true, len);
            }
        }
        (false, len)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = reversed;
        (false, 0)
    }
}

impl Provider for Probe {
    fn metadata() -> Metadata {
        let group = "infrastructure.cluster.x-k8s.io";
        Metadata {
            kinds: vec![
                kind(group, "AwsProbeCluster", KindRole::InfrastructureCluster),
                kind(group, "AwsProbeMachine", KindRole::InfrastructureMachine),
            ],
            crds: vec![
                crd(group, "AwsProbeCluster", "awsprobeclusters", &[]),
                crd(group, "AwsProbeMachine", "awsprobemachines", &[]),
            ],
            ..Metadata::new("aws-probe", "0.1.0", ProviderType::Infrastructure)
        }
    }

    fn reconcile_machine(ctx: Context) -> Result<MachineStatus, ProviderError> {
        let obj = ctx.view()?;
        let mut calls = vec![];
        let mut bodies = vec![];
        for c in obj
            .get("/spec/calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let s = |k: &str| {
                c.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let params: Vec<(String, String)> = c
                .get("params")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let service = s("service");
            let version = if service == "ec2" {
                "2016-11-15"
            } else {
                "2015-12-01"
            };
            calls.push(outcome(
                aws::call(&aws::Call {
                    region: &s("region"),
                    service: &service,
                    version,
                    action: &s("action"),
                    params: &params,
                }),
                &mut bodies,
            ));
        }
        let connect = match std::net::TcpStream::connect(obj.str("/spec/connect")) {
            Ok(_) => "connected".to_string(),
            Err(e) => e.to_string(),
        };
        let (secret, scanned) = in_memory(obj.str("/spec/needleReversed").as_bytes());
        let (control, _) = in_memory(obj.str("/spec/controlReversed").as_bytes());
        drop(bodies);
        Ok(MachineStatus::pending(common(
            vec![],
            Some(json!({
                "calls": calls,
                "connect": connect,
                "secretFound": secret,
                "controlFound": control,
                "scannedBytes": scanned,
            })),
        )))
    }
}

capw_sdk::export_provider!(Probe);
