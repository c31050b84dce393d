//! The host's log output: `tracing-subscriber`'s text or JSON lines on stderr, through a writer
//! that counts the bytes each thread writes.
//!
//! The count is what lets a plugin's log lines be charged at what they really cost: the host's
//! record around a plugin's text (time, level, spans, plugin, version, object) is several times
//! the text of a short line, and only the formatter knows how long it came out. The formatter
//! writes an event on the thread that emitted it, so the difference of [`written_here`] around
//! one `tracing` event is the bytes that event wrote. Hand-written: no crate counts a
//! `MakeWriter`'s bytes per thread.

use std::cell::Cell;
use std::io::Write;

thread_local! {
    static WRITTEN: Cell<u64> = const { Cell::new(0) };
}

/// Bytes the host's log writer has written on this thread so far; 0 when the writer is not
/// installed (a test's own subscriber, say).
pub fn written_here() -> u64 {
    WRITTEN.with(Cell::get)
}

/// A writer that adds what it writes to this thread's count.
pub struct Counting<W>(W);

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(buf)?;
        WRITTEN.with(|w| w.set(w.get() + n as u64));
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The `MakeWriter` of the host's log: stderr, counted.
#[derive(Clone, Copy, Default)]
pub struct CountingStderr;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CountingStderr {
    type Writer = Counting<std::io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        Counting(std::io::stderr())
    }
}

/// Installs the host's subscriber: `RUST_LOG` (default `info`), one JSON object per line when
/// `json`, else text (colour codes only when `ansi`).
pub fn install(json: bool, ansi: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(CountingStderr);
    if json {
        logs.json().init();
    } else {
        logs.with_ansi(ansi).init();
    }
}

/// `text` with every control character (and the Unicode line and paragraph separators)
/// escaped as Rust writes it (`\n`, `\r`, `\u{1b}`): plugin text on one host line can then
/// neither start another line nor drive a terminal.
pub fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() || c == '\u{2028}' || c == '\u{2029}';
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        for (text, want) in [
            ("plain text, ünïcode", "plain text, ünïcode"),
            ("a\nb\rc", "a\\nb\\rc"),
            ("\u{1b}[31mred", "\\u{1b}[31mred"),
            ("tab\there\u{0}", "tab\\there\\u{0}"),
            ("line\u{2028}sep", "line\\u{2028}sep"),
            ("nel\u{85}", "nel\\u{85}"),
        ] {
            let out = super::escape(text);
            assert_eq!(out, want);
            assert!(!out.contains('\n') && !out.contains('\r') && !out.contains('\u{1b}'));
        }
    }

    #[test]
    fn the_writer_counts_what_it_wrote_on_this_thread() {
        use std::io::Write;
        let before = super::written_here();
        let mut w = super::Counting(Vec::new());
        w.write_all(b"twelve bytes").expect("write");
        assert_eq!(super::written_here() - before, 12);
        let other = std::thread::spawn(super::written_here)
            .join()
            .expect("thread");
        assert_eq!(other, 0);
    }
}
