//! Ollama client dialect (`/api/chat` and `/api/generate`): NDJSON objects.
//!
//! Owns Ollama's object shapes, written once for streams and whole bodies: the per-delta object
//! (`message.content` / `response`, `thinking`), complete `tool_calls` with arguments as JSON
//! objects, the final `done: true` object with `done_reason` and the duration/count metrics, and
//! the `{"error": ...}` object. It must not measure time: callers pass the metrics.

use super::clock::write_rfc3339;
use super::json::{key, write_str, write_u64};
use super::tools::ToolCall;

/// The final object's counters, durations in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Metrics {
    pub total_duration: u64,
    pub load_duration: u64,
    pub prompt_eval_count: u64,
    pub prompt_eval_duration: u64,
    pub eval_count: u64,
    pub eval_duration: u64,
}

/// Ollama's `done_reason` for an engine `finish_reason`: `length` stays, all else is `stop`.
pub fn done_reason(finish_reason: Option<&str>) -> &'static str {
    match finish_reason {
        Some("length") => "length",
        _ => "stop",
    }
}

fn head(out: &mut Vec<u8>, model: &[u8], now: u64) {
    out.push(b'{');
    key(out, "model");
    out.extend_from_slice(model);
    out.push(b',');
    key(out, "created_at");
    write_rfc3339(out, now);
    out.push(b',');
}

fn tool_calls(out: &mut Vec<u8>, calls: &[ToolCall]) {
    key(out, "tool_calls");
    out.push(b'[');
    for (i, call) in calls.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        if let Some(id) = &call.id {
            key(out, "id");
            write_str(out, id);
            out.push(b',');
        }
        key(out, "function");
        out.push(b'{');
        key(out, "index");
        write_u64(out, u64::from(call.index));
        out.push(b',');
        key(out, "name");
        write_str(out, &call.name);
        out.push(b',');
        key(out, "arguments");
        out.extend_from_slice(call.arguments_object().as_bytes());
        out.extend_from_slice(b"}}");
    }
    out.push(b']');
}

/// Chat `message` object, or generate's `response` (and `thinking`) fields.
fn body(out: &mut Vec<u8>, generate: bool, content: &str, thinking: &str, calls: &[ToolCall]) {
    if generate {
        key(out, "response");
        write_str(out, content);
        if !thinking.is_empty() {
            out.push(b',');
            key(out, "thinking");
            write_str(out, thinking);
        }
        return;
    }
    key(out, "message");
    out.push(b'{');
    key(out, "role");
    out.extend_from_slice(b"\"assistant\",");
    key(out, "content");
    write_str(out, content);
    if !thinking.is_empty() {
        out.push(b',');
        key(out, "thinking");
        write_str(out, thinking);
    }
    if !calls.is_empty() {
        out.push(b',');
        tool_calls(out, calls);
    }
    out.push(b'}');
}

/// `,"logprobs":[...]` (Ollama's top-level field) when there are any: the engine's entries as
/// they came (`token`, `logprob`, `bytes`, `top_logprobs`).
fn logprobs(out: &mut Vec<u8>, raw: &str) {
    if raw.starts_with('[') && raw != "[]" {
        out.push(b',');
        key(out, "logprobs");
        out.extend_from_slice(raw.as_bytes());
    }
}

/// One streamed `done: false` object; `raw_logprobs` is its tokens' entries (or empty).
#[allow(clippy::too_many_arguments)]
pub fn delta(
    out: &mut Vec<u8>,
    generate: bool,
    model: &[u8],
    now: u64,
    content: &str,
    thinking: &str,
    calls: &[ToolCall],
    raw_logprobs: &str,
) {
    head(out, model, now);
    body(out, generate, content, thinking, calls);
    logprobs(out, raw_logprobs);
    out.extend_from_slice(b",\"done\":false}\n");
}

/// The `done: true` object; `content`, `thinking`, `calls` and `raw_logprobs` are empty in a
/// stream, whole in a body. `newline` ends it as an NDJSON line.
#[allow(clippy::too_many_arguments)]
pub fn final_object(
    out: &mut Vec<u8>,
    generate: bool,
    model: &[u8],
    now: u64,
    content: &str,
    thinking: &str,
    calls: &[ToolCall],
    raw_logprobs: &str,
    reason: &str,
    m: &Metrics,
    newline: bool,
) {
    head(out, model, now);
    body(out, generate, content, thinking, calls);
    logprobs(out, raw_logprobs);
    if generate {
        out.extend_from_slice(b",\"done\":true,");
        key(out, "done_reason");
        write_str(out, reason);
    } else {
        out.push(b',');
        key(out, "done_reason");
        write_str(out, reason);
        out.extend_from_slice(b",\"done\":true");
    }
    for (name, value) in [
        ("total_duration", m.total_duration),
        ("load_duration", m.load_duration),
        ("prompt_eval_count", m.prompt_eval_count),
        ("prompt_eval_duration", m.prompt_eval_duration),
        ("eval_count", m.eval_count),
        ("eval_duration", m.eval_duration),
    ] {
        out.push(b',');
        key(out, name);
        write_u64(out, value);
    }
    out.push(b'}');
    if newline {
        out.push(b'\n');
    }
}

/// `{"error":"..."}`, as Ollama reports failures.
pub fn error(out: &mut Vec<u8>, message: &str, newline: bool) {
    out.push(b'{');
    key(out, "error");
    write_str(out, message);
    out.push(b'}');
    if newline {
        out.push(b'\n');
    }
}
