//! `capw:host/log`: a plugin's log lines, tagged with the plugin, its version and the object,
//! capped per call and rate-limited per plugin across calls. Granted to every plugin.

mod glue;

use crate::runtime::bindings::log;

/// What one log line costs against the caps beyond its text: the record the host writes for
/// it (level, plugin, version, object) is about this size.
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
    /// Takes `cost` bytes from the plugin's bucket; false when it is empty.
    pub fn take(&self, plugin: &str, cost: usize) -> bool {
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        if !b.contains_key(plugin) {
            b.insert(plugin.to_string(), (LOG_BURST, now));
        }
        let Some((level, at)) = b.get_mut(plugin) else {
            return false;
        };
        *level = (*level + now.duration_since(*at).as_secs_f64() * LOG_RATE).min(LOG_BURST);
        *at = now;
        let cost = cost as f64;
        if *level < cost {
            return false;
        }
        *level -= cost;
        true
    }
}

/// Log lines of one call, capped in bytes.
#[derive(Debug, Default)]
pub struct LogSink {
    pub plugin: String,
    pub version: String,
    /// The call's object as JSON; its `namespace/name` is worked out only if the plugin logs.
    pub object_json: String,
    object: Option<String>,
    pub lines: Vec<(log::Level, String)>,
    pub dropped: usize,
    left: usize,
}

impl LogSink {
    /// The sink of one call of `plugin` at `version` on `object_json`, holding `bytes` at most.
    pub fn new(plugin: &str, version: &str, object_json: String, bytes: usize) -> LogSink {
        LogSink {
            plugin: plugin.into(),
            version: version.into(),
            object_json,
            left: bytes,
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
    format!("{}/{}", s("/metadata/namespace"), s("/metadata/name"))
}
