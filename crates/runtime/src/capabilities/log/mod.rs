//! `capw:host/log`: a plugin's log lines, tagged with the plugin, its version, the object and
//! the call, capped per call and rate-limited per plugin across calls. Granted to every plugin.
//!
//! Each `log` call is one host line: control characters in the plugin's text (and in its
//! version, which is the plugin's word too) are escaped ([`crate::logging::escape`]), so a
//! plugin can neither start a line of its own that looks like the host's nor drive a terminal.
//! A line is charged at the bytes the host's log writer really wrote for it
//! ([`crate::logging::written_here`]); before it is written, it must fit at its estimate (its
//! text plus the record size the plugin's previous line came to).

mod glue;

use crate::bindings::log;
use crate::host::HostState;
use wasmtime::component::{HasSelf, Linker};

/// Its short name.
pub const NAME: &str = "log";

/// `capw:host/log`, granted to every plugin.
pub struct Log;

impl super::HostCapability for Log {
    fn name(&self) -> &'static str {
        NAME
    }
    fn interface(&self) -> &'static str {
        "capw:host/log@0.2.0"
    }
    fn link(&self, l: &mut Linker<HostState>) -> wasmtime::Result<()> {
        log::add_to_linker::<HostState, HasSelf<HostState>>(l, |s| s)
    }
}

/// The least one log line costs against the caps beyond its text: what a line the host keeps
/// but does not write (below the log level) costs, and the first estimate of a written line's
/// record (time, level, spans, plugin, version, object, call).
pub const LOG_LINE_COST: usize = 128;

/// Log bytes each plugin may emit across all its calls: a bucket of `LOG_BURST` bytes that
/// refills at `LOG_RATE` bytes a second.
const LOG_BURST: f64 = (1 << 20) as f64;
const LOG_RATE: f64 = (256 << 10) as f64;

#[derive(Default)]
pub struct LogRate {
    buckets: std::sync::Mutex<std::collections::HashMap<String, (f64, std::time::Instant)>>,
}

impl LogRate {
    /// The plugin's bucket, refilled for the time since it was last used.
    fn level<'a>(
        b: &'a mut std::collections::HashMap<String, (f64, std::time::Instant)>,
        plugin: &str,
    ) -> &'a mut f64 {
        let now = std::time::Instant::now();
        let (level, at) = b.entry(plugin.to_string()).or_insert((LOG_BURST, now));
        *level = (*level + now.duration_since(*at).as_secs_f64() * LOG_RATE).min(LOG_BURST);
        *at = now;
        level
    }

    /// Whether the plugin's bucket holds `estimate` bytes; takes nothing.
    pub fn admits(&self, plugin: &str, estimate: usize) -> bool {
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        *Self::level(&mut b, plugin) >= estimate as f64
    }

    /// Takes `cost` bytes, what a line really came to, from the plugin's bucket. The bucket
    /// may go below empty by the estimate's error; the plugin waits that much longer.
    pub fn charge(&self, plugin: &str, cost: usize) {
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        *Self::level(&mut b, plugin) -= cost as f64;
    }
}

/// Log lines of one call, capped in bytes.
#[derive(Debug, Default)]
pub struct LogSink {
    pub plugin: String,
    /// The plugin's version, escaped: it is the plugin's own text.
    pub version: String,
    /// The call's object as JSON; its `namespace/name` is worked out only if the plugin logs.
    pub object_json: String,
    object: Option<String>,
    /// This process's sequence number of the call, so the lines of one call can be told apart.
    pub call: u64,
    pub lines: Vec<(log::Level, String)>,
    /// Bytes the host's log writer wrote for the lines.
    pub written: usize,
    pub dropped: usize,
    left: usize,
    /// What the last written line's record (all but the text) came to: the next estimate.
    record: usize,
}

static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl LogSink {
    /// The sink of one call of `plugin` at `version` on `object_json`, holding `bytes` at most.
    pub fn new(plugin: &str, version: &str, object_json: String, bytes: usize) -> LogSink {
        LogSink {
            plugin: plugin.into(),
            version: crate::logging::escape(version).into_owned(),
            object_json,
            call: CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
            left: bytes,
            record: LOG_LINE_COST,
            ..Default::default()
        }
    }
}

/// `namespace/name` of an object given as JSON.
pub(crate) fn object_ref(json: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let s = |p: &str| {
        v.pointer(p)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    crate::logging::escape(&format!(
        "{}/{}",
        s("/metadata/namespace"),
        s("/metadata/name")
    ))
    .into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_rate_is_charged_what_lines_really_cost() {
        let rate = super::LogRate::default();
        assert!(rate.admits("p", super::LOG_BURST as usize));
        // One line that came out far longer than its estimate empties the bucket for all.
        rate.charge("p", super::LOG_BURST as usize + (64 << 10));
        assert!(!rate.admits("p", 1));
        assert!(rate.admits("other", 1), "buckets are per plugin");
    }
}
