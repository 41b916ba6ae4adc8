//! JSON output helpers: string escaping, object minifying, and in-place value replacement.
//!
//! Owns the exact bytes of every JSON text the translators write, so the Python oracle can match
//! them: compact separators, strings escaped as Python's `json.dumps(..., ensure_ascii=False)`
//! does (`\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, other controls as lowercase `\u00xx`, nothing
//! else); and the in-place edits of a passed-through object (a value replaced, a member cut).
//! It must not decide which fields a dialect writes.

use serde_json::value::RawValue;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `s` as a JSON string literal.
#[inline]
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        start = i + 1;
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]),
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// The JSON string literal of `s`, as bytes.
pub fn str_literal(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 2);
    write_str(&mut out, s);
    out
}

/// Appends `"key":` (the key must need no escaping).
#[inline]
pub fn key(out: &mut Vec<u8>, k: &str) {
    out.push(b'"');
    out.extend_from_slice(k.as_bytes());
    out.extend_from_slice(b"\":");
}

#[inline]
pub fn write_u64(out: &mut Vec<u8>, n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Checks that `text` is one JSON object and returns it without insignificant whitespace.
/// An empty (or all-whitespace) text stands for `{}`.
pub fn minify_object(text: &str) -> Result<String, String> {
    if text.trim_matches(is_json_ws).is_empty() {
        return Ok("{}".to_owned());
    }
    let raw: &RawValue = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let raw = raw.get();
    if !raw.starts_with('{') {
        return Err("not a JSON object".to_owned());
    }
    let mut out = String::with_capacity(raw.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in raw.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !is_json_ws(c) {
            out.push(c);
        }
    }
    Ok(out)
}

fn is_json_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Byte range of `inner` inside `outer`; `inner` must borrow from `outer`.
pub fn span_in(outer: &str, inner: &str) -> Option<(usize, usize)> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    let end = start.checked_add(inner.len())?;
    (end <= outer.len()).then_some((start, end))
}

/// Appends `text` with the byte range `span` replaced by `with`.
#[inline]
pub fn write_replaced(out: &mut Vec<u8>, text: &str, span: Option<(usize, usize)>, with: &[u8]) {
    match span {
        Some((start, end)) => {
            out.extend_from_slice(&text.as_bytes()[..start]);
            out.extend_from_slice(with);
            out.extend_from_slice(&text.as_bytes()[end..]);
        }
        None => out.extend_from_slice(text.as_bytes()),
    }
}

fn ws_before(b: &[u8], mut i: usize) -> usize {
    while i > 0 && is_json_ws(char::from(b[i - 1])) {
        i -= 1;
    }
    i
}

fn ws_after(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is_json_ws(char::from(b[i])) {
        i += 1;
    }
    i
}

/// Byte range of the member `"name": value` of the object `text`, given the span of its value,
/// with one adjacent comma (the one before it, else the one after it and the whitespace that
/// follows), so that cutting the range leaves a valid object. None when the key is not written
/// as the plain string `"name"` right before the value.
pub fn member_span(text: &str, value: (usize, usize), name: &str) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let colon = ws_before(b, value.0);
    if colon == 0 || b[colon - 1] != b':' {
        return None;
    }
    let key_end = ws_before(b, colon - 1);
    let key_start = key_end.checked_sub(name.len() + 2)?;
    let key = &b[key_start..key_end];
    if key[0] != b'"' || key[key.len() - 1] != b'"' || &key[1..key.len() - 1] != name.as_bytes() {
        return None;
    }
    let before = ws_before(b, key_start);
    if before > 0 && b[before - 1] == b',' {
        return Some((before - 1, value.1));
    }
    let after = ws_after(b, value.1);
    if after < b.len() && b[after] == b',' {
        return Some((key_start, ws_after(b, after + 1)));
    }
    Some((key_start, value.1))
}

/// Appends `text` with each `(start, end, with)` range replaced; the ranges must not overlap.
pub fn write_edits(out: &mut Vec<u8>, text: &str, edits: &mut [(usize, usize, &[u8])]) {
    edits.sort_unstable_by_key(|e| e.0);
    let mut at = 0;
    for &(start, end, with) in edits.iter() {
        out.extend_from_slice(&text.as_bytes()[at..start]);
        out.extend_from_slice(with);
        at = end;
    }
    out.extend_from_slice(&text.as_bytes()[at..]);
}
