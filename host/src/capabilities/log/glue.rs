//! The WIT side of `capw:host/log`.

use super::{LOG_LINE_COST, object_ref};
use crate::runtime::bindings::log;
use crate::runtime::host::HostState;

impl log::Host for HostState {
    fn log(&mut self, level: log::Level, message: String) {
        let sink = &mut self.log;
        // A line costs its record as well as its text, so empty lines are not free; and each
        // plugin has a rate across calls, so many short calls cannot flood the host's log.
        let cost = message.len() + LOG_LINE_COST;
        if cost > sink.left || !self.services.log_rate.take(&sink.plugin, cost) {
            sink.dropped += cost;
            return;
        }
        sink.left -= cost;
        let enabled = match level {
            log::Level::Error => tracing::enabled!(tracing::Level::ERROR),
            log::Level::Warn => tracing::enabled!(tracing::Level::WARN),
            log::Level::Info => tracing::enabled!(tracing::Level::INFO),
            log::Level::Debug => tracing::enabled!(tracing::Level::DEBUG),
            log::Level::Trace => tracing::enabled!(tracing::Level::TRACE),
        };
        // Working out the object's name means parsing its JSON: only when the line is emitted.
        if enabled {
            let object = sink
                .object
                .get_or_insert_with(|| object_ref(&sink.object_json))
                .clone();
            let (plugin, version) = (&sink.plugin, &sink.version);
            match level {
                log::Level::Error => tracing::error!(%plugin, %version, %object, "{message}"),
                log::Level::Warn => tracing::warn!(%plugin, %version, %object, "{message}"),
                log::Level::Info => tracing::info!(%plugin, %version, %object, "{message}"),
                log::Level::Debug => tracing::debug!(%plugin, %version, %object, "{message}"),
                log::Level::Trace => tracing::trace!(%plugin, %version, %object, "{message}"),
            }
        }
        sink.lines.push((level, message));
    }
}
