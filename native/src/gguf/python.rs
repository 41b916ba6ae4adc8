//! Python surface of the GGUF parser: `GgufError`, `GgufArray`, `parse_gguf_metadata` and
//! `read_gguf_metadata` in `blazar._native`.
//!
//! Owns argument checking, file opening and mapping, GIL release, and turning a parsed
//! [`GgufHeader`] into Python objects. It must not interpret GGUF bytes itself (that is
//! [`super::parse`]'s job) and must report I/O failures as `OSError`, never as `GgufError`.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyString};

use super::{ggml_type_name, parse, GgufHeader, Value, ValueType};

create_exception!(
    blazar._native,
    GgufError,
    PyValueError,
    "Raised when data is not a well-formed GGUF header."
);

impl From<super::GgufError> for PyErr {
    #[cold]
    fn from(err: super::GgufError) -> Self {
        GgufError::new_err(err.to_string())
    }
}

/// A metadata array longer than `max_array_len`: its item type and length, not its items.
#[pyclass(frozen, eq, hash, module = "blazar._native")]
#[derive(PartialEq, Eq, Hash)]
pub struct GgufArray {
    item_type: ValueType,
    length: u64,
}

#[pymethods]
impl GgufArray {
    #[getter]
    fn item_type(&self) -> &'static str {
        self.item_type.name()
    }

    #[getter]
    fn length(&self) -> u64 {
        self.length
    }

    fn __repr__(&self) -> String {
        format!("GgufArray(item_type='{}', length={})", self.item_type.name(), self.length)
    }
}

/// Parses GGUF header bytes into a dict; see `_native.pyi` for its shape.
#[pyfunction]
#[pyo3(signature = (data, max_array_len = 1024, tensors = false))]
fn parse_gguf_metadata<'py>(
    py: Python<'py>,
    data: &[u8],
    max_array_len: i64,
    tensors: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let limit = array_limit(max_array_len)?;
    let header = py.allow_threads(|| parse(data, limit))?;
    header_to_dict(py, &header, tensors)
}

/// Maps the file at `path` and parses its header region, without reading tensor data.
#[pyfunction]
#[pyo3(signature = (path, max_array_len = 1024, tensors = false))]
fn read_gguf_metadata<'py>(
    py: Python<'py>,
    path: PathBuf,
    max_array_len: i64,
    tensors: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let limit = array_limit(max_array_len)?;
    let map = py.allow_threads(|| map_file(&path)).map_err(|err| os_error(py, err, &path))?;
    let header = py.allow_threads(|| parse(&map, limit))?;
    header_to_dict(py, &header, tensors)
}

fn map_file(path: &Path) -> io::Result<Mmap> {
    let file = File::open(path)?;
    if file.metadata()?.is_dir() {
        return Err(is_a_directory());
    }
    // SAFETY: the map is read-only and lives only for this call. Should another process shrink
    // the file meanwhile, touching the lost pages faults; llama.cpp and gguf-py map model files
    // under the same assumption that they are not rewritten in place.
    unsafe { Mmap::map(&file) }
}

/// The error `open()` gives for a directory; POSIX lets `File::open` succeed on one.
#[cold]
fn is_a_directory() -> io::Error {
    #[cfg(unix)]
    return io::Error::from_raw_os_error(libc::EISDIR);
    #[cfg(not(unix))]
    return io::ErrorKind::IsADirectory.into();
}

fn array_limit(max_array_len: i64) -> PyResult<u64> {
    u64::try_from(max_array_len)
        .map_err(|_| PyValueError::new_err(format!("max_array_len must be >= 0, got {max_array_len}")))
}

/// Builds `OSError(errno, strerror, filename)`, which Python narrows to `FileNotFoundError` etc.
#[cold]
fn os_error(py: Python<'_>, err: io::Error, path: &Path) -> PyErr {
    let Some(code) = err.raw_os_error() else {
        return err.into();
    };
    let strerror = py
        .import("os")
        .and_then(|os| os.getattr("strerror")?.call1((code,))?.extract::<String>())
        .unwrap_or_else(|_| err.to_string());
    PyOSError::new_err((code, strerror, path.as_os_str().to_os_string()))
}

fn header_to_dict<'py>(
    py: Python<'py>,
    header: &GgufHeader<'_>,
    tensors: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let metadata = PyDict::new(py);
    for (key, value) in &header.metadata {
        metadata.set_item(key, value_to_py(py, value)?)?;
    }
    let tensor_types = PyDict::new(py);
    for (&id, &count) in &header.tensor_types {
        tensor_types.set_item(ggml_type_name(id), count)?;
    }
    let out = PyDict::new(py);
    out.set_item("version", header.version)?;
    out.set_item("tensor_count", header.tensor_count)?;
    out.set_item("metadata_kv_count", header.metadata_kv_count)?;
    out.set_item("metadata", metadata)?;
    out.set_item("parameter_count", header.parameter_count)?;
    out.set_item("tensor_types", tensor_types)?;
    out.set_item("header_size", header.header_size)?;
    out.set_item("max_tensor_offset", header.max_tensor_offset)?;
    if tensors {
        let list = PyList::empty(py);
        for info in &header.tensors {
            let item = PyDict::new(py);
            item.set_item("name", String::from_utf8_lossy(info.name))?;
            item.set_item("type", ggml_type_name(info.ggml_type))?;
            item.set_item("shape", info.shape())?;
            list.append(item)?;
        }
        out.set_item("tensors", list)?;
    }
    Ok(out)
}

fn value_to_py<'py>(py: Python<'py>, value: &Value<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match *value {
        Value::U8(v) => v.into_pyobject(py)?.into_any(),
        Value::I8(v) => v.into_pyobject(py)?.into_any(),
        Value::U16(v) => v.into_pyobject(py)?.into_any(),
        Value::I16(v) => v.into_pyobject(py)?.into_any(),
        Value::U32(v) => v.into_pyobject(py)?.into_any(),
        Value::I32(v) => v.into_pyobject(py)?.into_any(),
        Value::F32(v) => f64::from(v).into_pyobject(py)?.into_any(),
        Value::Bool(v) => PyBool::new(py, v).to_owned().into_any(),
        Value::Str(ref s) => PyString::new(py, s).into_any(),
        Value::Array(ref items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(value_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::U64(v) => v.into_pyobject(py)?.into_any(),
        Value::I64(v) => v.into_pyobject(py)?.into_any(),
        Value::F64(v) => v.into_pyobject(py)?.into_any(),
        Value::LongArray { item_type, len } => {
            Bound::new(py, GgufArray { item_type, length: len })?.into_any()
        }
    })
}

/// Registers this module's exception, class and functions on `m`.
pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("GgufError", m.py().get_type::<GgufError>())?;
    m.add_class::<GgufArray>()?;
    m.add_function(wrap_pyfunction!(parse_gguf_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(read_gguf_metadata, m)?)?;
    Ok(())
}
