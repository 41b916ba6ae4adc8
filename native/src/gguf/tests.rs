//! Tests of the pure-Rust GGUF parser over buffers built by a small writer.
//!
//! Owns byte-level coverage of `parse`: every value type, nesting, limits, truncation, corrupt
//! input and allocation bounds. It must not start Python; the bindings are checked from pytest.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use super::{ggml_type_name, parse, GgufError, Value, ValueType, MAX_ARRAY_DEPTH};

// Value type tags as written on disk.
const U8: u32 = 0;
const I8: u32 = 1;
const U16: u32 = 2;
const I16: u32 = 3;
const U32: u32 = 4;
const I32: u32 = 5;
const F32: u32 = 6;
const BOOL: u32 = 7;
const STR: u32 = 8;
const ARRAY: u32 = 9;
const U64: u32 = 10;
const I64: u32 = 11;
const F64: u32 = 12;

/// Records the largest single allocation made on the current thread.
struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
}

// SAFETY: forwards every call unchanged to `System`, only recording sizes on the way.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Tracking = Tracking;

/// Runs `f` and returns its result with the largest allocation it made.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|largest| largest.set(0));
    let out = f();
    (out, LARGEST.with(Cell::get))
}

/// Little-endian byte writer.
#[derive(Default)]
struct W(Vec<u8>);

impl W {
    fn le<const N: usize>(&mut self, bytes: [u8; N]) -> &mut Self {
        self.0.extend_from_slice(&bytes);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.le(v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.le(v.to_le_bytes())
    }
    fn bytes(&mut self, s: &[u8]) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s);
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }
    fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
    /// An array header: item type and length.
    fn array(&mut self, item_type: u32, len: u64) -> &mut Self {
        self.u32(item_type).u64(len)
    }
}

/// Assembles a GGUF file from metadata entries and tensor infos, filling in the counts.
struct Builder {
    version: u32,
    kvs: W,
    n_kv: u64,
    tensors: W,
    n_tensors: u64,
}

impl Builder {
    fn new(version: u32) -> Self {
        Self { version, kvs: W::default(), n_kv: 0, tensors: W::default(), n_tensors: 0 }
    }
    fn kv(mut self, key: &str, tag: u32, value: impl FnOnce(&mut W) -> &mut W) -> Self {
        self.kvs.str(key).u32(tag);
        value(&mut self.kvs);
        self.n_kv += 1;
        self
    }
    fn tensor(mut self, name: &str, dims: &[u64], ggml_type: u32) -> Self {
        self.tensors.str(name).u32(dims.len() as u32);
        for &dim in dims {
            self.tensors.u64(dim);
        }
        self.tensors.u32(ggml_type).u64(self.n_tensors * 4096);
        self.n_tensors += 1;
        self
    }
    fn build(self) -> Vec<u8> {
        let mut w = W(b"GGUF".to_vec());
        w.u32(self.version).u64(self.n_tensors).u64(self.n_kv);
        w.0.extend(self.kvs.0);
        w.0.extend(self.tensors.0);
        w.0
    }
}

/// A file using every value type, nested and empty arrays, and three tensors.
fn sample(version: u32) -> Vec<u8> {
    Builder::new(version)
        .kv("general.architecture", STR, |w| w.str("llama"))
        .kv("u8", U8, |w| w.le(200u8.to_le_bytes()))
        .kv("i8", I8, |w| w.le((-5i8).to_le_bytes()))
        .kv("u16", U16, |w| w.le(60000u16.to_le_bytes()))
        .kv("i16", I16, |w| w.le((-30000i16).to_le_bytes()))
        .kv("u32", U32, |w| w.u32(4_000_000_000))
        .kv("i32", I32, |w| w.le((-2_000_000_000i32).to_le_bytes()))
        .kv("f32", F32, |w| w.le(1.5f32.to_le_bytes()))
        .kv("bool", BOOL, |w| w.le([1]))
        .kv("bool.false", BOOL, |w| w.le([0]))
        .kv("u64", U64, |w| w.u64(u64::MAX))
        .kv("i64", I64, |w| w.le(i64::MIN.to_le_bytes()))
        .kv("f64", F64, |w| w.le((-0.25f64).to_le_bytes()))
        .kv("tokens", ARRAY, |w| w.array(STR, 3).str("a").str("bé").str(""))
        .kv("nested", ARRAY, |w| {
            w.array(ARRAY, 2);
            w.array(I32, 2).le(1i32.to_le_bytes()).le((-1i32).to_le_bytes());
            w.array(ARRAY, 1).array(F64, 1).le(2.5f64.to_le_bytes())
        })
        .kv("scores", ARRAY, |w| w.array(U16, 3).le([1, 0, 2, 0, 3, 0]))
        .kv("empty", ARRAY, |w| w.array(U64, 0))
        .kv("general.name", STR, |w| w.str("SmolLM2"))
        .tensor("token_embd.weight", &[576, 49152], 3)
        .tensor("output_norm.weight", &[576], 0)
        .tensor("odd", &[2, 3, 4], 99)
        .build()
}

