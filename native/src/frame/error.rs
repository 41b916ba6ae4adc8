//! Frame errors: [`FrameError`] and its messages.
//!
//! Owns the wording of every error the frame parsers return. It must not decide what is an
//! error (that is the parsers' job); constructors are `#[cold]` so the hot path never formats.

use std::fmt;

/// Why a byte stream cannot be split into frames. Offsets count bytes from the stream's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// A line grew past the bound before its line end arrived.
    LineTooLong { limit: usize, offset: u64 },
    /// The `data:` lines of one event added up past the bound.
    EventTooLarge { limit: usize, offset: u64 },
    /// A complete line is not valid UTF-8.
    InvalidUtf8 { offset: u64 },
}

impl std::error::Error for FrameError {}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LineTooLong { limit, offset } => {
                write!(f, "stream line longer than {limit} bytes (line starts at byte {offset})")
            }
            Self::EventTooLarge { limit, offset } => {
                write!(f, "stream event data larger than {limit} bytes (at byte {offset})")
            }
            Self::InvalidUtf8 { offset } => {
                write!(f, "stream line is not valid UTF-8 (line starts at byte {offset})")
            }
        }
    }
}

#[cold]
#[inline(never)]
pub(super) fn line_too_long(limit: usize, offset: u64) -> FrameError {
    FrameError::LineTooLong { limit, offset }
}

#[cold]
#[inline(never)]
pub(super) fn event_too_large(limit: usize, offset: u64) -> FrameError {
    FrameError::EventTooLarge { limit, offset }
}

#[cold]
#[inline(never)]
pub(super) fn invalid_utf8(offset: u64) -> FrameError {
    FrameError::InvalidUtf8 { offset }
}
