//! Leader election over a `coordination.k8s.io/v1` Lease, with client-go's `LeaderElector`
//! semantics, which controller-runtime (and so every Cluster API manager) uses:
//!
//! - a candidate tries every retry period, with jitter, and takes the Lease once its holder has
//!   not renewed it for the lease duration, measured on the candidate's own clock from when it
//!   last saw the record change (so clock skew between hosts does not matter);
//! - the leader renews every retry period, and gives up once no renewal succeeded within the
//!   renew deadline, which is shorter than the lease duration: a leader cut off from the API
//!   stops before anybody else may start;
//! - updates are guarded by the Lease's resourceVersion, so two candidates never both win.
//!
//! Hand-written rather than `kube-lease-manager` (the maintained crate for kube 5): that crate
//! models a duration and a grace period only. It has no renew deadline, and its watcher keeps
//! reporting leadership while renewals fail, so a leader partitioned from the API would go on
//! reconciling after another host took over. The loop below is client-go's, in about a
//! hundred lines.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use std::time::{Duration, Instant};

/// client-go's `JitterFactor` for the retry period.
const JITTER: f64 = 1.2;

/// How the host takes part in leader election.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name (`--leader-election-id`).
    pub name: String,
    /// Who this host is in `spec.holderIdentity`.
    pub identity: String,
    /// How long a Lease stays taken after its last renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// How often a candidate tries to take the Lease and the leader renews it.
    pub retry_period: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error(
        "leader election settings: {0} (upstream's defaults are a 15s lease, a 10s renew deadline and a 2s retry period)"
    )]
    Settings(String),
    #[error("lost the Lease {namespace}/{name}: no renewal succeeded within {deadline:?}")]
    Lost {
        namespace: String,
        name: String,
        deadline: Duration,
    },
}

impl LeaderElection {
    /// Upstream's settings (15 s, 10 s, 2 s) for the Lease `namespace/name`, held as this
    /// process: the host name and a random suffix, as controller-runtime names it.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        let host = std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
            })
            .unwrap_or_else(|| "capw".into());
        LeaderElection {
            namespace: namespace.into(),
            name: name.into(),
            identity: format!("{host}_{}", uuid::Uuid::new_v4()),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// client-go's checks: the deadline must leave room for retries, and the lease must
    /// outlast the deadline.
    pub fn validate(&self) -> Result<(), LeaderError> {
        if self.lease_duration <= self.renew_deadline {
            return Err(LeaderError::Settings(format!(
                "the lease duration ({:?}) must be longer than the renew deadline ({:?})",
                self.lease_duration, self.renew_deadline
            )));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER * self.retry_period.as_secs_f64() {
            return Err(LeaderError::Settings(format!(
                "the renew deadline ({:?}) must be longer than {JITTER} × the retry period ({:?})",
                self.renew_deadline, self.retry_period
            )));
        }
        if self.retry_period.is_zero() {
            return Err(LeaderError::Settings(
                "the retry period must not be 0".into(),
            ));
        }
        Ok(())
    }
}

/// The record as last seen, and when this host saw it change.
struct Observed {
    spec: LeaseSpec,
    at: Instant,
}

/// One host's candidacy for one Lease.
pub struct Elector {
    api: Api<Lease>,
    settings: LeaderElection,
    observed: Option<Observed>,
}

impl Elector {
    pub fn new(client: Client, settings: LeaderElection) -> Result<Self, LeaderError> {
        settings.validate()?;
        Ok(Elector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: None,
        })
    }

    /// The Lease and who holds it, for log lines.
    pub fn describe(&self) -> String {
        format!(
            "{}/{} as {}",
            self.settings.namespace, self.settings.name, self.settings.identity
        )
    }

    /// Waits until this host holds the Lease.
    pub async fn acquire(&mut self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %self.describe(), "became the leader");
                    return;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(lease = %self.describe(), error = %e, "cannot read or take the Lease; trying again")
                }
            }
            tokio::time::sleep(self.jittered()).await;
        }
    }

    /// Renews the Lease every retry period; returns once no renewal succeeded within the renew
    /// deadline (or another host holds it), which ends this host's leadership.
    pub async fn hold(&mut self) -> LeaderError {
        let mut last = Instant::now();
        loop {
            tokio::time::sleep(self.settings.retry_period).await;
            let left = self.settings.renew_deadline.saturating_sub(last.elapsed());
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => last = Instant::now(),
                Ok(Ok(false)) => {
                    tracing::error!(lease = %self.describe(), "another host holds the Lease");
                    return self.lost();
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.describe(), error = %e, "renewing the Lease failed")
                }
                Err(_) => {}
            }
            if last.elapsed() >= self.settings.renew_deadline {
                return self.lost();
            }
        }
    }

    /// Gives the Lease up, as client-go's `ReleaseOnCancel`: a standby then takes over at its
    /// next try instead of after the lease duration.
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.settings.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(&self.settings.identity) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        if let Err(e) = self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            tracing::warn!(lease = %self.describe(), error = %e, "releasing the Lease failed; a standby takes over once it expires");
        }
    }

    fn lost(&self) -> LeaderError {
        LeaderError::Lost {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
            deadline: self.settings.renew_deadline,
        }
    }

    fn jittered(&self) -> Duration {
        self.settings
            .retry_period
            .mul_f64(1.0 + rand::random::<f64>() * (JITTER - 1.0))
    }

    /// client-go's `tryAcquireOrRenew`: `Ok(true)` when this host holds the Lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let me = self.settings.identity.clone();
        let seconds = i32::try_from(self.settings.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(created.spec.unwrap_or_default());
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let current = lease.spec.clone().unwrap_or_default();
        self.observe(current.clone());
        let holder = current.holder_identity.as_deref().filter(|h| !h.is_empty());
        let ours = holder == Some(me.as_str());
        if holder.is_some() && !ours && !self.expired(&current) {
            return Ok(false);
        }
        let spec = lease.spec.get_or_insert_with(Default::default);
        if !ours {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(current.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(me);
        spec.lease_duration_seconds = Some(seconds);
        spec.renew_time = Some(now);
        // The resourceVersion read above guards the replace: a concurrent taker gets 409.
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.observe(updated.spec.unwrap_or_default());
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn observe(&mut self, spec: LeaseSpec) {
        if self.observed.as_ref().is_some_and(|o| o.spec == spec) {
            return;
        }
        self.observed = Some(Observed {
            spec,
            at: Instant::now(),
        });
    }

    /// Whether the holder let the Lease lapse: its own duration has passed on this host's
    /// clock since this host saw the record change.
    fn expired(&self, spec: &LeaseSpec) -> bool {
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(self.settings.lease_duration);
        self.observed
            .as_ref()
            .is_some_and(|o| o.at.elapsed() > duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_defaults_pass_and_impossible_settings_are_named() {
        let ok = LeaderElection::new("ns", "id");
        assert!(ok.validate().is_ok());
        assert_eq!(ok.lease_duration, Duration::from_secs(15));
        let mut bad = ok.clone();
        bad.renew_deadline = Duration::from_secs(20);
        let e = bad
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("must be longer than the renew deadline"), "{e}");
        let mut bad = ok.clone();
        bad.retry_period = Duration::from_secs(9);
        let e = bad
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("1.2 × the retry period"), "{e}");
    }

    #[test]
    fn identities_differ_per_process_start() {
        let a = LeaderElection::new("ns", "id");
        let b = LeaderElection::new("ns", "id");
        assert_ne!(a.identity, b.identity);
        assert!(a.identity.contains('_'), "{}", a.identity);
    }
}
