//! Late chunking: per-token embeddings pooled into one vector per chunk.
//!
//! An engine started with `--pooling none` answers `/embeddings` with one vector per token of
//! the whole input. `spans` say which tokens belong to which chunk; each chunk's vector is the
//! mean of its tokens' vectors, L2-normalised. Owns reading that answer (`parse`) and the
//! pooling (`pool`); the Python surface is in `python`. It must not tokenize or talk to engines.

mod parse;
mod python;
#[cfg(test)]
mod tests;

pub use parse::{pool_spans, PoolError};
pub use python::init_pymodule;
