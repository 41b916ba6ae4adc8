//! OpenAI Responses API client dialect (`/v1/responses`): `response.*` SSE events for streams, a
//! response object for bodies.
//!
//! Owns the event sequence `response.created`, `response.in_progress`, per output item
//! `response.output_item.added` / (`response.content_part.added`, `response.output_text.delta` or
//! `response.reasoning_text.delta`, their `.done` and `response.content_part.done`, or
//! `response.function_call_arguments.delta` / `.done`) / `response.output_item.done`, then
//! `response.completed`, `response.incomplete` (the engine stopped at `max_output_tokens`) or
//! `response.failed`; every event's `sequence_number`, `output_index` and `content_index`, which
//! the official SDKs' stream helpers index by; the item ids; and the whole response object. One
//! output item is open at a time (reasoning, a message, or one function call), in the order the
//! engine's deltas arrive. The request fields a response object repeats (`tools`, `tool_choice`,
//! `instructions`, ...) come from the gateway as `echo`, JSON object members written once per
//! object. It must not parse engine bytes.

use super::collect::Collector;
use super::engine::EngineError;
use super::json::{key, write_str, write_u64};
use super::tools::ToolCall;

/// What every response object of one response repeats.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    pub id: &'a str,
    /// Unix seconds.
    pub created_at: u64,
    /// The model as a JSON string literal.
    pub model: &'a [u8],
    /// JSON object members (no braces) the response object repeats from the request; empty for
    /// the members a response object needs (`parallel_tool_calls`, `tool_choice`, `tools`).
    pub echo: &'a str,
}

const DEFAULT_ECHO: &str = "\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Reasoning,
    Message,
    Tool(usize),
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Completed,
    /// Stopped at the output token bound: status `incomplete`, reason `max_output_tokens`.
    Incomplete,
    Failed,
}

impl End {
    fn of(col: &Collector) -> Self {
        if col.finish_reason.as_deref() == Some("length") {
            Self::Incomplete
        } else {
            Self::Completed
        }
    }

    fn status(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Incomplete => "incomplete",
            Self::Failed => "failed",
        }
    }
}

/// A function call's `call_id`: the engine's tool call id, else one derived from the response id.
pub fn call_id(call: &ToolCall, response_id: &str) -> String {
    call.id.clone().unwrap_or_else(|| format!("call_{}_{}", suffix(response_id), call.index))
}

fn suffix(response_id: &str) -> &str {
    response_id.strip_prefix("resp_").unwrap_or(response_id)
}

/// What a response object says it used: prompt, prompt held by the engine's cache, output, of which
/// reasoning (a chunk of reasoning counted as a token: engines report no such figure).
#[derive(Debug, Clone, Copy)]
struct Tokens {
    input: u64,
    cached: u64,
    output: u64,
    reasoning: u64,
}

impl Tokens {
    fn of(col: &Collector, prompt_hint: u64) -> Self {
        let output = col.completion_tokens();
        Self {
            input: col.prompt_tokens(prompt_hint),
            cached: col.usage().map_or(0, |u| u.cached_tokens),
            output,
            reasoning: col.reasoning_chunks.min(output),
        }
    }
}

fn usage(out: &mut Vec<u8>, t: Tokens) {
    out.extend_from_slice(b"{\"input_tokens\":");
    write_u64(out, t.input);
    out.extend_from_slice(b",\"input_tokens_details\":{\"cached_tokens\":");
    write_u64(out, t.cached);
    out.extend_from_slice(b",\"cache_write_tokens\":0},\"output_tokens\":");
    write_u64(out, t.output);
    out.extend_from_slice(b",\"output_tokens_details\":{\"reasoning_tokens\":");
    write_u64(out, t.reasoning);
    out.extend_from_slice(b"},\"total_tokens\":");
    write_u64(out, t.input.saturating_add(t.output));
    out.push(b'}');
}

