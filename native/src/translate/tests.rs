//! Tests of the translators over hand-written engine streams: each dialect's bytes, tool-call
//! merging, engine errors, abnormal ends, pings, chunk-boundary invariance and whole bodies.
//!
//! Owns Rust-side coverage; recorded real-engine streams and the Python oracle are exercised by
//! pytest. It must not start Python.
