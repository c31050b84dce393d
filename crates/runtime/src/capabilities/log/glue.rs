//! The WIT side of `capw:host/log`.

use super::{LOG_LINE_COST, object_ref};
use crate::bindings::log;
use crate::host::HostState;
use crate::logging::{escape, written_here};

impl log::Host for HostState {
    fn log(&mut self, level: log::Level, message: String) {
        // Looked up once per line: the lookup takes the backends' lock.
        let rate = self.services.backends.get_or_default::<super::LogRate>();
        let sink = &mut self.log;
        // Most messages need no escaping: those keep their own buffer.
        let escaped = match escape(&message) {
            std::borrow::Cow::Owned(s) => Some(s),
            std::borrow::Cow::Borrowed(_) => None,
        };
        let text = escaped.unwrap_or(message);
        // A line costs its record as well as its text, so empty lines are not free; and each
        // plugin has a rate across calls, so many short calls cannot flood the host's log.
        let estimate = text.len() + sink.record;
        if estimate > sink.left || !rate.admits(&sink.plugin, estimate) {
            sink.dropped += estimate;
            return;
        }
        let enabled = match level {
            log::Level::Error => tracing::enabled!(tracing::Level::ERROR),
            log::Level::Warn => tracing::enabled!(tracing::Level::WARN),
            log::Level::Info => tracing::enabled!(tracing::Level::INFO),
            log::Level::Debug => tracing::enabled!(tracing::Level::DEBUG),
            log::Level::Trace => tracing::enabled!(tracing::Level::TRACE),
        };
        let before = written_here();
        // Working out the object's name means parsing its JSON: only when the line is emitted.
        if enabled {
            let object = sink
                .object
                .get_or_insert_with(|| object_ref(&sink.object_json))
                .clone();
            let (plugin, version, call) = (&sink.plugin, &sink.version, sink.call);
            match level {
                log::Level::Error => tracing::error!(%plugin, %version, %object, call, "{text}"),
                log::Level::Warn => tracing::warn!(%plugin, %version, %object, call, "{text}"),
                log::Level::Info => tracing::info!(%plugin, %version, %object, call, "{text}"),
                log::Level::Debug => tracing::debug!(%plugin, %version, %object, call, "{text}"),
                log::Level::Trace => tracing::trace!(%plugin, %version, %object, call, "{text}"),
            }
        }
        let written = usize::try_from(written_here() - before).unwrap_or(usize::MAX);
        // What was written, when the host's writer counted it; else what the line holds.
        let cost = if written > 0 {
            sink.record = written.saturating_sub(text.len()).max(LOG_LINE_COST);
            written
        } else {
            text.len() + LOG_LINE_COST
        };
        sink.left = sink.left.saturating_sub(cost);
        sink.written += written;
        self.services
            .backends
            .get_or_default::<super::LogRate>()
            .charge(&sink.plugin, cost);
        sink.lines.push((level, text));
    }
}
