//! Incremental Server-Sent Events parser over bytes ([`SseParser`]).
//!
//! Owns the event stream grammar of the WHATWG HTML standard (section "Server-sent events"):
//! fields `data`, `event`, `id`, `retry`, comments, blank-line dispatch, one optional leading
//! space after the colon, a leading byte-order mark, and discarding an incomplete event at the
//! end of the stream. One extension: llama.cpp's server writes errors as an `error: {...}` line,
//! which the standard would ignore; it is dispatched at once as an event of type `error`. It must
//! not parse the data (that is the translators' job).

use super::error::{event_too_large, invalid_utf8, FrameError};
use super::lines::Lines;

/// One dispatched event. `event` is `"message"` when the stream named no type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    pub event: &'a str,
    pub data: &'a str,
}

/// Splits an SSE byte stream into events, whatever the chunk boundaries.
pub struct SseParser {
    lines: Lines,
    data: String,
    event: String,
    first_line: bool,
    max: usize,
    failed: Option<FrameError>,
}

impl SseParser {
    /// A parser bounding every line and every event's data at `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            lines: Lines::new(max, true),
            data: String::new(),
            event: String::new(),
            first_line: true,
            max,
            failed: None,
        }
    }

    /// Feeds `chunk`, calling `on_event` for each event it completes. After an error the parser
    /// stays failed and returns the same error for every later chunk.
    pub fn feed<F: FnMut(SseEvent<'_>)>(&mut self, chunk: &[u8], mut on_event: F) -> Result<(), FrameError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let Self { lines, data, event, first_line, max, .. } = self;
        let result = lines.feed(chunk, |mut line, offset| {
            if std::mem::take(first_line) {
                line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
            }
            let line = std::str::from_utf8(line).map_err(|_| invalid_utf8(offset))?;
            process_line(line, offset, data, event, *max, &mut on_event)
        });
        if let Err(err) = &result {
            self.failed = Some(err.clone());
        }
        result
    }

    /// Ends the stream: an incomplete event is discarded, as the standard says. Returns whether
    /// the stream ended on an event boundary (nothing was discarded).
    pub fn finish(&mut self) -> bool {
        let clean = !self.lines.has_partial() && self.data.is_empty();
        self.lines.take_partial();
        self.data.clear();
        self.event.clear();
        clean
    }

    /// The error this parser failed with, if any.
    pub fn failure(&self) -> Option<&FrameError> {
        self.failed.as_ref()
    }
}

#[inline]
fn process_line<F: FnMut(SseEvent<'_>)>(
    line: &str,
    offset: u64,
    data: &mut String,
    event: &mut String,
    max: usize,
    on_event: &mut F,
) -> Result<(), FrameError> {
    if line.is_empty() {
        dispatch(data, event, on_event);
        return Ok(());
    }
    let (field, value) = match line.find(':') {
        Some(0) => return Ok(()),
        Some(i) => {
            let value = &line[i + 1..];
            (&line[..i], value.strip_prefix(' ').unwrap_or(value))
        }
        None => (line, ""),
    };
    match field {
        "data" => {
            if data.len() + value.len() + 1 > max {
                return Err(event_too_large(max, offset));
            }
            data.push_str(value);
            data.push('\n');
        }
        "event" => {
            event.clear();
            event.push_str(value);
        }
        "error" => on_event(SseEvent { event: "error", data: value }),
        _ => {}
    }
    Ok(())
}

#[inline]
fn dispatch<F: FnMut(SseEvent<'_>)>(data: &mut String, event: &mut String, on_event: &mut F) {
    if data.is_empty() {
        event.clear();
        return;
    }
    data.pop();
    let kind = if event.is_empty() { "message" } else { event.as_str() };
    on_event(SseEvent { event: kind, data });
    data.clear();
    event.clear();
}
