//! Frame parsing: incremental Server-Sent Events and NDJSON decoders over raw bytes.
//!
//! Owns splitting an engine's byte stream into events (SSE) or lines (NDJSON) whatever the
//! chunk boundaries are: LF, CRLF and CR line ends (a CR at the end of one chunk and an LF at
//! the start of the next are one line end), comments, `event:` and multi-line `data:` fields, a
//! leading byte-order mark, UTF-8 sequences split across chunks (held until complete, never
//! emitted broken), and a size bound on every line and event. It must not interpret the payload
//! (JSON, `[DONE]`): that belongs to the translators. Errors live in `error`, the Python surface
//! (`SseParser`, `NdjsonParser`, `StreamError`) in `python`.

mod error;
mod lines;
mod ndjson;
mod python;
mod sse;
#[cfg(test)]
mod tests;

pub use error::FrameError;
pub use ndjson::NdjsonParser;
pub use python::{init_pymodule, StreamError};
pub use sse::{SseEvent, SseParser};

/// Default bound on one line and on one event's data: 4 MiB.
pub const DEFAULT_MAX_FRAME: usize = 4 << 20;
