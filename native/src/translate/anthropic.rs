//! Anthropic client dialect (Messages API): SSE events for streams, a message object for bodies.
//!
//! Owns the event sequence `message_start`, `ping`, `content_block_start` / `content_block_delta`
//! (`thinking_delta`, `text_delta`, `input_json_delta`) / `content_block_stop`, `message_delta`, `message_stop` and
//! `error`; the block bookkeeping (one text block or tool_use block open at a time, indices in
//! order); the stop reason mapping; and the whole message object. It must not parse engine bytes.

use super::collect::Collector;
use super::engine::EngineError;
use super::json::{key, write_str, write_u64};
use super::tools::ToolCall;

/// Anthropic's `stop_reason` for an engine finish: stop→end_turn (or stop_sequence when the
/// engine named the stop string: llama.cpp's `__verbose` with `stop_type` "word", or a
/// choice's `stop_reason` as vLLM writes it; tool_use when it called tools), length→max_tokens,
/// tool_calls→tool_use, content_filter→refusal.
pub fn stop_reason(
    finish_reason: Option<&str>,
    stop_sequence: Option<&str>,
    has_tools: bool,
) -> &'static str {
    match finish_reason {
        Some("length") => "max_tokens",
        Some("tool_calls") | Some("function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ if stop_sequence.is_some() => "stop_sequence",
        _ if has_tools => "tool_use",
        _ => "end_turn",
    }
}

/// Anthropic error `type` for an engine error type.
fn error_type(kind: &str) -> &str {
    match kind {
        "invalid_request_error"
        | "authentication_error"
        | "permission_error"
        | "not_found_error"
        | "rate_limit_error"
        | "overloaded_error" => kind,
        _ => "api_error",
    }
}

/// `{"type":"error","error":{"type":...,"message":...}}`.
pub fn error_object(out: &mut Vec<u8>, err: &EngineError) {
    out.extend_from_slice(b"{\"type\":\"error\",");
    key(out, "error");
    out.push(b'{');
    key(out, "type");
    write_str(out, error_type(&err.kind));
    out.push(b',');
    key(out, "message");
    write_str(out, &err.message);
    out.extend_from_slice(b"}}");
}

fn event_head(out: &mut Vec<u8>, name: &str) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
}

pub fn error_event(out: &mut Vec<u8>, err: &EngineError) {
    event_head(out, "error");
    error_object(out, err);
    out.extend_from_slice(b"\n\n");
}

pub fn ping(out: &mut Vec<u8>) {
    out.extend_from_slice(b"event: ping\ndata: {\"type\":\"ping\"}\n\n");
}

/// The tool_use id: the engine's call id, else one derived from the message id.
pub fn tool_id(call: &ToolCall, message_id: &str) -> String {
    call.id
        .clone()
        .unwrap_or_else(|| format!("toolu_{}_{}", message_id.trim_start_matches("msg_"), call.index))
}

fn usage(out: &mut Vec<u8>, input: u64, output: u64) {
    key(out, "usage");
    out.extend_from_slice(b"{\"input_tokens\":");
    write_u64(out, input);
    out.extend_from_slice(b",\"output_tokens\":");
    write_u64(out, output);
    out.push(b'}');
}

