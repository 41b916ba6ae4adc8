//! Semantic-cache index: L2-normalised f32 vectors per partition, top-1 cosine above a
//! threshold, a TTL and a capacity bound with oldest-first eviction.
//!
//! Owns storing and searching vectors; the caller builds partition names (model, API key, lane)
//! and decides what a hit means. The search is exact: an int8 copy of every vector is scanned
//! first and only rows whose error-bounded score could reach the threshold (and beat the best so
//! far) are re-scored in f32 (`kernel`). The store is in `index`, the Python surface (which
//! releases the GIL while searching) in `python`. It must not embed text or touch the network.

mod index;
mod kernel;
mod python;
#[cfg(test)]
mod tests;

pub use index::{Config, Index, IndexError};
pub use python::init_pymodule;