fn value<'a>(values: &'a [(&str, Value<'a>)], key: &str) -> &'a Value<'a> {
    &values.iter().find(|(k, _)| *k == key).unwrap_or_else(|| panic!("no key {key}")).1
}

fn err(data: &[u8]) -> String {
    parse(data, 1024).expect_err("parse should fail").to_string()
}

#[test]
fn parses_every_value_type() {
    let data = sample(3);
    let h = parse(&data, 1024).unwrap();
    assert_eq!((h.version, h.tensor_count, h.metadata_kv_count), (3, 3, 18));
    assert_eq!(h.metadata.len(), 18);
    let m = &h.metadata;
    assert_eq!(value(m, "general.architecture"), &Value::Str("llama".into()));
    assert_eq!(value(m, "u8"), &Value::U8(200));
    assert_eq!(value(m, "i8"), &Value::I8(-5));
    assert_eq!(value(m, "u16"), &Value::U16(60000));
    assert_eq!(value(m, "i16"), &Value::I16(-30000));
    assert_eq!(value(m, "u32"), &Value::U32(4_000_000_000));
    assert_eq!(value(m, "i32"), &Value::I32(-2_000_000_000));
    assert_eq!(value(m, "f32"), &Value::F32(1.5));
    assert_eq!(value(m, "bool"), &Value::Bool(true));
    assert_eq!(value(m, "bool.false"), &Value::Bool(false));
    assert_eq!(value(m, "u64"), &Value::U64(u64::MAX));
    assert_eq!(value(m, "i64"), &Value::I64(i64::MIN));
    assert_eq!(value(m, "f64"), &Value::F64(-0.25));
    let tokens = ["a", "bé", ""].map(|s| Value::Str(s.into()));
    assert_eq!(value(m, "tokens"), &Value::Array(tokens.to_vec()));
    let nested = Value::Array(vec![
        Value::Array(vec![Value::I32(1), Value::I32(-1)]),
        Value::Array(vec![Value::Array(vec![Value::F64(2.5)])]),
    ]);
    assert_eq!(value(m, "nested"), &nested);
    assert_eq!(value(m, "scores"), &Value::Array(vec![Value::U16(1), Value::U16(2), Value::U16(3)]));
    assert_eq!(value(m, "empty"), &Value::Array(vec![]));
    assert_eq!(value(m, "general.name"), &Value::Str("SmolLM2".into()));
}

#[test]
fn version_2_parses_like_version_3() {
    let (v2, v3) = (sample(2), sample(3));
    let (h2, h3) = (parse(&v2, 1024).unwrap(), parse(&v3, 1024).unwrap());
    assert_eq!(h2.version, 2);
    assert_eq!(h2.metadata, h3.metadata);
    assert_eq!(h2.parameter_count, h3.parameter_count);
}

#[test]
fn tensor_infos_give_parameters_types_and_header_size() {
    let mut data = sample(3);
    let header_len = data.len();
    data.extend_from_slice(&[0xAB; 100]); // tensor data is never read
    let h = parse(&data, 1024).unwrap();
    assert_eq!(h.parameter_count, 576 * 49152 + 576 + 24);
    let types: Vec<_> = h.tensor_types.iter().map(|(&id, &n)| (ggml_type_name(id), n)).collect();
    assert_eq!(types, [("F32".into(), 1), ("Q4_1".into(), 1), ("type99".into(), 1)]);
    assert_eq!(h.header_size, header_len);
    assert_eq!(h.max_tensor_offset, 2 * 4096); // the third tensor's data offset
    let infos: Vec<_> = h
        .tensors
        .iter()
        .map(|t| (String::from_utf8_lossy(t.name), t.ggml_type, t.shape().to_vec()))
        .collect();
    assert_eq!(
        infos,
        [
            ("token_embd.weight".into(), 3, vec![576, 49152]),
            ("output_norm.weight".into(), 0, vec![576]),
            ("odd".into(), 99, vec![2, 3, 4]),
        ]
    );
}

#[test]
fn ggml_type_names_follow_ggml_numbering() {
    let named = [(0, "F32"), (1, "F16"), (2, "Q4_0"), (8, "Q8_0"), (12, "Q4_K"), (14, "Q6_K")];
    let more = [(23, "IQ4_XS"), (29, "IQ1_M"), (30, "BF16"), (34, "TQ1_0"), (35, "TQ2_0"), (39, "MXFP4")];
    for (id, name) in named.into_iter().chain(more) {
        assert_eq!(ggml_type_name(id), name);
    }
    for id in [4, 5, 31, 32, 33, 36, 37, 38, 40, u32::MAX] {
        assert_eq!(ggml_type_name(id), format!("type{id}"));
    }
}

#[test]
fn arrays_over_the_limit_are_skipped_not_built() {
    let data = sample(3);
    let h = parse(&data, 2).unwrap();
    let m = &h.metadata;
    assert_eq!(value(m, "tokens"), &Value::LongArray { item_type: ValueType::Str, len: 3 });
    assert_eq!(value(m, "scores"), &Value::LongArray { item_type: ValueType::U16, len: 3 });
    assert!(matches!(value(m, "nested"), Value::Array(items) if items.len() == 2));
    assert_eq!(value(m, "general.name"), &Value::Str("SmolLM2".into()));
    assert_eq!(h.header_size, data.len());

    let h = parse(&data, 0).unwrap();
    let m = &h.metadata;
    assert_eq!(value(m, "nested"), &Value::LongArray { item_type: ValueType::Array, len: 2 });
    assert_eq!(value(m, "empty"), &Value::Array(vec![]));
    assert_eq!(value(m, "general.name"), &Value::Str("SmolLM2".into()));
    assert_eq!(h.parameter_count, parse(&data, 1024).unwrap().parameter_count);
}

#[test]
fn every_truncation_is_an_error() {
    for data in [sample(2), sample(3)] {
        for len in 0..data.len() {
            match parse(&data[..len], 1024) {
                Err(GgufError::Truncated { .. }) => {}
                other => panic!("prefix of {len} bytes gave {other:?}"),
            }
        }
        // The same with skipping: long arrays must stop at the end of the data too.
        for len in 0..data.len() {
            assert!(matches!(parse(&data[..len], 0), Err(GgufError::Truncated { .. })), "{len}");
        }
    }
}

#[test]
fn truncation_names_what_and_where() {
    let data = sample(3);
    let name_at = data.windows(12).position(|w| w == b"general.name").unwrap();
    let value_at = name_at + 12 + 4; // key, then value type
    let msg = err(&data[..value_at + 3]);
    assert_eq!(
        msg,
        format!("truncated GGUF: needed 8 bytes for metadata value of 'general.name' at offset {value_at}, only 3 remain")
    );
    assert_eq!(err(b"GG"), "truncated GGUF: needed 4 bytes for magic at offset 0, only 2 remain");
    assert_eq!(err(b""), "truncated GGUF: needed 4 bytes for magic at offset 0, only 0 remain");
}

#[test]
fn rejects_bad_magic_and_versions() {
    assert_eq!(err(b"GGML\x03\0\0\0"), "not a GGUF file: bad magic b'GGML'");
    assert_eq!(err(b"PK"), "not a GGUF file: bad magic b'PK'");
    assert_eq!(err(b"\x00'\\\n"), r"not a GGUF file: bad magic b'\x00\'\\\n'");
    let mut v1 = sample(3);
    v1[4] = 1;
    assert_eq!(err(&v1), "unsupported GGUF version 1 (supported: 2, 3)");
    v1[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(err(&v1).starts_with("unsupported GGUF version 50331648 (supported: 2, 3; big-endian"));
    v1[4..8].copy_from_slice(&4u32.to_le_bytes());
    assert_eq!(err(&v1), "unsupported GGUF version 4 (supported: 2, 3)");
}

#[test]
fn rejects_unknown_value_types() {
    let data = Builder::new(3).kv("x", 42, |w| w).build();
    assert_eq!(err(&data), "invalid GGUF metadata value type 42 for key 'x' at offset 33");
    let data = Builder::new(3).kv("arr", ARRAY, |w| w.array(13, 1)).build();
    assert_eq!(err(&data), "invalid GGUF metadata value type 13 for key 'arr' at offset 39");
    let data = Builder::new(3).kv("arr", ARRAY, |w| w.array(u32::MAX, 0)).build();
    assert!(parse(&data, 0).unwrap_err().to_string().contains("value type 4294967295"));
}

#[test]
fn keys_must_be_utf8_but_string_values_are_lossy() {
    let data = Builder::new(3).kv("ok", STR, |w| w.bytes(b"a\xffb")).build();
    let h = parse(&data, 1024).unwrap();
    assert_eq!(value(&h.metadata, "ok"), &Value::Str("a\u{fffd}b".into()));

    let mut w = W(Builder::new(3).build());
    w.0[16] = 1; // one metadata entry
    w.bytes(b"gen\xfferal").u32(U8).le([0]);
    assert_eq!(err(&w.0), "GGUF metadata key #0 at offset 24 is not valid UTF-8: 'gen\u{fffd}eral'");
}

#[test]
fn rejects_duplicate_keys() {
    let data = Builder::new(3).kv("k", U8, |w| w.le([1])).kv("k", U8, |w| w.le([2])).build();
    assert_eq!(err(&data), "duplicate GGUF metadata key 'k' at offset 38");
}

/// An entry `deep` holding `levels` nested arrays around one u8.
fn nested(levels: usize) -> Vec<u8> {
    Builder::new(3)
        .kv("deep", ARRAY, |w| {
            for _ in 1..levels {
                w.array(ARRAY, 1);
            }
            w.array(U8, 1).le([7])
        })
        .build()
}

#[test]
fn bounds_array_nesting() {
    let ok = nested(MAX_ARRAY_DEPTH);
    let h = parse(&ok, 1024).unwrap();
    let mut v = value(&h.metadata, "deep");
    for _ in 0..MAX_ARRAY_DEPTH {
        let Value::Array(items) = v else { panic!("{v:?}") };
        v = &items[0];
    }
    assert_eq!(v, &Value::U8(7));
    assert!(parse(&ok, 0).is_ok());

    let deep = nested(MAX_ARRAY_DEPTH + 1);
    let offset = 4 + 4 + 16 + 8 + 4 + 4 + 12 * MAX_ARRAY_DEPTH;
    let expected = format!("GGUF array nesting deeper than 8 levels for key 'deep' at offset {offset}");
    assert_eq!(err(&deep), expected);
    assert_eq!(parse(&deep, 0).unwrap_err().to_string(), expected);
}

#[test]
fn rejects_bad_tensor_infos() {
    let data = Builder::new(3).tensor("t", &[1; 9], 0).build();
    assert_eq!(err(&data), "GGUF tensor #0 declares 9 dimensions at offset 33 (max 8)");
    let data = Builder::new(3).tensor("t", &[1 << 32, 1 << 32], 0).build();
    assert_eq!(err(&data), "GGUF parameter count overflows 64 bits at tensor #0");
    let data = Builder::new(3).tensor("a", &[u64::MAX], 0).tensor("b", &[1], 0).build();
    assert_eq!(err(&data), "GGUF parameter count overflows 64 bits at tensor #1");
    let data = Builder::new(3).tensor("scalar", &[], 1).tensor("zero", &[0, 5], 1).build();
    let h = parse(&data, 1024).unwrap();
    assert_eq!((h.parameter_count, h.tensor_types.get(&1)), (1, Some(&2)));
}

#[test]
fn huge_declared_lengths_fail_without_allocating() {
    let header = |tensors: u64, kvs: u64| {
        let mut w = W(b"GGUF".to_vec());
        w.u32(3).u64(tensors).u64(kvs);
        w
    };
    let mut cases = vec![
        header(u64::MAX, u64::MAX).take(),
        header(0, 1).u64(u64::MAX).take(),                   // key length
        header(0, 1).str("k").u32(STR).u64(u64::MAX).take(), // string value length
        header(u64::MAX, 0).u64(u64::MAX).take(),            // tensor name length
    ];
    for item_type in [U8, BOOL, U16, F32, U64, STR, ARRAY] {
        for count in [u64::MAX, u64::MAX / 2 + 1, 1 << 40, 1000] {
            cases.push(header(0, 1).str("k").u32(ARRAY).array(item_type, count).take());
            let mut padded = header(0, 1).str("k").u32(ARRAY).array(ARRAY, 1).array(item_type, count).take();
            padded.extend_from_slice(&[0; 64]);
            cases.push(padded);
        }
    }
    for data in &cases {
        for limit in [0, 1024, u64::MAX] {
            let (result, largest) = largest_allocation(|| parse(data, limit).map(drop));
            let msg = result.expect_err("must fail").to_string();
            assert!(msg.starts_with("truncated GGUF: needed"), "{msg}");
            assert!(largest < 4096, "allocated {largest} bytes for {data:?}");
        }
    }
}

#[test]
fn corrupted_bytes_never_panic_or_overallocate() {
    let data = sample(3);
    let mut copy = data.clone();
    for i in 0..data.len() {
        for byte in [0x00, 0x01, 0x09, 0x0d, 0x7f, 0x80, 0xfe, 0xff] {
            copy[i] = byte;
            for limit in [0, 2, 1024] {
                let (_, largest) = largest_allocation(|| parse(&copy, limit).map(drop));
                assert!(largest <= 64 * data.len() + 4096, "byte {i} = {byte:#x}: {largest}");
            }
        }
        copy[i] = data[i];
    }
}
