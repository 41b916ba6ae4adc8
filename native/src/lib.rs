//! `blazar._native`: the compiled half of blazar.
//!
//! This file only declares the crate's modules and registers their Python bindings on the
//! extension module. It must not hold logic of its own: each module owns its feature and
//! exposes an `init_pymodule` that adds its classes, functions and exceptions.

use pyo3::prelude::*;

pub mod frame;
pub mod gguf;
pub mod pool;
pub mod relay;
pub mod semcache;
pub mod translate;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    gguf::init_pymodule(m)?;
    frame::init_pymodule(m)?;
    translate::init_pymodule(m)?;
    semcache::init_pymodule(m)?;
    relay::init_pymodule(m)?;
    pool::init_pymodule(m)?;
    Ok(())
}
