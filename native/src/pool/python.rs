//! Python surface of late-chunking pooling: `pool_token_spans` in `blazar._native`.
//!
//! Owns argument conversion and releasing the GIL while a (possibly large) answer is parsed. It
//! must not pool anything itself.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::{pool_spans, PoolError};

impl From<PoolError> for PyErr {
    #[cold]
    fn from(err: PoolError) -> Self {
        PyValueError::new_err(err.to_string())
    }
}

/// Pooled, L2-normalised chunk vectors as little-endian f32 bytes; see `_native.pyi`.
#[pyfunction]
fn pool_token_spans<'py>(
    py: Python<'py>,
    body: &[u8],
    spans: Vec<(usize, usize)>,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let vectors = py.allow_threads(|| pool_spans(body, &spans))?;
    Ok(vectors
        .iter()
        .map(|v| {
            let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            PyBytes::new(py, &raw)
        })
        .collect())
}

pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pool_token_spans, m)?)?;
    Ok(())
}