/// A response object. `output` is the items' JSON, comma-separated; `tokens` the usage, when known.
fn response_object(
    out: &mut Vec<u8>,
    head: &Head<'_>,
    status: &str,
    output: &[u8],
    tokens: Option<Tokens>,
    error: Option<&EngineError>,
) {
    out.push(b'{');
    key(out, "id");
    write_str(out, head.id);
    out.extend_from_slice(b",\"object\":\"response\",\"created_at\":");
    write_u64(out, head.created_at);
    out.extend_from_slice(b",\"status\":");
    write_str(out, status);
    out.extend_from_slice(b",\"model\":");
    out.extend_from_slice(head.model);
    out.extend_from_slice(b",\"output\":[");
    out.extend_from_slice(output);
    out.extend_from_slice(b"],\"error\":");
    match error {
        Some(err) => {
            out.extend_from_slice(b"{\"code\":\"server_error\",");
            key(out, "message");
            write_str(out, &err.message);
            out.push(b'}');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"incomplete_details\":");
    if status == "incomplete" {
        out.extend_from_slice(b"{\"reason\":\"max_output_tokens\"}");
    } else {
        out.extend_from_slice(b"null");
    }
    out.extend_from_slice(b",\"usage\":");
    match tokens {
        Some(t) => usage(out, t),
        None => out.extend_from_slice(b"null"),
    }
    out.push(b',');
    out.extend_from_slice(if head.echo.is_empty() { DEFAULT_ECHO } else { head.echo }.as_bytes());
    out.push(b'}');
}

/// `event: NAME` and the data's opening members `{"type":NAME,"sequence_number":N`.
fn event_head(out: &mut Vec<u8>, name: &str, seq: &mut u64) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: {\"type\":\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\",\"sequence_number\":");
    write_u64(out, *seq);
    *seq += 1;
}

fn event_end(out: &mut Vec<u8>) {
    out.extend_from_slice(b"}\n\n");
}

/// The event writer's state for one response (a whole body is written by the same state, its
/// events discarded).
#[derive(Debug, Default)]
pub struct Stream {
    pub started: bool,
    seq: u64,
    open: Option<Item>,
    open_id: String,
    /// The open message's or reasoning item's text so far (its `.done` events repeat it).
    open_text: String,
    /// The open item's `output_index`, or the next item's.
    index: u64,
    /// The finished items' JSON, comma-separated, for the final response object.
    items: Vec<u8>,
    /// Per tool slot: whether its item was opened, and how many argument bytes were sent.
    opened: Vec<bool>,
    sent: Vec<usize>,
}

impl Stream {
    /// `response.created` then `response.in_progress`.
    pub fn start(&mut self, out: &mut Vec<u8>, head: &Head<'_>) {
        self.started = true;
        for name in ["response.created", "response.in_progress"] {
            event_head(out, name, &mut self.seq);
            out.extend_from_slice(b",\"response\":");
            response_object(out, head, "in_progress", b"", None, None);
            event_end(out);
        }
    }

    fn item_json(&self, out: &mut Vec<u8>, item: Item, status: &str, calls: &[ToolCall], head: &Head<'_>) {
        out.push(b'{');
        key(out, "id");
        write_str(out, &self.open_id);
        match item {
            Item::Message | Item::Reasoning => {
                let (kind, own): (&[u8], &[u8]) = if item == Item::Message {
                    (b"message", b",\"role\":\"assistant\"")
                } else {
                    (b"reasoning", b",\"summary\":[]")
                };
                out.extend_from_slice(b",\"type\":\"");
                out.extend_from_slice(kind);
                out.extend_from_slice(b"\",\"status\":");
                write_str(out, status);
                out.extend_from_slice(own);
                out.extend_from_slice(b",\"content\":[");
                if status != "in_progress" {
                    self.part_json(out, item);
                }
                out.push(b']');
            }
            Item::Tool(slot) => {
                let call = &calls[slot];
                out.extend_from_slice(b",\"type\":\"function_call\",\"status\":");
                write_str(out, status);
                out.push(b',');
                key(out, "call_id");
                write_str(out, &call_id(call, head.id));
                out.push(b',');
                key(out, "name");
                write_str(out, &call.name);
                out.push(b',');
                key(out, "arguments");
                write_str(out, if status == "in_progress" { "" } else { &call.arguments });
            }
        }
        out.push(b'}');
    }

    /// The open item's content part, with its text so far.
    fn part_json(&self, out: &mut Vec<u8>, item: Item) {
        out.extend_from_slice(if item == Item::Reasoning {
            b"{\"type\":\"reasoning_text\","
        } else {
            b"{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],"
        });
        key(out, "text");
        write_str(out, &self.open_text);
        out.push(b'}');
    }

