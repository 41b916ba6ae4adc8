//! Line splitting shared by the SSE and NDJSON parsers.
//!
//! Owns carrying a partial line across chunks, the line-end rules (LF always; CR and CRLF when
//! asked, a CRLF split across two chunks being one line end) and the per-line size bound. It must
//! not look inside a line: validation and meaning belong to the callers.

use memchr::{memchr, memchr2};

use super::error::{line_too_long, FrameError};

/// Carries the unterminated tail of the stream between `feed` calls.
pub(super) struct Lines {
    partial: Vec<u8>,
    skip_lf: bool,
    cr_ends_line: bool,
    max: usize,
    fed: u64,
}

/// Capacity above which the carry buffer is released after use, so one huge line does not pin
/// its memory for the rest of a long stream.
const KEEP_CAPACITY: usize = 64 << 10;

impl Lines {
    pub(super) fn new(max: usize, cr_ends_line: bool) -> Self {
        Self { partial: Vec::new(), skip_lf: false, cr_ends_line, max, fed: 0 }
    }

    /// Calls `on_line(line, offset)` for every line `chunk` completes, without its line end.
    pub(super) fn feed<F>(&mut self, chunk: &[u8], mut on_line: F) -> Result<(), FrameError>
    where
        F: FnMut(&[u8], u64) -> Result<(), FrameError>,
    {
        let base = self.fed;
        self.fed += chunk.len() as u64;
        let mut i = 0;
        if self.skip_lf && !chunk.is_empty() {
            self.skip_lf = false;
            if chunk[0] == b'\n' {
                i = 1;
            }
        }
        while i < chunk.len() {
            let rest = &chunk[i..];
            let found = if self.cr_ends_line { memchr2(b'\n', b'\r', rest) } else { memchr(b'\n', rest) };
            let Some(n) = found else {
                let start = base + i as u64 - self.partial.len() as u64;
                if self.partial.len() + rest.len() > self.max {
                    return Err(line_too_long(self.max, start));
                }
                self.partial.extend_from_slice(rest);
                break;
            };
            let end = i + n;
            if self.partial.is_empty() {
                if n > self.max {
                    return Err(line_too_long(self.max, base + i as u64));
                }
                on_line(&chunk[i..end], base + i as u64)?;
            } else {
                let start = base + i as u64 - self.partial.len() as u64;
                if self.partial.len() + n > self.max {
                    return Err(line_too_long(self.max, start));
                }
                self.partial.extend_from_slice(&chunk[i..end]);
                let result = on_line(&self.partial, start);
                self.clear_partial();
                result?;
            }
            i = end + 1;
            if chunk[end] == b'\r' {
                if i < chunk.len() {
                    if chunk[i] == b'\n' {
                        i += 1;
                    }
                } else {
                    self.skip_lf = true;
                }
            }
        }
        Ok(())
    }

    /// The unterminated tail and its stream offset; the carry is emptied.
    pub(super) fn take_partial(&mut self) -> (Vec<u8>, u64) {
        let start = self.fed - self.partial.len() as u64;
        self.skip_lf = false;
        (std::mem::take(&mut self.partial), start)
    }

    pub(super) fn has_partial(&self) -> bool {
        !self.partial.is_empty()
    }

    fn clear_partial(&mut self) {
        self.partial.clear();
        if self.partial.capacity() > KEEP_CAPACITY {
            self.partial = Vec::new();
        }
    }
}
