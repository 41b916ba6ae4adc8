//! Python surface of the relay: `EngineLink` and `LinkError` in `blazar._native`.
//!
//! An `EngineLink` is the decoding half of one pooled connection to an engine. The asyncio
//! protocol installs the link's `feed` as its `data_received`, so the event loop hands every read
//! straight to Rust. Each exchange is `begin` (a future for the head), then `read_body` (a future
//! for the whole body) or `relay` (translator + the client's `send_bytes`, a future for the end).
//! Every outcome reaches Python through those futures, never as an exception out of `feed`. Owns
//! the phase machine and the client write; decoding is `http`'s, translating the translator's.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};
use std::time::Instant;

use super::http::Decoder;
use crate::frame::StreamError;
use crate::translate::StreamTranslator;

create_exception!(
    blazar._native,
    LinkError,
    PyException,
    "Raised (through an exchange's future) when the engine's connection failed: it closed before \
     or during its response, or sent bytes that are not a well-formed HTTP/1.1 response."
);

/// Granian's RSGI `send_bytes` queues the bytes and returns this ready awaitable; anything else
/// (its error awaitable) means the client is gone.
const EMPTY_AWAITABLE: &str = "PyEmptyAwaitable";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No exchange in progress.
    Idle,
    /// Request written; waiting for the head.
    Head,
    /// Head delivered; body bytes are held until Python chooses `read_body` or `relay`.
    Hold,
    /// Whole body wanted.
    Body,
    /// Streaming to the client.
    Relay,
    /// The connection cannot carry another exchange.
    Broken,
}

struct Sink {
    translator: Py<StreamTranslator>,
    send: Py<PyAny>,
    empty: Option<Py<PyType>>,
}

/// The decoding half of one engine connection. See `_native.pyi`.
#[pyclass(module = "blazar._native")]
pub struct EngineLink {
    dec: Decoder,
    phase: Phase,
    body: Vec<u8>,
    waiter: Option<Py<PyAny>>,
    sink: Option<Sink>,
    closed: bool,
    /// A failure no future was waiting for (between the head and `read_body`/`relay`): the next
    /// waiter gets it.
    fault: Option<String>,
    /// When the engine last sent bytes for the current exchange (or the exchange began).
    heard: Instant,
}

fn settle(py: Python<'_>, waiter: Option<Py<PyAny>>, outcome: PyResult<Py<PyAny>>) {
    let Some(fut) = waiter else { return };
    let fut = fut.bind(py);
    // a cancelled waiter (the request's task was cancelled) takes nothing
    if fut.call_method0("done").and_then(|d| d.is_truthy()).unwrap_or(true) {
        return;
    }
    let _ = match outcome {
        Ok(v) => fut.call_method1("set_result", (v,)),
        Err(e) => fut.call_method1("set_exception", (e.value(py),)),
    };
}

#[pymethods]
impl EngineLink {
    #[new]
    fn new() -> Self {
        Self {
            dec: Decoder::new(),
            phase: Phase::Idle,
            body: Vec::new(),
            waiter: None,
            sink: None,
            closed: false,
            fault: None,
            heard: Instant::now(),
        }
    }

    /// A request was written: `head` gets the response status.
    fn begin(&mut self, head: Py<PyAny>) -> PyResult<()> {
        if self.closed || self.phase == Phase::Broken {
            return Err(LinkError::new_err("this engine connection is closed"));
        }
        if self.phase != Phase::Idle {
            return Err(PyValueError::new_err("this engine connection is busy"));
        }
        self.dec.begin();
        self.body.clear();
        self.fault = None;
        self.heard = Instant::now();
        self.phase = Phase::Head;
        self.waiter = Some(head);
        Ok(())
    }

