//! GGUF parse errors: [`GgufError`], its messages, and the context that truncation reports.
//!
//! Owns the wording of every error the parser can return. It must not decide what is an error
//! (that is [`super::parse`]'s job); its constructors are `#[cold]` so the parser's hot path
//! never formats or allocates for them.

use std::fmt;

use super::types::{MAX_ARRAY_DEPTH, MAX_TENSOR_DIMS};

/// Why a buffer is not a well-formed GGUF header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GgufError {
    BadMagic(Vec<u8>),
    UnsupportedVersion(u32),
    Truncated { what: String, needed: u64, offset: usize, remaining: usize },
    InvalidValueType { tag: u32, key: String, offset: usize },
    InvalidKey { index: u64, lossy: String, offset: usize },
    DuplicateKey { key: String, offset: usize },
    TooDeep { key: String, offset: usize },
    TooManyDims { tensor: u64, n_dims: u32, offset: usize },
    ParameterOverflow { tensor: u64 },
}

impl std::error::Error for GgufError {}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadMagic(magic) => write!(f, "not a GGUF file: bad magic b'{}'", PyBytes(magic)),
            Self::UnsupportedVersion(v) if matches!(v.swap_bytes(), 2 | 3) => write!(
                f,
                "unsupported GGUF version {v} (supported: 2, 3; big-endian GGUF files are not supported)"
            ),
            Self::UnsupportedVersion(v) => write!(f, "unsupported GGUF version {v} (supported: 2, 3)"),
            Self::Truncated { what, needed, offset, remaining } => write!(
                f,
                "truncated GGUF: needed {needed} bytes for {what} at offset {offset}, only {remaining} remain"
            ),
            Self::InvalidValueType { tag, key, offset } => {
                write!(f, "invalid GGUF metadata value type {tag} for key '{key}' at offset {offset}")
            }
            Self::InvalidKey { index, lossy, offset } => {
                write!(f, "GGUF metadata key #{index} at offset {offset} is not valid UTF-8: '{lossy}'")
            }
            Self::DuplicateKey { key, offset } => {
                write!(f, "duplicate GGUF metadata key '{key}' at offset {offset}")
            }
            Self::TooDeep { key, offset } => write!(
                f,
                "GGUF array nesting deeper than {MAX_ARRAY_DEPTH} levels for key '{key}' at offset {offset}"
            ),
            Self::TooManyDims { tensor, n_dims, offset } => write!(
                f,
                "GGUF tensor #{tensor} declares {n_dims} dimensions at offset {offset} (max {MAX_TENSOR_DIMS})"
            ),
            Self::ParameterOverflow { tensor } => {
                write!(f, "GGUF parameter count overflows 64 bits at tensor #{tensor}")
            }
        }
    }
}

/// Writes bytes the way Python's `repr(bytes)` does between the quotes.
struct PyBytes<'a>(&'a [u8]);

impl fmt::Display for PyBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|&b| match b {
            b'\\' | b'\'' => write!(f, "\\{}", b as char),
            b'\t' => f.write_str("\\t"),
            b'\n' => f.write_str("\\n"),
            b'\r' => f.write_str("\\r"),
            0x20..=0x7e => write!(f, "{}", b as char),
            _ => write!(f, "\\x{b:02x}"),
        })
    }
}

/// What was being read, for truncation messages; formatted only when an error is built.
#[derive(Clone, Copy)]
pub(super) enum What<'a> {
    Magic,
    Version,
    TensorCount,
    KvCount,
    Key(u64),
    ValueType(&'a str),
    Value(&'a str),
    ArrayHeader(&'a str),
    ArrayItems(&'a str),
    Tensor(u64, &'static str),
}

impl fmt::Display for What<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Magic => f.write_str("magic"),
            Self::Version => f.write_str("version"),
            Self::TensorCount => f.write_str("tensor count"),
            Self::KvCount => f.write_str("metadata key/value count"),
            Self::Key(i) => write!(f, "key of metadata entry #{i}"),
            Self::ValueType(key) => write!(f, "value type of '{key}'"),
            Self::Value(key) => write!(f, "metadata value of '{key}'"),
            Self::ArrayHeader(key) => write!(f, "array header of '{key}'"),
            Self::ArrayItems(key) => write!(f, "array items of '{key}'"),
            Self::Tensor(i, field) => write!(f, "{field} of tensor #{i}"),
        }
    }
}

#[cold]
pub(super) fn truncated(what: What<'_>, needed: u64, offset: usize, remaining: usize) -> GgufError {
    GgufError::Truncated { what: what.to_string(), needed, offset, remaining }
}

#[cold]
pub(super) fn bad_magic(data: &[u8]) -> GgufError {
    GgufError::BadMagic(data.iter().take(4).copied().collect())
}

#[cold]
pub(super) fn invalid_key(index: u64, bytes: &[u8], offset: usize) -> GgufError {
    let lossy = String::from_utf8_lossy(bytes.get(..256).unwrap_or(bytes)).into_owned();
    GgufError::InvalidKey { index, lossy, offset }
}

#[cold]
pub(super) fn invalid_value_type(tag: u32, key: &str, offset: usize) -> GgufError {
    GgufError::InvalidValueType { tag, key: key.to_owned(), offset }
}

#[cold]
pub(super) fn duplicate_key(key: &str, offset: usize) -> GgufError {
    GgufError::DuplicateKey { key: key.to_owned(), offset }
}

#[cold]
pub(super) fn too_deep(key: &str, offset: usize) -> GgufError {
    GgufError::TooDeep { key: key.to_owned(), offset }
}

#[cold]
pub(super) fn too_many_dims(tensor: u64, n_dims: u32, offset: usize) -> GgufError {
    GgufError::TooManyDims { tensor, n_dims, offset }
}

#[cold]
pub(super) fn parameter_overflow(tensor: u64) -> GgufError {
    GgufError::ParameterOverflow { tensor }
}
