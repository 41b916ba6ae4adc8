//! OpenAI client dialect: the engine's own format passed through.
//!
//! Owns the rewrites a pass-through needs: `model` replaced by the name the client asked for and
//! llama.cpp's `__verbose` debug member cut out (in place, every other byte kept; the gateway asks
//! for `__verbose` only to learn which stop sequence matched, and no client dialect carries it),
//! and usage sent once, in a usage-only chunk at the end, and only to a client that asked for it;
//! plus OpenAI's error object and the `[DONE]` terminator. It re-serializes an engine chunk only
//! for the end's usage chunk of a stream with several usage reports (`usage_event`).

use memchr::memchr;

use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::engine::{Completion, EngineError, Usage};
use super::json::{key, member_span, span_in, write_edits, write_replaced, write_str};

/// Whether `chunk` carries usage and no choices (llama.cpp's last chunk of each choice's stream).
pub fn usage_only(chunk: &Completion<'_>) -> bool {
    chunk.choices.as_ref().is_none_or(Vec::is_empty) && chunk.usage.is_some()
}

/// Writes one engine chunk as an SSE event, or nothing for a usage-only chunk nobody asked for.
pub fn chunk(out: &mut Vec<u8>, data: &str, chunk: &Completion<'_>, model: &[u8], include_usage: bool) {
    let usage_only = usage_only(chunk);
    if usage_only && !include_usage {
        return;
    }
    // usage on a chunk that carries choices (llama.cpp's completions stream): cut out; a client that
    // asked for usage gets it in one usage-only chunk at the end (`usage_event`)
    let cut_usage = !usage_only;
    if memchr(b'\n', data.as_bytes()).is_none() {
        out.extend_from_slice(b"data: ");
        payload(out, data, chunk, model, cut_usage);
        out.extend_from_slice(b"\n\n");
    } else {
        let mut bytes = Vec::with_capacity(data.len() + model.len());
        payload(&mut bytes, data, chunk, model, cut_usage);
        raw_lines(out, &bytes);
    }
}

/// `data` with `model` replaced, `__verbose` cut out, and with `cut_usage` `usage` too. A key
/// written with escapes (never the case with llama.cpp) is left in place, and so is a `usage`
/// whose cut would touch the `__verbose` one (the two members side by side, `usage` first).
fn payload(out: &mut Vec<u8>, data: &str, completion: &Completion<'_>, model: &[u8], cut_usage: bool) {
    let span = completion.model.and_then(|m| span_in(data, m.get()));
    let cut = |raw: Option<&RawValue>, name: &str| {
        raw.and_then(|v| span_in(data, v.get())).and_then(|v| member_span(data, v, name))
    };
    let verbose = cut(completion.verbose, "__verbose");
    let usage = if cut_usage { cut(completion.usage.map(|u| u.raw), "usage") } else { None };
    let usage = usage.filter(|u| verbose.is_none_or(|v| u.1 <= v.0 || v.1 <= u.0));
    if verbose.is_none() && usage.is_none() {
        return write_replaced(out, data, span, model);
    }
    let mut edits: [(usize, usize, &[u8]); 3] = [(0, 0, b""); 3];
    let mut n = 0;
    for (start, end) in [verbose, usage].into_iter().flatten() {
        edits[n] = (start, end, b"");
        n += 1;
    }
    if let Some((a, b)) = span {
        edits[n] = (a, b, model);
        n += 1;
    }
    write_edits(out, data, &mut edits[..n]);
}

/// Writes the usage of a stream, held back until its end, as one usage-only chunk (OpenAI's
/// shape): `data` is the last engine chunk that carried usage; its choices are dropped, and with
/// `total` (a stream of several reports) its usage is replaced by that sum.
pub fn usage_event(out: &mut Vec<u8>, data: &str, model: &[u8], total: Option<Usage>) {
    let Ok(completion) = super::stream::parse_object(data) else { return };
    if total.is_none() && usage_only(&completion) {
        return chunk(out, data, &completion, model, true); // as the engine sent it
    }
    let Ok(mut value) = serde_json::from_str::<Value>(data) else { return };
    value["choices"] = Value::Array(Vec::new());
    if let Some(t) = total {
        value["usage"] = json!({
            "completion_tokens": t.completion_tokens,
            "prompt_tokens": t.prompt_tokens,
            "total_tokens": t.completion_tokens.saturating_add(t.prompt_tokens),
        });
    }
    let edited = value.to_string();
    if let Ok(completion) = super::stream::parse_object(&edited) {
        chunk(out, &edited, &completion, model, true);
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
    payload(out, body, completion, model, false);
}
