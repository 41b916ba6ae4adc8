//! Python surface of the frame parsers: `StreamError`, `SseParser` and `NdjsonParser` in
//! `blazar._native`.
//!
//! Owns argument checking and converting events to Python objects. It must not split or
//! validate bytes itself (that is [`super::sse`]'s and [`super::ndjson`]'s job). The gateway uses
//! the translators, which embed these parsers; the classes here serve tests, fuzzing and callers
//! that need raw events.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use super::FrameError;

create_exception!(
    blazar._native,
    StreamError,
    PyValueError,
    "Raised for a byte stream that cannot be framed: a line or event over the size bound, or a \
     line that is not UTF-8; also for an engine body that is not a chat completion."
);

impl From<FrameError> for PyErr {
    #[cold]
    fn from(err: FrameError) -> Self {
        StreamError::new_err(err.to_string())
    }
}

pub(crate) fn frame_bound(max_frame: i64) -> PyResult<usize> {
    usize::try_from(max_frame)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| PyValueError::new_err(format!("max_frame must be > 0, got {max_frame}")))
}

/// Incremental SSE parser: bytes in, `(event, data)` tuples out.
#[pyclass(module = "blazar._native")]
pub struct SseParser {
    inner: super::SseParser,
}

#[pymethods]
impl SseParser {
    #[new]
    #[pyo3(signature = (max_frame = 4194304))] // DEFAULT_MAX_FRAME, literal for the text signature
    fn new(max_frame: i64) -> PyResult<Self> {
        Ok(Self { inner: super::SseParser::new(frame_bound(max_frame)?) })
    }

    fn feed<'py>(&mut self, py: Python<'py>, chunk: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        let mut failed = None;
        self.inner.feed(chunk, |ev| {
            if failed.is_none() {
                if let Err(err) = out.append((ev.event, ev.data)) {
                    failed = Some(err);
                }
            }
        })?;
        failed.map_or(Ok(out), Err)
    }

    fn finish(&mut self) -> bool {
        self.inner.finish()
    }
}

/// Incremental NDJSON splitter: bytes in, line strings out.
#[pyclass(module = "blazar._native")]
pub struct NdjsonParser {
    inner: super::NdjsonParser,
}

#[pymethods]
impl NdjsonParser {
    #[new]
    #[pyo3(signature = (max_frame = 4194304))] // DEFAULT_MAX_FRAME, literal for the text signature
    fn new(max_frame: i64) -> PyResult<Self> {
        Ok(Self { inner: super::NdjsonParser::new(frame_bound(max_frame)?) })
    }

    fn feed<'py>(&mut self, py: Python<'py>, chunk: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let mut lines = Vec::new();
        self.inner.feed(chunk, |line| lines.push(line.to_owned()))?;
        PyList::new(py, lines)
    }

    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut lines = Vec::new();
        self.inner.finish(|line| lines.push(line.to_owned()))?;
        PyList::new(py, lines)
    }
}

/// Registers this module's exception and classes on `m`.
pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("StreamError", m.py().get_type::<StreamError>())?;
    m.add_class::<SseParser>()?;
    m.add_class::<NdjsonParser>()?;
    Ok(())
}
