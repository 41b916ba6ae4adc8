//! OpenAI client dialect: the engine's own format passed through.
//!
//! Owns the rewrites a pass-through needs: `model` replaced by the name the client asked for and
//! llama.cpp's `__verbose` debug member cut out (in place, every other byte kept; the gateway asks
//! for `__verbose` only to learn which stop sequence matched, and no client dialect carries it),
//! and the usage-only chunk dropped unless the client asked for usage; plus OpenAI's error object
//! and the `[DONE]` terminator. It must not re-serialize an engine chunk.

use memchr::memchr;

use super::engine::{Completion, EngineError};
use super::json::{key, member_span, span_in, write_edits, write_replaced, write_str};

/// Writes one engine chunk as an SSE event, or nothing for a usage-only chunk nobody asked for.
pub fn chunk(out: &mut Vec<u8>, data: &str, chunk: &Completion<'_>, model: &[u8], include_usage: bool) {
    let usage_only = chunk.choices.as_ref().is_none_or(Vec::is_empty) && chunk.usage.is_some();
    if usage_only && !include_usage {
        return;
    }
    if memchr(b'\n', data.as_bytes()).is_none() {
        out.extend_from_slice(b"data: ");
        payload(out, data, chunk, model);
        out.extend_from_slice(b"\n\n");
    } else {
        let mut bytes = Vec::with_capacity(data.len() + model.len());
        payload(&mut bytes, data, chunk, model);
        raw_lines(out, &bytes);
    }
}

/// `data` with `model` replaced and `__verbose` cut out. A `__verbose` key written with escapes
/// (never the case with llama.cpp) is left in place.
fn payload(out: &mut Vec<u8>, data: &str, completion: &Completion<'_>, model: &[u8]) {
    let span = completion.model.and_then(|m| span_in(data, m.get()));
    let cut = completion
        .verbose
        .and_then(|v| span_in(data, v.get()))
        .and_then(|v| member_span(data, v, "__verbose"));
    match cut {
        None => write_replaced(out, data, span, model),
        Some((start, end)) => {
            let mut edits = [(start, end, &b""[..]), (0, 0, &b""[..])];
            let n = match span {
                Some((a, b)) => {
                    edits[1] = (a, b, model);
                    2
                }
                None => 1,
            };
            write_edits(out, data, &mut edits[..n]);
        }
    }
}

/// Writes an event whose data could not be read, unchanged.
pub fn raw(out: &mut Vec<u8>, data: &str) {
    raw_lines(out, data.as_bytes());
}

fn raw_lines(out: &mut Vec<u8>, payload: &[u8]) {
    for line in payload.split(|&b| b == b'\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.push(b'\n');
}

pub fn done(out: &mut Vec<u8>) {
    out.extend_from_slice(b"data: [DONE]\n\n");
}

/// OpenAI's error object: `{"error":{"message":...,"type":...,"code":...}}`.
pub fn error_object(out: &mut Vec<u8>, err: &EngineError) {
    out.push(b'{');
    key(out, "error");
    out.push(b'{');
    key(out, "message");
    write_str(out, &err.message);
    out.push(b',');
    key(out, "type");
    write_str(out, &err.kind);
    out.push(b',');
    key(out, "code");
    out.extend_from_slice(err.code.as_bytes());
    out.extend_from_slice(b"}}");
}

/// An in-stream error event followed by `[DONE]`.
pub fn error_event(out: &mut Vec<u8>, err: &EngineError) {
    out.extend_from_slice(b"data: ");
    error_object(out, err);
    out.extend_from_slice(b"\n\n");
    done(out);
}

/// A whole body with `model` rewritten and `__verbose` cut out.
pub fn whole(out: &mut Vec<u8>, body: &str, completion: &Completion<'_>, model: &[u8]) {
    payload(out, body, completion, model);
}
