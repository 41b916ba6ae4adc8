//! Python surface of the semantic index: `SemanticIndex` in `blazar._native`.
//!
//! Owns argument checking, reading vectors (a sequence of floats, or `bytes` of little-endian
//! f32), the clock, and locking: the index sits behind a read-write lock taken with the GIL
//! released, so searches from several threads run in parallel and never block Python. It must
//! not search or evict itself.

use std::sync::RwLock;
use std::time::Instant;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::{Config, Index, IndexError};

impl From<IndexError> for PyErr {
    #[cold]
    fn from(err: IndexError) -> Self {
        PyValueError::new_err(err.to_string())
    }
}

/// Top-1 cosine index over partitions; see `_native.pyi`.
#[pyclass(frozen, module = "blazar._native")]
pub struct SemanticIndex {
    index: RwLock<Index>,
    origin: Instant,
    ttl_secs: f64,
}

fn poisoned<T>(_: T) -> PyErr {
    PyRuntimeError::new_err("semantic index lock poisoned by an earlier panic")
}

fn read_vector(vector: &Bound<'_, PyAny>) -> PyResult<Vec<f32>> {
    if let Ok(bytes) = vector.downcast::<PyBytes>() {
        let raw = bytes.as_bytes();
        if raw.len() % 4 != 0 {
            return Err(PyValueError::new_err(format!(
                "vector bytes must be little-endian float32 (a multiple of 4 bytes), got {} bytes",
                raw.len()
            )));
        }
        return Ok(raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect());
    }
    vector.extract::<Vec<f32>>()
}

impl SemanticIndex {
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[pymethods]
impl SemanticIndex {
    #[new]
    #[pyo3(signature = (dim, capacity, ttl_secs, threshold = 0.90))]
    fn new(dim: usize, capacity: usize, ttl_secs: f64, threshold: f64) -> PyResult<Self> {
        if dim == 0 || capacity == 0 {
            return Err(PyValueError::new_err(format!(
                "dim and capacity must be > 0, got dim={dim}, capacity={capacity}"
            )));
        }
        if ttl_secs.is_nan() || ttl_secs <= 0.0 {
            return Err(PyValueError::new_err(format!(
                "ttl_secs must be > 0 (math.inf for no expiry), got {ttl_secs}"
            )));
        }
        if !(-1.0..=1.0).contains(&threshold) {
            return Err(PyValueError::new_err(format!("threshold must be in [-1, 1], got {threshold}")));
        }
        let ttl_ns =
            (ttl_secs.is_finite() && ttl_secs * 1e9 < u64::MAX as f64).then_some((ttl_secs * 1e9) as u64);
        let cfg = Config { dim, capacity, ttl_ns, threshold: threshold as f32 };
        Ok(Self { index: RwLock::new(Index::new(cfg)), origin: Instant::now(), ttl_secs })
    }

    fn insert(
        &self,
        py: Python<'_>,
        partition: &str,
        vector: &Bound<'_, PyAny>,
        value: &[u8],
    ) -> PyResult<()> {
        let vector = read_vector(vector)?;
        let now = self.now();
        py.allow_threads(|| {
            self.index.write().map_err(poisoned)?.insert(partition, &vector, value, now).map_err(PyErr::from)
        })
    }

    fn lookup<'py>(
        &self,
        py: Python<'py>,
        partition: &str,
        vector: &Bound<'py, PyAny>,
    ) -> PyResult<Option<(f64, Bound<'py, PyBytes>)>> {
        let vector = read_vector(vector)?;
        let now = self.now();
        let hit = py.allow_threads(|| {
            let index = self.index.read().map_err(poisoned)?;
            let query = index.prepare(&vector)?;
            Ok::<_, PyErr>(index.lookup(partition, &query, now))
        })?;
        Ok(hit.map(|(score, value)| (f64::from(score), PyBytes::new(py, &value))))
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let now = self.now();
        py.allow_threads(|| Ok(self.index.write().map_err(poisoned)?.len(now)))
    }

    #[getter]
    fn dim(&self) -> PyResult<usize> {
        Ok(self.index.read().map_err(poisoned)?.config().dim)
    }

    #[getter]
    fn capacity(&self) -> PyResult<usize> {
        Ok(self.index.read().map_err(poisoned)?.config().capacity)
    }

    #[getter]
    fn ttl_secs(&self) -> f64 {
        self.ttl_secs
    }

    #[getter]
    fn threshold(&self) -> PyResult<f64> {
        Ok(f64::from(self.index.read().map_err(poisoned)?.config().threshold))
    }
}

/// Registers this module's class on `m`.
pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SemanticIndex>()
}
