//! The GGUF byte format: magic, version, metadata key/values and tensor infos, over `&[u8]`.
//!
//! Owns every rule about the header bytes. It must not touch Python or the filesystem, must not
//! read tensor data, must never panic, and must check every declared length or count against the
//! bytes that remain before allocating or looping on it.

use std::collections::{BTreeMap, HashSet};

use super::error::{self, GgufError, What};
use super::types::{GgufHeader, TensorInfo, Value, ValueType, MAX_ARRAY_DEPTH, MAX_TENSOR_DIMS};

const MAGIC: &[u8; 4] = b"GGUF";
/// Smallest metadata entry: key length (8) + value type (4) + a one-byte value.
const MIN_KV_SIZE: u64 = 13;
/// Smallest tensor info: name length (8) + dimension count (4) + type (4) + data offset (8).
const MIN_TENSOR_INFO_SIZE: u64 = 24;

/// Parses the header region of a GGUF file held in `data`.
///
/// Arrays with more than `max_array_len` items become [`Value::LongArray`]. Never reads past the
/// tensor-info section, so `data` may be a prefix of the file as long as it covers the header.
pub fn parse(data: &[u8], max_array_len: u64) -> Result<GgufHeader<'_>, GgufError> {
    if !MAGIC.starts_with(data.get(..4).unwrap_or(data)) {
        return Err(error::bad_magic(data));
    }
    let mut r = Reader { data, rest: data, max_array_len };
    r.chunk::<4>(What::Magic)?;
    let version = r.u32(What::Version)?;
    if !matches!(version, 2 | 3) {
        return Err(GgufError::UnsupportedVersion(version));
    }
    let tensor_count = r.u64(What::TensorCount)?;
    let metadata_kv_count = r.u64(What::KvCount)?;

    // Every loop below consumes bytes or fails, so a lying count ends at the end of the data.
    let capacity = r.capacity_for(metadata_kv_count, MIN_KV_SIZE);
    let mut metadata = Vec::with_capacity(capacity);
    let mut seen = HashSet::with_capacity(capacity);
    for index in 0..metadata_kv_count {
        let offset = r.offset();
        let key = r.key(index)?;
        if !seen.insert(key) {
            return Err(error::duplicate_key(key, offset));
        }
        let ty = r.value_type(key, What::ValueType(key))?;
        metadata.push((key, r.value(ty, key, 0)?));
    }

    let mut parameter_count = 0u64;
    let mut max_tensor_offset = 0u64;
    let mut tensor_types = BTreeMap::new();
    let mut tensors = Vec::with_capacity(r.capacity_for(tensor_count, MIN_TENSOR_INFO_SIZE));
    let mut shape = [0u64; MAX_TENSOR_DIMS as usize];
    for t in 0..tensor_count {
        let name_len = r.u64(What::Tensor(t, "name length"))?;
        let name = r.bytes(name_len, What::Tensor(t, "name"))?;
        let offset = r.offset();
        let n_dims = r.u32(What::Tensor(t, "dimension count"))?;
        if n_dims > MAX_TENSOR_DIMS {
            return Err(error::too_many_dims(t, n_dims, offset));
        }
        let mut elements = 1u64;
        for dim in shape.iter_mut().take(n_dims as usize) {
            *dim = r.u64(What::Tensor(t, "dimensions"))?;
            elements = elements.checked_mul(*dim).ok_or_else(|| error::parameter_overflow(t))?;
        }
        let ggml_type = r.u32(What::Tensor(t, "type"))?;
        max_tensor_offset = max_tensor_offset.max(r.u64(What::Tensor(t, "data offset"))?);
        parameter_count =
            parameter_count.checked_add(elements).ok_or_else(|| error::parameter_overflow(t))?;
        *tensor_types.entry(ggml_type).or_insert(0) += 1;
        tensors.push(TensorInfo::new(name, ggml_type, &shape[..n_dims as usize]));
    }

    Ok(GgufHeader {
        version,
        tensor_count,
        metadata_kv_count,
        metadata,
        parameter_count,
        tensor_types,
        header_size: r.offset(),
        max_tensor_offset,
        tensors,
    })
}

/// A cursor over the input; `rest` is always a suffix of `data`.
struct Reader<'a> {
    data: &'a [u8],
    rest: &'a [u8],
    max_array_len: u64,
}

impl<'a> Reader<'a> {
    fn offset(&self) -> usize {
        self.data.len() - self.rest.len()
    }

    /// How many items of at least `min_size` bytes could still follow, capped at `count`.
    fn capacity_for(&self, count: u64, min_size: u64) -> usize {
        usize::try_from(count.min(self.rest.len() as u64 / min_size)).unwrap_or(0)
    }

