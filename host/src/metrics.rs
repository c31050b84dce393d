//! Prometheus text metrics of the host: reconciles per controller (count, errors, duration) and
//! plugin calls per plugin version (count, latency, traps, timeouts).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += secs;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        for (i, b) in BUCKETS.iter().enumerate() {
            let n = self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {n}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

#[derive(Default)]
struct ReconcileStats {
    total: u64,
    errors: u64,
    duration: Histogram,
}

#[derive(Default)]
struct CallStats {
    calls: u64,
    errors: u64,
    traps: u64,
    timeouts: u64,
    latency: Histogram,
}

#[derive(Default)]
struct Inner {
    reconciles: BTreeMap<String, ReconcileStats>,
    /// By (plugin, version).
    calls: BTreeMap<(String, String), CallStats>,
}

/// The host's metrics; cheap to update from every reconcile and call.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

/// How a plugin call ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    Ok,
    Error,
    Trap,
    Timeout,
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn reconcile(&self, controller: &str, took: Duration, ok: bool) {
        let mut g = self.lock();
        let e = g.reconciles.entry(controller.to_string()).or_default();
        e.total += 1;
        if !ok {
            e.errors += 1;
        }
        e.duration.observe(took.as_secs_f64());
    }

    pub fn plugin_call(&self, plugin: &str, version: &str, took: Duration, outcome: CallOutcome) {
        let mut g = self.lock();
        let e = g
            .calls
            .entry((plugin.to_string(), version.to_string()))
            .or_default();
        e.calls += 1;
        match outcome {
            CallOutcome::Ok => {}
            CallOutcome::Error => e.errors += 1,
            CallOutcome::Trap => e.traps += 1,
            CallOutcome::Timeout => e.timeouts += 1,
        }
        e.latency.observe(took.as_secs_f64());
    }

    /// Total reconciles of `controller` so far.
    pub fn reconcile_count(&self, controller: &str) -> u64 {
        self.lock()
            .reconciles
            .get(controller)
            .map(|e| e.total)
            .unwrap_or(0)
    }

    pub fn render(&self) -> String {
        let g = self.lock();
        let mut out = String::new();
        out.push_str("# HELP capw_reconcile_total Reconciles per controller.\n# TYPE capw_reconcile_total counter\n");
        for (c, e) in &g.reconciles {
            let _ = writeln!(
                out,
                "capw_reconcile_total{{controller=\"{c}\"}} {}",
                e.total
            );
        }
        out.push_str("# HELP capw_reconcile_errors_total Failed reconciles per controller.\n# TYPE capw_reconcile_errors_total counter\n");
        for (c, e) in &g.reconciles {
            let _ = writeln!(
                out,
                "capw_reconcile_errors_total{{controller=\"{c}\"}} {}",
                e.errors
            );
        }
        out.push_str("# HELP capw_reconcile_duration_seconds Reconcile duration per controller.\n# TYPE capw_reconcile_duration_seconds histogram\n");
        for (c, e) in &g.reconciles {
            e.duration.render(
                &mut out,
                "capw_reconcile_duration_seconds",
                &format!("controller=\"{c}\""),
            );
        }
        out.push_str("# HELP capw_plugin_calls_total Plugin calls per plugin version.\n# TYPE capw_plugin_calls_total counter\n");
        for ((p, v), e) in &g.calls {
            let _ = writeln!(
                out,
                "capw_plugin_calls_total{{plugin=\"{p}\",version=\"{v}\"}} {}",
                e.calls
            );
        }
        for (metric, help, idx) in [
            ("capw_plugin_errors_total", "Provider errors", 1),
            ("capw_plugin_traps_total", "Traps", 2),
            ("capw_plugin_timeouts_total", "Timeouts", 3),
        ] {
            let _ = writeln!(
                out,
                "# HELP {metric} {help} per plugin version.\n# TYPE {metric} counter"
            );
            for ((p, v), e) in &g.calls {
                let n = match idx {
                    1 => e.errors,
                    2 => e.traps,
                    _ => e.timeouts,
                };
                let _ = writeln!(out, "{metric}{{plugin=\"{p}\",version=\"{v}\"}} {n}");
            }
        }
        out.push_str("# HELP capw_plugin_call_duration_seconds Plugin call latency per plugin version.\n# TYPE capw_plugin_call_duration_seconds histogram\n");
        for ((p, v), e) in &g.calls {
            e.latency.render(
                &mut out,
                "capw_plugin_call_duration_seconds",
                &format!("plugin=\"{p}\",version=\"{v}\""),
            );
        }
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
            "capw_reconcile_duration_seconds_bucket{controller=\"cluster\",le=\"0.005\"} 1"
        ));
        assert!(text.contains("capw_plugin_traps_total{plugin=\"inmemory\",version=\"0.1.0\"} 1"));
        assert_eq!(m.reconcile_count("cluster"), 2);
    }
}