    fn locate(&self, out: &mut Vec<u8>, content: bool) {
        out.extend_from_slice(b",\"item_id\":");
        write_str(out, &self.open_id);
        out.extend_from_slice(b",\"output_index\":");
        write_u64(out, self.index);
        if content {
            out.extend_from_slice(b",\"content_index\":0");
        }
    }

    fn open_item(&mut self, out: &mut Vec<u8>, item: Item, calls: &[ToolCall], head: &Head<'_>) {
        self.close_item(out, calls, head, "completed");
        let prefix = match item {
            Item::Message => "msg",
            Item::Reasoning => "rs",
            Item::Tool(_) => "fc",
        };
        self.open_id = format!("{prefix}_{}_{}", suffix(head.id), self.index);
        self.open_text.clear();
        self.open = Some(item);
        event_head(out, "response.output_item.added", &mut self.seq);
        out.extend_from_slice(b",\"output_index\":");
        write_u64(out, self.index);
        out.extend_from_slice(b",\"item\":");
        self.item_json(out, item, "in_progress", calls, head);
        event_end(out);
        if !matches!(item, Item::Tool(_)) {
            event_head(out, "response.content_part.added", &mut self.seq);
            self.locate(out, true);
            out.extend_from_slice(b",\"part\":");
            self.part_json(out, item);
            event_end(out);
        }
    }

    /// Ends the open item, if any, with `status`: its `.done` events, then `output_item.done`.
    fn close_item(&mut self, out: &mut Vec<u8>, calls: &[ToolCall], head: &Head<'_>, status: &str) {
        let Some(item) = self.open.take() else { return };
        match item {
            Item::Message | Item::Reasoning => {
                let name = if item == Item::Message {
                    "response.output_text.done"
                } else {
                    "response.reasoning_text.done"
                };
                event_head(out, name, &mut self.seq);
                self.locate(out, true);
                if item == Item::Message {
                    out.extend_from_slice(b",\"logprobs\":[]");
                }
                out.extend_from_slice(b",\"text\":");
                write_str(out, &self.open_text);
                event_end(out);
                event_head(out, "response.content_part.done", &mut self.seq);
                self.locate(out, true);
                out.extend_from_slice(b",\"part\":");
                self.part_json(out, item);
                event_end(out);
            }
            Item::Tool(slot) => {
                let call = &calls[slot];
                self.arguments_delta(out, call, slot);
                event_head(out, "response.function_call_arguments.done", &mut self.seq);
                self.locate(out, false);
                out.extend_from_slice(b",\"name\":");
                write_str(out, &call.name);
                out.extend_from_slice(b",\"arguments\":");
                write_str(out, &call.arguments);
                event_end(out);
            }
        }
        let start = out.len();
        event_head(out, "response.output_item.done", &mut self.seq);
        out.extend_from_slice(b",\"output_index\":");
        write_u64(out, self.index);
        out.extend_from_slice(b",\"item\":");
        let item_start = out.len();
        self.item_json(out, item, status, calls, head);
        if !self.items.is_empty() {
            self.items.push(b',');
        }
        self.items.extend_from_slice(&out[item_start..]);
        debug_assert!(out.len() > start);
        event_end(out);
        self.index += 1;
    }

    /// A delta of the open message or reasoning item.
    fn text_delta(&mut self, out: &mut Vec<u8>, item: Item, delta: &str) {
        let name = if item == Item::Message {
            "response.output_text.delta"
        } else {
            "response.reasoning_text.delta"
        };
        event_head(out, name, &mut self.seq);
        self.locate(out, true);
        out.extend_from_slice(b",\"delta\":");
        write_str(out, delta);
        if item == Item::Message {
            out.extend_from_slice(b",\"logprobs\":[]");
        }
        event_end(out);
        self.open_text.push_str(delta);
    }

    /// An `output_text.delta`, opening a message item first when needed.
    pub fn text(&mut self, out: &mut Vec<u8>, text: &str, calls: &[ToolCall], head: &Head<'_>) {
        if self.open != Some(Item::Message) {
            self.open_item(out, Item::Message, calls, head);
        }
        self.text_delta(out, Item::Message, text);
    }

