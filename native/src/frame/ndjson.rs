//! Incremental newline-delimited JSON line splitter over bytes ([`NdjsonParser`]).
//!
//! Owns splitting on LF (a CR before it is dropped), skipping blank lines, the line bound and
//! UTF-8 validation; a final line without its LF is delivered by `finish`. It must not parse the
//! JSON in a line.

use super::error::{invalid_utf8, FrameError};
use super::lines::Lines;

/// Splits an NDJSON byte stream into lines, whatever the chunk boundaries.
pub struct NdjsonParser {
    lines: Lines,
    failed: Option<FrameError>,
}

impl NdjsonParser {
    /// A parser bounding every line at `max` bytes.
    pub fn new(max: usize) -> Self {
        Self { lines: Lines::new(max, false), failed: None }
    }

    /// Feeds `chunk`, calling `on_line` with each non-blank line it completes.
    pub fn feed<F: FnMut(&str)>(&mut self, chunk: &[u8], mut on_line: F) -> Result<(), FrameError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let result = self.lines.feed(chunk, |line, offset| deliver(line, offset, &mut on_line));
        if let Err(err) = &result {
            self.failed = Some(err.clone());
        }
        result
    }

    /// Ends the stream, delivering a last line that had no LF.
    pub fn finish<F: FnMut(&str)>(&mut self, mut on_line: F) -> Result<(), FrameError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let (tail, offset) = self.lines.take_partial();
        let result = deliver(&tail, offset, &mut on_line);
        if let Err(err) = &result {
            self.failed = Some(err.clone());
        }
        result
    }
}

#[inline]
fn deliver<F: FnMut(&str)>(line: &[u8], offset: u64, on_line: &mut F) -> Result<(), FrameError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    on_line(std::str::from_utf8(line).map_err(|_| invalid_utf8(offset))?);
    Ok(())
}