    /// `data_received`: never raises; outcomes go to the current future.
    fn feed(&mut self, py: Python<'_>, data: &[u8]) {
        if data.is_empty() || self.closed || self.phase == Phase::Broken {
            return;
        }
        if self.phase == Phase::Idle {
            self.break_with(py, "engine sent bytes while no request was waiting".to_owned());
            return;
        }
        self.heard = Instant::now();
        let progress = match self.dec.feed(data, &mut self.body) {
            Ok(p) => p,
            Err(e) => {
                self.break_with(py, e.0);
                return;
            }
        };
        if let Some(status) = progress.head {
            self.phase = Phase::Hold;
            settle(
                py,
                self.waiter.take(),
                Ok(status.into_pyobject(py).map(|s| s.into_any().unbind()).unwrap()),
            );
        }
        self.advance(py);
    }

    /// `eof_received`: the engine closed its side; no exchange can follow.
    fn eof(&mut self, py: Python<'_>) {
        if !self.closed {
            self.end_of_input(py);
            self.closed = true;
        }
    }

    /// `connection_lost`: an exchange still waiting fails with `LinkError`. With `error` (the
    /// connection was reset, not closed cleanly) a body delimited by the close fails too.
    #[pyo3(signature = (error = false))]
    fn lost(&mut self, py: Python<'_>, error: bool) {
        if self.closed {
            return;
        }
        let active = !matches!(self.phase, Phase::Idle | Phase::Broken);
        if error && active && self.dec.head_done() && !self.dec.done() {
            self.break_with(py, "engine connection was reset before its response ended".to_owned());
        } else {
            self.end_of_input(py);
        }
        self.closed = true;
    }

    /// The head arrived; `done` gets the whole decoded body as bytes.
    fn read_body(&mut self, py: Python<'_>, done: Py<PyAny>) -> PyResult<()> {
        if !self.expect_hold(py, &done)? {
            return Ok(());
        }
        self.phase = Phase::Body;
        self.waiter = Some(done);
        self.advance(py);
        Ok(())
    }

    /// The head arrived; from now on every body piece goes through `translator` and what it returns
    /// is written with `send` (the client's `send_bytes`). `done` gets None when the engine's
    /// response ended, or `send`'s non-empty result when the client is gone; it fails with
    /// `StreamError` or `LinkError`.
    fn relay(
        &mut self,
        py: Python<'_>,
        translator: Py<StreamTranslator>,
        send: Py<PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<()> {
        if !self.expect_hold(py, &done)? {
            return Ok(());
        }
        self.phase = Phase::Relay;
        self.waiter = Some(done);
        self.sink = Some(Sink { translator, send, empty: None });
        self.advance(py);
        Ok(())
    }

    /// A timer's call while relaying: writes what the translator owes the client after a quiet
    /// spell (an Anthropic `ping`), and returns the seconds since the engine last sent bytes;
    /// None when no stream is being relayed.
    fn tick(&mut self, py: Python<'_>) -> Option<f64> {
        if self.phase != Phase::Relay {
            return None;
        }
        let quiet = self.heard.elapsed().as_secs_f64();
        let sink = self.sink.as_mut()?;
        let out = sink.translator.bind(py).borrow_mut().inner.feed(&[], None);
        // a framing error is the next engine read's to report
        if let Ok(out) = out {
            if !out.is_empty() && !self.write(py, &out) {
                return None;
            }
        }
        Some(quiet)
    }

    /// The exchange's caller gave up (cancelled): drop the future and the client's transport.
    fn abandon(&mut self) {
        self.waiter = None;
        self.sink = None;
        if self.phase != Phase::Idle {
            self.phase = Phase::Broken;
        }
    }

    /// The last response ended cleanly and the engine keeps the connection open.
    #[getter]
    fn reusable(&self) -> bool {
        self.phase == Phase::Idle && !self.closed && self.dec.reusable()
    }

    /// Whether the current response sent any byte (a pooled connection closed under a new request
    /// sent none, and the request may be retried).
    #[getter]
    fn got_bytes(&self) -> bool {
        self.dec.got_bytes()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.closed
    }
}

impl EngineLink {
    /// True when the head was delivered and the body can be read; false when the connection
    /// failed after the head (the failure went to `waiter`).
    fn expect_hold(&mut self, py: Python<'_>, waiter: &Py<PyAny>) -> PyResult<bool> {
        if self.phase == Phase::Hold {
            return Ok(true);
        }
        if self.phase == Phase::Broken {
            if let Some(message) = self.fault.take() {
                settle(py, Some(waiter.clone_ref(py)), Err(LinkError::new_err(message)));
                return Ok(false);
            }
        }
        Err(PyValueError::new_err("the engine's response head has not been delivered"))
    }