    fn bytes(&mut self, len: u64, what: What<'_>) -> Result<&'a [u8], GgufError> {
        let split = usize::try_from(len).ok().and_then(|n| self.rest.split_at_checked(n));
        match split {
            Some((head, tail)) => {
                self.rest = tail;
                Ok(head)
            }
            None => Err(self.truncated(len, what)),
        }
    }

    fn skip(&mut self, len: u64, what: What<'_>) -> Result<(), GgufError> {
        self.bytes(len, what).map(drop)
    }

    #[inline]
    fn chunk<const N: usize>(&mut self, what: What<'_>) -> Result<[u8; N], GgufError> {
        match self.rest.split_first_chunk::<N>() {
            Some((head, tail)) => {
                self.rest = tail;
                Ok(*head)
            }
            None => Err(self.truncated(N as u64, what)),
        }
    }

    fn u32(&mut self, what: What<'_>) -> Result<u32, GgufError> {
        self.chunk(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: What<'_>) -> Result<u64, GgufError> {
        self.chunk(what).map(u64::from_le_bytes)
    }

    fn key(&mut self, index: u64) -> Result<&'a str, GgufError> {
        let offset = self.offset();
        let len = self.u64(What::Key(index))?;
        let bytes = self.bytes(len, What::Key(index))?;
        std::str::from_utf8(bytes).map_err(|_| error::invalid_key(index, bytes, offset))
    }

    fn value_type(&mut self, key: &str, what: What<'_>) -> Result<ValueType, GgufError> {
        let offset = self.offset();
        let tag = self.u32(what)?;
        ValueType::from_u32(tag).ok_or_else(|| error::invalid_value_type(tag, key, offset))
    }

    /// Reads one value of type `ty` that sits inside `depth` enclosing arrays.
    fn value(&mut self, ty: ValueType, key: &'a str, depth: usize) -> Result<Value<'a>, GgufError> {
        let what = What::Value(key);
        Ok(match ty {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.chunk(what)?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.chunk(what)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.chunk(what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.chunk(what)?)),
            ValueType::U32 => Value::U32(self.u32(what)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.chunk(what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.chunk(what)?)),
            ValueType::Bool => Value::Bool(self.chunk::<1>(what)? != [0]),
            ValueType::Str => {
                let len = self.u64(what)?;
                Value::Str(String::from_utf8_lossy(self.bytes(len, what)?))
            }
            ValueType::Array => {
                let (item_type, len) = self.array_header(key, depth)?;
                if len > self.max_array_len {
                    self.skip_items(item_type, len, key, depth + 1)?;
                    return Ok(Value::LongArray { item_type, len });
                }
                // `array_header` bounded `len` by the bytes left, so this allocation is too.
                let mut items = Vec::with_capacity(self.capacity_for(len, item_type.min_size()));
                for _ in 0..len {
                    items.push(self.value(item_type, key, depth + 1)?);
                }
                Value::Array(items)
            }
            ValueType::U64 => Value::U64(self.u64(what)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.chunk(what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.chunk(what)?)),
        })
    }

    /// Reads an array's item type and length, rejecting lengths the remaining bytes cannot hold.
    fn array_header(&mut self, key: &'a str, depth: usize) -> Result<(ValueType, u64), GgufError> {
        let offset = self.offset();
        if depth >= MAX_ARRAY_DEPTH {
            return Err(error::too_deep(key, offset));
        }
        let item_type = self.value_type(key, What::ArrayHeader(key))?;
        let len = self.u64(What::ArrayHeader(key))?;
        let min_bytes = len.saturating_mul(item_type.min_size());
        if min_bytes > self.rest.len() as u64 {
            return Err(self.truncated(min_bytes, What::ArrayItems(key)));
        }
        Ok((item_type, len))
    }

    /// Walks over `len` items of type `ty` without building them.
    fn skip_items(&mut self, ty: ValueType, len: u64, key: &'a str, depth: usize) -> Result<(), GgufError> {
        let what = What::Value(key);
        match ty {
            ValueType::Str => (0..len).try_for_each(|_| {
                let n = self.u64(what)?;
                self.skip(n, what)
            }),
            ValueType::Array => (0..len).try_for_each(|_| {
                let (item_type, n) = self.array_header(key, depth)?;
                self.skip_items(item_type, n, key, depth + 1)
            }),
            // Fixed size: `array_header` already checked that `len * size` fits in what is left.
            _ => self.skip(len.saturating_mul(ty.min_size()), what),
        }
    }

    fn truncated(&self, needed: u64, what: What<'_>) -> GgufError {
        error::truncated(what, needed, self.offset(), self.rest.len())
    }
}