    /// A `reasoning_text.delta` (the engine's `reasoning_content`), opening a reasoning item first
    /// when needed.
    pub fn reasoning(&mut self, out: &mut Vec<u8>, text: &str, calls: &[ToolCall], head: &Head<'_>) {
        if self.open != Some(Item::Reasoning) {
            self.open_item(out, Item::Reasoning, calls, head);
        }
        self.text_delta(out, Item::Reasoning, text);
    }

    /// Tool activity of one chunk: `slots` are the slots its fragments went to, in order. A
    /// call's item opens once its name is known; arguments go out as they accumulate. Fragments
    /// for a call whose item already closed cannot be sent (the merger has reported them).
    pub fn tools(&mut self, out: &mut Vec<u8>, calls: &[ToolCall], slots: &[usize], head: &Head<'_>) {
        for &slot in slots {
            if self.opened.len() < calls.len() {
                self.opened.resize(calls.len(), false);
                self.sent.resize(calls.len(), 0);
            }
            let call = &calls[slot];
            if self.open != Some(Item::Tool(slot)) {
                if self.opened[slot] || call.name.is_empty() {
                    continue;
                }
                self.opened[slot] = true;
                self.open_item(out, Item::Tool(slot), calls, head);
            }
            self.arguments_delta(out, call, slot);
        }
    }

    /// The open call's arguments not sent yet, as one `function_call_arguments.delta`.
    fn arguments_delta(&mut self, out: &mut Vec<u8>, call: &ToolCall, slot: usize) {
        let pending = &call.arguments[self.sent[slot]..];
        if !pending.is_empty() {
            event_head(out, "response.function_call_arguments.delta", &mut self.seq);
            self.locate(out, false);
            out.extend_from_slice(b",\"delta\":");
            write_str(out, pending);
            event_end(out);
            self.sent[slot] = call.arguments.len();
        }
    }

    /// Closes the open item, then `response.completed` (or `response.incomplete`, stopped at the
    /// token bound) with every item and the usage.
    pub fn finish(&mut self, out: &mut Vec<u8>, col: &Collector, prompt_hint: u64, head: &Head<'_>) {
        let calls = &col.tools.calls;
        // calls whose name arrived only at the end were never opened: each is an item of its own
        let slots: Vec<usize> = (0..calls.len()).collect();
        self.tools(out, calls, &slots, head);
        let end = End::of(col);
        let status = end.status();
        self.close_item(out, calls, head, status);
        let name = if end == End::Incomplete { "response.incomplete" } else { "response.completed" };
        event_head(out, name, &mut self.seq);
        out.extend_from_slice(b",\"response\":");
        response_object(out, head, status, &self.items, Some(Tokens::of(col, prompt_hint)), None);
        event_end(out);
    }

    /// The abnormal end: the open item closes as `incomplete`, then `response.failed` names the
    /// error.
    pub fn fail(&mut self, out: &mut Vec<u8>, col: &Collector, err: &EngineError, head: &Head<'_>) {
        if !self.started {
            self.start(out, head);
        }
        self.close_item(out, &col.tools.calls, head, "incomplete");
        event_head(out, "response.failed", &mut self.seq);
        out.extend_from_slice(b",\"response\":");
        response_object(out, head, End::Failed.status(), &self.items, None, Some(err));
        event_end(out);
    }
}

/// A whole response object for a non-streamed response: the items the stream would have sent.
pub fn whole(out: &mut Vec<u8>, col: &Collector, head: &Head<'_>) {
    let mut stream = Stream { started: true, ..Stream::default() };
    let mut events = Vec::new();
    let calls = &col.tools.calls;
    if !col.reasoning.is_empty() {
        stream.reasoning(&mut events, &col.reasoning, calls, head);
    }
    if !col.text.is_empty() {
        stream.text(&mut events, &col.text, calls, head);
    }
    let end = End::of(col);
    let slots: Vec<usize> = (0..calls.len()).collect();
    stream.tools(&mut events, calls, &slots, head);
    stream.close_item(&mut events, calls, head, end.status());
    response_object(out, head, end.status(), &stream.items, Some(Tokens::of(col, 0)), None);
}