    /// Moves held body bytes on, and settles the exchange when the body ended.
    fn advance(&mut self, py: Python<'_>) {
        match self.phase {
            Phase::Relay => {
                if !self.body.is_empty() && !self.pump(py) {
                    return;
                }
                if self.dec.done() {
                    self.phase = Phase::Idle;
                    self.sink = None;
                    settle(py, self.waiter.take(), Ok(py.None()));
                }
            }
            Phase::Body if self.dec.done() => {
                self.phase = Phase::Idle;
                let body = PyBytes::new(py, &self.body).into_any().unbind();
                self.body = Vec::new();
                settle(py, self.waiter.take(), Ok(body));
            }
            _ => {}
        }
    }

    /// Translates and writes the held body bytes; false when the exchange ended on the way.
    fn pump(&mut self, py: Python<'_>) -> bool {
        let Some(sink) = self.sink.as_mut() else { return false };
        let out = sink.translator.bind(py).borrow_mut().inner.feed(&self.body, None);
        self.body.clear();
        match out {
            Ok(out) => out.is_empty() || self.write(py, &out),
            Err(e) => {
                self.phase = Phase::Broken;
                self.sink = None;
                settle(py, self.waiter.take(), Err(StreamError::new_err(e.to_string())));
                false
            }
        }
    }

    /// Writes `out` to the client; false (and the exchange settled) when the client is gone.
    fn write(&mut self, py: Python<'_>, out: &[u8]) -> bool {
        let Some(sink) = self.sink.as_mut() else { return false };
        let sent = sink.send.bind(py).call1((PyBytes::new(py, out),));
        let gone = match sent {
            Ok(awaitable) => {
                let ty = awaitable.get_type();
                let ok = match &sink.empty {
                    Some(empty) => ty.is(empty.bind(py)),
                    None => {
                        let ok = ty.name().is_ok_and(|n| n == EMPTY_AWAITABLE);
                        if ok {
                            sink.empty = Some(ty.unbind());
                        }
                        ok
                    }
                };
                if ok {
                    return true;
                }
                Ok(awaitable.unbind())
            }
            Err(e) => Err(e),
        };
        // the client is gone: stop reading this response (the caller closes the connection)
        self.phase = Phase::Broken;
        self.sink = None;
        settle(py, self.waiter.take(), gone);
        false
    }

    fn end_of_input(&mut self, py: Python<'_>) {
        match self.dec.eof() {
            Ok(true) => self.advance(py),
            Ok(false) => {}
            Err(e) => {
                if self.phase != Phase::Idle && self.phase != Phase::Broken {
                    self.break_with(py, e.0);
                }
            }
        }
    }

    fn break_with(&mut self, py: Python<'_>, message: String) {
        let held = self.phase == Phase::Hold;
        self.phase = Phase::Broken;
        self.sink = None;
        match self.waiter.take() {
            Some(w) => settle(py, Some(w), Err(LinkError::new_err(message))),
            None if held => self.fault = Some(message),
            None => {}
        }
    }
}

/// Registers this module's class and exception on `m`.
pub fn init_pymodule(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<EngineLink>()?;
    m.add("LinkError", m.py().get_type::<LinkError>())?;
    Ok(())
}
