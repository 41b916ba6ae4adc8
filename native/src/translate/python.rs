//! Python surface of the translators: `StreamTranslator` and `translate_whole` in
//! `blazar._native`.
//!
//! Owns argument checking, the summary dict, and mapping errors to `StreamError` /
//! `ValueError`. It must not translate anything itself.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use super::clock::system_ns;
use super::collect::Summary;
use super::stream::{Dialect, Options, Translator};
use super::whole::{translate_whole as whole, WholeOptions};
use crate::frame::StreamError;

fn parse_dialect(name: &str) -> PyResult<Dialect> {
    Dialect::parse(name).ok_or_else(|| {
        PyValueError::new_err(format!("unknown dialect '{name}': expected {}", Dialect::NAMES))
    })
}

/// One streamed response: engine SSE bytes in, client bytes out. See `_native.pyi`.
#[pyclass(module = "blazar._native")]
pub struct StreamTranslator {
    pub(crate) inner: Translator,
}

#[pymethods]
impl StreamTranslator {
    #[new]
    #[pyo3(signature = (
        dialect, model, *, include_usage = false, load_duration_ns = 0, message_id = None,
        prompt_tokens_hint = 0, start_ns = None, redact = None, prefill = None, n = 1, echo = None,
        alternatives = true, forced_call = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        dialect: &str,
        model: String,
        include_usage: bool,
        load_duration_ns: u64,
        message_id: Option<String>,
        prompt_tokens_hint: u64,
        start_ns: Option<u64>,
        redact: Option<String>,
        prefill: Option<String>,
        n: u64,
        echo: Option<String>,
        alternatives: bool,
        forced_call: Option<Vec<String>>,
    ) -> PyResult<Self> {
        let opts = Options {
            dialect: parse_dialect(dialect)?,
            model,
            include_usage,
            load_duration_ns,
            message_id,
            prompt_tokens_hint,
            redact: redact.filter(|s| !s.is_empty()),
            prefill: prefill.filter(|s| !s.is_empty()),
            n,
            echo,
            alternatives,
            forced_call: forced_call.filter(|names| !names.is_empty()),
        };
        Ok(Self { inner: Translator::new(opts, start_ns) })
    }

    #[pyo3(signature = (chunk, now_ns = None))]
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        chunk: &[u8],
        now_ns: Option<u64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let out = self.inner.feed(chunk, now_ns)?;
        Ok(PyBytes::new(py, &out))
    }

    #[pyo3(signature = (now_ns = None))]
    fn finish<'py>(&mut self, py: Python<'py>, now_ns: Option<u64>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.finish(now_ns))
    }

    #[pyo3(signature = (message, now_ns = None))]
    fn abort<'py>(&mut self, py: Python<'py>, message: &str, now_ns: Option<u64>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.abort(message, now_ns))
    }

    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        summary_dict(py, &self.inner.summary())
    }

    #[getter]
    fn done(&self) -> bool {
        self.inner.done()
    }
}

/// Translates a whole non-streamed engine body. See `_native.pyi`.
#[pyfunction]
#[pyo3(signature = (
    dialect, model, engine_body, *, load_duration_ns = 0, message_id = None, total_duration_ns = 0,
    now_ns = None, prefill = None, n = 1, echo = None, alternatives = true
))]
#[allow(clippy::too_many_arguments)]
fn translate_whole<'py>(
    py: Python<'py>,
    dialect: &str,
    model: String,
    engine_body: &[u8],
    load_duration_ns: u64,
    message_id: Option<String>,
    total_duration_ns: u64,
    now_ns: Option<u64>,
    prefill: Option<String>,
    n: u64,
    echo: Option<String>,
    alternatives: bool,
) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyDict>)> {
    let opts = WholeOptions {
        dialect: parse_dialect(dialect)?,
        model,
        load_duration_ns,
        message_id,
        total_duration_ns,
        now_ns: now_ns.unwrap_or_else(system_ns),
        prefill: prefill.filter(|s| !s.is_empty()),
        n,
        echo,
        alternatives,
    };
    let (out, summary) = whole(&opts, engine_body).map_err(StreamError::new_err)?;
    Ok((PyBytes::new(py, &out), summary_dict(py, &summary)?))
}

fn summary_dict<'py>(py: Python<'py>, s: &Summary) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("text", &s.text)?;
    d.set_item("reasoning", &s.reasoning)?;
    let calls = PyList::empty(py);
    for call in &s.tool_calls {
        let function = PyDict::new(py);
        function.set_item("name", &call.name)?;
        function.set_item("arguments", &call.arguments)?;
        let c = PyDict::new(py);
        c.set_item("index", call.index)?;
        c.set_item("id", &call.id)?;
        c.set_item("type", "function")?;
        c.set_item("function", function)?;
        calls.append(c)?;
    }
    d.set_item("tool_calls", calls)?;
    d.set_item("finish_reason", &s.finish_reason)?;
    d.set_item("stop_sequence", &s.stop_sequence)?;
    match s.usage {
        Some(u) => {
            let usage = PyDict::new(py);
            usage.set_item("prompt_tokens", u.prompt_tokens)?;
            usage.set_item("completion_tokens", u.completion_tokens)?;
            d.set_item("usage", usage)?;
        }
        None => d.set_item("usage", py.None())?,
    }
    d.set_item("ttft_ms", s.ttft_ms)?;
    match s.tpot_ms {
        Some(g) => {
            let t = PyDict::new(py);
            t.set_item("count", g.count)?;
            t.set_item("mean", g.mean)?;
            t.set_item("p50", g.p50)?;
            t.set_item("p90", g.p90)?;
            t.set_item("p99", g.p99)?;
            t.set_item("max", g.max)?;
            d.set_item("tpot_ms", t)?;
        }
        None => d.set_item("tpot_ms", py.None())?,
    }
    d.set_item("chunks", s.chunks)?;
    d.set_item("errors", &s.errors)?;
    d.set_item("engine_error", &s.engine_error)?;
    d.set_item("choices", s.choices)?;
    d.set_item("usage_reports", s.usage_reports)?;
    d.set_item("token_chunks", s.token_chunks)?;
    Ok(d)
}

/// Registers this module's class and function on `m`.
pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<StreamTranslator>()?;
    m.add_function(wrap_pyfunction!(translate_whole, m)?)?;
    Ok(())
}
