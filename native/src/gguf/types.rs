//! The GGUF data model: value types, decoded values, the parsed header, ggml tensor type names.
//!
//! Owns the shapes that [`super::parse`] produces and the names GGUF tooling gives them. It must
//! not read bytes or touch Python; it is plain data plus naming tables.

use std::borrow::Cow;
use std::collections::BTreeMap;

/// Most levels of nested arrays a metadata value may have.
pub const MAX_ARRAY_DEPTH: usize = 8;
/// Most dimensions a tensor info may declare.
pub const MAX_TENSOR_DIMS: u32 = 8;

/// Type tag of a metadata value or of an array's items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    Str,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    pub(super) fn from_u32(tag: u32) -> Option<Self> {
        use ValueType::*;
        Some(match tag {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => Str,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The name GGUF tooling uses for this type: `"uint8"`, `"string"`, `"array"`, ...
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "uint8",
            I8 => "int8",
            U16 => "uint16",
            I16 => "int16",
            U32 => "uint32",
            I32 => "int32",
            F32 => "float32",
            Bool => "bool",
            Str => "string",
            Array => "array",
            U64 => "uint64",
            I64 => "int64",
            F64 => "float64",
        }
    }

    /// Fewest bytes one encoded item can take; exact for the fixed-size types.
    pub(super) fn min_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | Str => 8,
            Array => 12,
        }
    }
}

/// One decoded metadata value. Strings borrow from the input when they are valid UTF-8.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(Cow<'a, str>),
    Array(Vec<Value<'a>>),
    U64(u64),
    I64(i64),
    F64(f64),
    /// An array longer than the caller's limit: walked over, never built.
    LongArray {
        item_type: ValueType,
        len: u64,
    },
}

/// Everything in a GGUF file before its tensor data.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader<'a> {
    pub version: u32,
    pub tensor_count: u64,
    pub metadata_kv_count: u64,
    /// Key/value pairs in file order; keys are unique.
    pub metadata: Vec<(&'a str, Value<'a>)>,
    /// Sum over tensors of the product of their dimensions.
    pub parameter_count: u64,
    /// Number of tensors per ggml type id; see [`ggml_type_name`].
    pub tensor_types: BTreeMap<u32, u64>,
    /// Byte offset where the tensor-info section ends.
    pub header_size: usize,
    /// The largest tensor data offset (relative to the aligned start of the data section): a file that ends
    /// before it is truncated.
    pub max_tensor_offset: u64,
    /// Every tensor info in file order (Ollama's verbose `/api/show` lists them).
    pub tensors: Vec<TensorInfo<'a>>,
}

/// One tensor info: its name (bytes as stored; not checked as UTF-8), ggml type id and dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo<'a> {
    pub name: &'a [u8],
    pub ggml_type: u32,
    n_dims: u32,
    dims: [u64; MAX_TENSOR_DIMS as usize],
}

impl<'a> TensorInfo<'a> {
    pub(super) fn new(name: &'a [u8], ggml_type: u32, shape: &[u64]) -> Self {
        let mut dims = [0; MAX_TENSOR_DIMS as usize];
        let n = shape.len().min(dims.len());
        dims[..n].copy_from_slice(&shape[..n]);
        Self { name, ggml_type, n_dims: n as u32, dims }
    }

    /// The dimensions, innermost first, as ggml stores them.
    pub fn shape(&self) -> &[u64] {
        &self.dims[..self.n_dims as usize]
    }
}

/// The ggml name of a tensor type id (`"F32"`, `"Q4_K"`, ...), or `"type<N>"` when unknown.
pub fn ggml_type_name(id: u32) -> Cow<'static, str> {
    #[rustfmt::skip]
    const NAMES: [&str; 40] = [
        "F32", "F16", "Q4_0", "Q4_1", "", "", "Q5_0", "Q5_1", "Q8_0", "Q8_1", // 0-9
        "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", // 10-19
        "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", // 20-29
        "BF16", "", "", "", "TQ1_0", "TQ2_0", "", "", "", "MXFP4", // 30-39
    ];
    match NAMES.get(id as usize) {
        Some(name) if !name.is_empty() => Cow::Borrowed(name),
        _ => Cow::Owned(format!("type{id}")),
    }
}
