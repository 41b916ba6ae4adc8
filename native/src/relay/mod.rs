//! The engine relay: the gateway's HTTP/1.1 exchanges with an engine child, decoded natively.
//!
//! Owns reading an engine's HTTP/1.1 response off the raw bytes an asyncio transport delivers:
//! the status line and headers (`httparse`), the body's framing (content-length, chunked, or
//! until close) and keep-alive; and, for streamed answers, handing each decoded body piece to a
//! `StreamTranslator` and writing what it returns straight to the client's Granian transport, so a
//! streamed token costs no Python frame between the engine's socket and the client's. `http` is
//! the pure decoder; `python` (`EngineLink`, `LinkError`) is the surface the asyncio protocol
//! in `blazar.supervisor.links` drives. It must not open sockets or know about children.

mod http;
mod python;
#[cfg(test)]
mod tests;

pub use http::{Decoder, HttpError, Progress, MAX_HEAD};
pub use python::init_pymodule;