fn stop_fields(out: &mut Vec<u8>, reason: &str, sequence: Option<&str>) {
    key(out, "stop_reason");
    write_str(out, reason);
    out.push(b',');
    key(out, "stop_sequence");
    match sequence {
        Some(s) => write_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// The head of a message object up to and including `"content":`.
fn message_head(out: &mut Vec<u8>, message_id: &str, model: &[u8]) {
    out.push(b'{');
    key(out, "id");
    write_str(out, message_id);
    out.extend_from_slice(b",\"type\":\"message\",\"role\":\"assistant\",");
    key(out, "model");
    out.extend_from_slice(model);
    out.push(b',');
    key(out, "content");
}

fn tool_use_block(out: &mut Vec<u8>, call: &ToolCall, message_id: &str, input: &str) {
    out.extend_from_slice(b"{\"type\":\"tool_use\",");
    key(out, "id");
    write_str(out, &tool_id(call, message_id));
    out.push(b',');
    key(out, "name");
    write_str(out, &call.name);
    out.push(b',');
    key(out, "input");
    out.extend_from_slice(input.as_bytes());
    out.push(b'}');
}

/// A whole message object for a non-streamed response.
pub fn whole(out: &mut Vec<u8>, message_id: &str, model: &[u8], col: &Collector, prompt_hint: u64) {
    message_head(out, message_id, model);
    out.push(b'[');
    let mut first = true;
    if !col.reasoning.is_empty() {
        out.extend_from_slice(b"{\"type\":\"thinking\",");
        key(out, "thinking");
        write_str(out, &col.reasoning);
        out.extend_from_slice(b",\"signature\":\"\"}");
        first = false;
    }
    if !col.text.is_empty() {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"type\":\"text\",");
        key(out, "text");
        write_str(out, &col.text);
        out.push(b'}');
    }
    for call in &col.tools.calls {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        tool_use_block(out, call, message_id, &call.arguments_object());
    }
    out.extend_from_slice(b"],");
    let has_tools = !col.tools.calls.is_empty();
    let reason = stop_reason(col.finish_reason.as_deref(), col.stop_sequence.as_deref(), has_tools);
    stop_fields(out, reason, col.stop_sequence.as_deref().filter(|_| reason == "stop_sequence"));
    out.push(b',');
    usage(out, col.prompt_tokens(prompt_hint), col.completion_tokens());
    out.push(b'}');
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    Tool(usize),
}

/// The event writer's state for one streamed message.
#[derive(Debug, Default)]
pub struct Stream {
    pub started: bool,
    open: Option<Block>,
    next_index: u64,
    /// Per tool slot: whether its block was opened, and how many argument bytes were sent.
    opened: Vec<bool>,
    sent: Vec<usize>,
}

impl Stream {
    /// `message_start` then a `ping`.
    pub fn start(&mut self, out: &mut Vec<u8>, message_id: &str, model: &[u8], input_tokens: u64) {
        self.started = true;
        event_head(out, "message_start");
        out.extend_from_slice(b"{\"type\":\"message_start\",");
        key(out, "message");
        message_head(out, message_id, model);
        out.extend_from_slice(b"[],\"stop_reason\":null,\"stop_sequence\":null,");
        usage(out, input_tokens, 0);
        out.extend_from_slice(b"}}\n\n");
        ping(out);
    }

    fn open_block(&mut self, out: &mut Vec<u8>, block: Block, content_block: impl FnOnce(&mut Vec<u8>)) {
        self.close_block(out);
        event_head(out, "content_block_start");
        out.extend_from_slice(b"{\"type\":\"content_block_start\",\"index\":");
        write_u64(out, self.next_index);
        out.extend_from_slice(b",\"content_block\":");
        content_block(out);
        out.extend_from_slice(b"}\n\n");
        self.open = Some(block);
    }

    pub fn close_block(&mut self, out: &mut Vec<u8>) {
        if self.open.take().is_some() {
            event_head(out, "content_block_stop");
            out.extend_from_slice(b"{\"type\":\"content_block_stop\",\"index\":");
            write_u64(out, self.next_index);
            out.extend_from_slice(b"}\n\n");
            self.next_index += 1;
        }
    }

    fn delta_head(&self, out: &mut Vec<u8>) {
        event_head(out, "content_block_delta");
        out.extend_from_slice(b"{\"type\":\"content_block_delta\",\"index\":");
        write_u64(out, self.next_index);
        out.extend_from_slice(b",\"delta\":");
    }

    /// A `text_delta`, opening a text block first when needed.
    pub fn text(&mut self, out: &mut Vec<u8>, text: &str) {
        if self.open != Some(Block::Text) {
            self.open_block(out, Block::Text, |out| {
                out.extend_from_slice(b"{\"type\":\"text\",\"text\":\"\"}")
            });
        }
        self.delta_head(out);
        out.extend_from_slice(b"{\"type\":\"text_delta\",");
        key(out, "text");
        write_str(out, text);
        out.extend_from_slice(b"}}\n\n");
    }

    /// A `thinking_delta` (the engine's `reasoning_content`), opening a thinking block first
    /// when needed. Its `signature` is empty: no one signs a local model's reasoning.
    pub fn thinking(&mut self, out: &mut Vec<u8>, thinking: &str) {
        if self.open != Some(Block::Thinking) {
            self.open_block(out, Block::Thinking, |out| {
                out.extend_from_slice(b"{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}")
            });
        }
        self.delta_head(out);
        out.extend_from_slice(b"{\"type\":\"thinking_delta\",");
        key(out, "thinking");
        write_str(out, thinking);
        out.extend_from_slice(b"}}\n\n");
    }

    /// Tool activity of one chunk: `slots` are the slots its fragments went to, in order. A
    /// call's block opens once its name is known; arguments go out as `input_json_delta` as
    /// they accumulate. Fragments for a call whose block already closed cannot be sent (the
    /// merger has reported them).
    pub fn tools(&mut self, out: &mut Vec<u8>, calls: &[ToolCall], slots: &[usize], message_id: &str) {
        for &slot in slots {
            if self.opened.len() < calls.len() {
                self.opened.resize(calls.len(), false);
                self.sent.resize(calls.len(), 0);
            }
            let call = &calls[slot];
            if self.open != Some(Block::Tool(slot)) {
                if self.opened[slot] || call.name.is_empty() {
                    continue;
                }
                self.opened[slot] = true;
                self.open_block(out, Block::Tool(slot), |out| tool_use_block(out, call, message_id, "{}"));
            }
            let pending = &call.arguments[self.sent[slot]..];
            if !pending.is_empty() {
                self.delta_head(out);
                out.extend_from_slice(b"{\"type\":\"input_json_delta\",");
                key(out, "partial_json");
                write_str(out, pending);
                out.extend_from_slice(b"}}\n\n");
                self.sent[slot] = call.arguments.len();
            }
        }
    }

    /// Closes the open block, then `message_delta` and `message_stop`.
    pub fn finish(&mut self, out: &mut Vec<u8>, col: &Collector, prompt_hint: u64) {
        self.close_block(out);
        let has_tools = !col.tools.calls.is_empty();
        let reason = stop_reason(col.finish_reason.as_deref(), col.stop_sequence.as_deref(), has_tools);
        event_head(out, "message_delta");
        out.extend_from_slice(b"{\"type\":\"message_delta\",\"delta\":{");
        stop_fields(out, reason, col.stop_sequence.as_deref().filter(|_| reason == "stop_sequence"));
        out.extend_from_slice(b"},");
        usage(out, col.prompt_tokens(prompt_hint), col.completion_tokens());
        out.extend_from_slice(b"}\n\n");
        event_head(out, "message_stop");
        out.extend_from_slice(b"{\"type\":\"message_stop\"}\n\n");
    }
}
