//! Prometheus metrics of the host: reconciles per controller (count, errors, duration), plugin
//! calls per plugin version (count, latency, errors, traps, timeouts) and the cloud API calls
//! plugins make through the host (`capw:host/aws`, per action and outcome), encoded by
//! `prometheus-client`, which escapes label values (a plugin version is plugin-chosen text).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::Duration;

/// The content type of the OpenMetrics text [`Metrics::render`] writes.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabels {
    controller: String,
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
    version: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CloudLabels {
    plugin: String,
    service: String,
    action: String,
    /// The answer's HTTP status class (`2xx`, `4xx`, `5xx`), or `error` when there was none
    /// (refused by the grant, or still throttled or unreachable after the retries).
    outcome: String,
}

#[derive(Debug, Clone, Copy)]
struct Buckets;

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(BUCKETS.iter().copied())
    }
}

/// The host's metrics; cheap to update from every reconcile and call.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    waits: Family<WaitLabels, Counter>,
    reconcile_duration: Family<ControllerLabels, Histogram, Buckets>,
    calls: Family<PluginLabels, Counter>,
    call_errors: Family<PluginLabels, Counter>,
    call_traps: Family<PluginLabels, Counter>,
    call_timeouts: Family<PluginLabels, Counter>,
    call_duration: Family<PluginLabels, Histogram, Buckets>,
    cloud_calls: Family<CloudLabels, Counter>,
    leader: Gauge,
}

/// How a plugin call ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    Ok,
    Error,
    Trap,
    Timeout,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            waits: Family::default(),
            reconcile_duration: Family::new_with_constructor(Buckets),
            calls: Family::default(),
            call_errors: Family::default(),
            call_traps: Family::default(),
            call_timeouts: Family::default(),
            call_duration: Family::new_with_constructor(Buckets),
            cloud_calls: Family::default(),
            leader: Gauge::default(),
            registry: Registry::default(),
        };
        // Counters are registered without `_total`: the encoder appends it.
        for (name, help, family) in [
            ("capw_reconcile", "Reconciles per controller", &m.reconciles),
            (
                "capw_reconcile_errors",
                "Failed reconciles per controller",
                &m.reconcile_errors,
            ),
        ] {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "capw_reconcile_waits",
            "Reconciles that ended waiting for something, per controller and reason",
            m.waits.clone(),
        );
        for (name, help, family) in [
            (
                "capw_plugin_calls",
                "Plugin calls per plugin version",
                &m.calls,
            ),
            (
                "capw_plugin_errors",
                "Provider errors per plugin version",
                &m.call_errors,
            ),
            (
                "capw_plugin_traps",
                "Traps per plugin version",
                &m.call_traps,
            ),
            (
                "capw_plugin_timeouts",
                "Timeouts per plugin version",
                &m.call_timeouts,
            ),
        ] {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "capw_reconcile_duration_seconds",
            "Reconcile duration per controller",
            m.reconcile_duration.clone(),
        );
        registry.register(
            "capw_plugin_call_duration_seconds",
            "Plugin call latency per plugin version",
            m.call_duration.clone(),
        );
        registry.register(
            "capw_aws_calls",
            "AWS API calls plugins made through capw:host/aws, per action and outcome",
            m.cloud_calls.clone(),
        );
        registry.register(
            "capw_leader",
            "1 while this host holds the leader-election Lease (or runs without election), 0 while it stands by",
            m.leader.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Counts one reconcile of `controller`.
    pub fn reconcile(&self, controller: &str, took: Duration, ok: bool) {
        let l = ControllerLabels {
            controller: controller.to_string(),
        };
        self.reconciles.get_or_create(&l).inc();
        let errors = self.reconcile_errors.get_or_create(&l);
        if !ok {
            errors.inc();
        }
        self.reconcile_duration
            .get_or_create(&l)
            .observe(took.as_secs_f64());
    }

    /// Counts one reconcile of `controller` that ended waiting (`reason` says for what).
    pub fn wait(&self, controller: &str, reason: &str) {
        self.waits
            .get_or_create(&WaitLabels {
                controller: controller.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts one call of a plugin version.
    pub fn plugin_call(&self, plugin: &str, version: &str, took: Duration, outcome: CallOutcome) {
        let l = PluginLabels {
            plugin: plugin.to_string(),
            version: version.to_string(),
        };
        self.calls.get_or_create(&l).inc();
        // Every outcome's counter exists from the first call, so a zero is reported as zero.
        for (family, counted) in [
            (&self.call_errors, CallOutcome::Error),
            (&self.call_traps, CallOutcome::Trap),
            (&self.call_timeouts, CallOutcome::Timeout),
        ] {
            let c = family.get_or_create(&l);
            if outcome == counted {
                c.inc();
            }
        }
        self.call_duration
            .get_or_create(&l)
            .observe(took.as_secs_f64());
    }

    /// Counts one AWS API call of `plugin`; `status` is the answer's, `None` when it got none.
    pub fn aws_call(&self, plugin: &str, service: &str, action: &str, status: Option<u16>) {
        let outcome = match status {
            Some(s) => format!("{}xx", s / 100),
            None => "error".to_string(),
        };
        self.cloud_calls
            .get_or_create(&CloudLabels {
                plugin: plugin.to_string(),
                service: service.to_string(),
                action: action.to_string(),
                outcome,
            })
            .inc();
    }

    /// Whether this host leads: only a leader runs controllers.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Total reconciles of `controller` so far.
    pub fn reconcile_count(&self, controller: &str) -> u64 {
        self.reconciles
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .get()
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = Metrics::default();
        m.reconcile("cluster", Duration::from_millis(3), true);
        m.reconcile("cluster", Duration::from_millis(30), false);
        m.plugin_call(
            "inmemory",
            "0.1.0",
            Duration::from_micros(40),
            CallOutcome::Trap,
        );
        let text = m.render();
        assert!(text.contains("capw_reconcile_total{controller=\"cluster\"} 2"));
        assert!(text.contains("capw_reconcile_errors_total{controller=\"cluster\"} 1"));
        assert!(text.contains(
            // prometheus-client writes `le` first; the sample is the same.
            "capw_reconcile_duration_seconds_bucket{le=\"0.005\",controller=\"cluster\"} 1"
        ));
        assert!(text.contains("capw_plugin_traps_total{plugin=\"inmemory\",version=\"0.1.0\"} 1"));
        assert_eq!(m.reconcile_count("cluster"), 2);
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::default();
        m.plugin_call(
            "evil",
            "1.0.0-\"quoted\"\\\n",
            Duration::from_micros(1),
            CallOutcome::Ok,
        );
        let text = m.render();
        assert!(
            text.contains(
                r#"capw_plugin_calls_total{plugin="evil",version="1.0.0-\"quoted\"\\\n"} 1"#
            ),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
