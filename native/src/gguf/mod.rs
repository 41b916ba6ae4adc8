//! GGUF model-file metadata: the header, metadata key/values and tensor infos.
//!
//! Owns reading a GGUF file's header region and exposing it to Python. The data model is in
//! `types`, the byte format in `parse` and its errors in `error` (pure Rust, no Python, no I/O),
//! and the Python surface in `python`. Nothing here may read tensor data, panic on malformed
//! input, or allocate more than the input justifies.

mod error;
mod parse;
mod python;
#[cfg(test)]
mod tests;
mod types;

pub use error::GgufError;
pub use parse::parse;
pub use python::init_pymodule;
pub use types::{ggml_type_name, GgufHeader, TensorInfo, Value, ValueType, MAX_ARRAY_DEPTH, MAX_TENSOR_DIMS};
