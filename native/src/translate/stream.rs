//! The streaming translator: engine SSE bytes in, client bytes out, one object per response.
//!
//! Owns the per-response state machine shared by every dialect: frame parsing, chunk decoding,
//! `[DONE]`, engine errors, the normal and abnormal ends, pending output after a frame error,
//! and Anthropic's keep-alive pings. What each dialect writes lives in `openai`, `ollama` and
//! `anthropic`; what the response amounted to in `collect`. It must not touch Python.

use super::anthropic;
use super::clock::Clock;
use super::collect::{Collector, Summary};
use super::engine::{Completion, EngineError, Message, REDACTED};
use super::forced::ForcedCall;
use super::json::str_literal;
use super::legacy;
use super::ollama::{self, Metrics};
use super::openai;
use super::prefill::Prefill;
use super::responses;
use crate::frame::{FrameError, SseEvent, SseParser, DEFAULT_MAX_FRAME};

/// Quiet time after which an Anthropic stream gets a `ping`.
pub const PING_AFTER_NS: u64 = 10_000_000_000;

/// The client's wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    OllamaChat,
    OllamaGenerate,
    Anthropic,
    /// OpenAI's Responses API (`/v1/responses`).
    Responses,
}

impl Dialect {
    pub const NAMES: &'static str = "'openai', 'ollama_chat', 'ollama_generate', 'anthropic' or 'responses'";

    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "openai" => Self::OpenAi,
            "ollama_chat" => Self::OllamaChat,
            "ollama_generate" => Self::OllamaGenerate,
            "anthropic" => Self::Anthropic,
            "responses" => Self::Responses,
            _ => return None,
        })
    }
}

/// What the client asked for and what the caller knows before the first byte.
#[derive(Debug, Clone)]
pub struct Options {
    pub dialect: Dialect,
    pub model: String,
    pub include_usage: bool,
    pub load_duration_ns: u64,
    pub message_id: Option<String>,
    pub prompt_tokens_hint: u64,
    /// A credential the upstream may quote in its errors: cut out of the errors relayed.
    pub redact: Option<String>,
    /// The text of the assistant message the conversation ends with, which the engine repeats at
    /// the start of its answer: cut from it (`prefill`).
    pub prefill: Option<String>,
    /// The client's `n` (choices per prompt; 0 or 1: one), for adding up usage reports.
    pub n: u64,
    /// Responses API: the request's members every response object repeats (see `responses::Head`).
    pub echo: Option<String>,
    /// False when the client asked for each token's logprob without alternatives (top_logprobs 0):
    /// llama-server gives none at all there, so it is asked for one, which is cut (`alternatives`).
    pub alternatives: bool,
    /// A forced tool call: the engine streams `{"name", "arguments"}` JSON as content, relayed as
    /// a call to one of these tools (`forced`).
    pub forced_call: Option<Vec<String>>,
}

/// A fresh Anthropic-style message id.
pub fn new_message_id() -> String {
    new_id("msg_")
}

/// `prefix` and 24 random hex digits.
fn new_id(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut id = String::from(prefix);
    for round in 0..2u64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(super::clock::system_ns() ^ round);
        id.push_str(&format!("{:016x}", h.finish()));
    }
    id.truncate(prefix.len() + 24);
    id
}

/// The id of a response to `dialect`: the caller's, else a fresh one (`resp_...` for the
/// Responses API, `msg_...` otherwise).
pub fn response_id(dialect: Dialect, given: Option<&String>) -> String {
    match given {
        Some(id) => id.clone(),
        None if dialect == Dialect::Responses => new_id("resp_"),
        None => new_message_id(),
    }
}

/// Reads a JSON object (only an object: serde would also accept an array for a struct).
pub(super) fn parse_object<'a>(text: &'a str) -> Result<Completion<'a>, String> {
    if !text.trim_start_matches([' ', '\t', '\n', '\r']).starts_with('{') {
        return Err("not a JSON object".to_owned());
    }
    let mut completion: Completion<'a> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    for choice in completion.choices.iter_mut().flatten() {
        choice.fold_text();
    }
    Ok(completion)
}

/// `data` (an engine chunk or whole body) as the writers must read it, or None when it needs no
/// change: the assistant prefill the engine echoes cut (`prefill`), and for an OpenAI client a text
/// choice's logprobs in the completions API's shape (`legacy`).
pub(super) fn rewrite(
    data: &str,
    dialect: Dialect,
    prefill: &mut Prefill,
    offsets: &mut legacy::Offsets,
    alternatives: bool,
) -> Option<String> {
    let mut stripped = if prefill.pending() { prefill.strip(data) } else { None };
    if !alternatives {
        let current = stripped.as_deref().unwrap_or(data);
        if current.contains("\"top_logprobs\"") {
            stripped = legacy::without_alternatives(current, dialect == Dialect::OpenAi).or(stripped);
        }
    }
    let current = stripped.as_deref().unwrap_or(data);
    if dialect == Dialect::OpenAi && legacy::may_need(current) {
        if let Some(reshaped) = legacy::reshape(current, offsets) {
            return Some(reshaped);
        }
    }
    stripped
}

/// Choice 0's logprobs entries as raw JSON (`[...]`), or "".
pub(super) fn first_logprobs<'a>(chunk: &Completion<'a>) -> &'a str {
    let choice = chunk.choices.as_ref().and_then(|cs| cs.iter().find(|c| c.index == 0));
    choice.and_then(|c| c.logprobs.as_ref()).and_then(|l| l.content).map_or("", |raw| raw.get())
}

pub(super) fn first_message<'c, 'a>(chunk: &'c Completion<'a>) -> Option<&'c Message<'a>> {
    let choice = chunk.choices.as_ref()?.iter().find(|c| c.index == 0)?;
    choice.delta.as_ref().or(choice.message.as_ref())
}

/// What every Responses API object of a response repeats (borrowing only the fields it names, so
/// the state's writer and buffer stay free).
fn head<'s>(id: &'s str, start_ns: u64, model: &'s [u8], echo: &'s Option<String>) -> responses::Head<'s> {
    responses::Head { id, created_at: start_ns / 1_000_000_000, model, echo: echo.as_deref().unwrap_or("") }
}

struct State {
    opts: Options,
    model: Vec<u8>,
    message_id: String,
    col: Collector,
    anthropic: anthropic::Stream,
    responses: responses::Stream,
    ollama_sent: usize,
    /// The prompt's token count until the engine reports usage: the caller's hint, or what
    /// llama.cpp's `prompt_progress` said.
    prompt_hint: u64,
    out: Vec<u8>,
    saw_done: bool,
    closed: bool,
    last_output_ns: u64,
    prefill: Prefill,
    /// OpenAI: the latest chunk that carried usage, written at the end as one usage-only chunk
    /// with every report added up (as OpenAI sends it), not as each choice's or prompt's arrives.
    usage_event: Option<String>,
    offsets: legacy::Offsets,
    forced: Option<ForcedCall>,
}

/// Translates one streamed response.
pub struct Translator {
    parser: SseParser,
    clock: Clock,
    state: State,
    pending: Vec<u8>,
}

impl Translator {
    /// A translator whose clock starts at `start_ns` (Unix-epoch ns), or now.
    pub fn new(opts: Options, start_ns: Option<u64>) -> Self {
        let clock = Clock::new(start_ns);
        let message_id = response_id(opts.dialect, opts.message_id.as_ref());
        let state = State {
            model: str_literal(&opts.model),
            message_id,
            col: Collector::new(clock.start_ns(), opts.n),
            anthropic: anthropic::Stream::default(),
            responses: responses::Stream::default(),
            ollama_sent: 0,
            prompt_hint: opts.prompt_tokens_hint,
            out: Vec::new(),
            saw_done: false,
            closed: false,
            last_output_ns: clock.start_ns(),
            prefill: Prefill::new(opts.prefill.clone(), opts.n),
            usage_event: None,
            offsets: legacy::Offsets::default(),
            forced: opts.forced_call.as_ref().map(|names| ForcedCall::new(names, new_id("call_"))),
            opts,
        };
        Self { parser: SseParser::new(DEFAULT_MAX_FRAME), clock, state, pending: Vec::new() }
    }

    /// Feeds engine bytes; returns the client bytes they complete. After a frame error every
    /// call fails; `finish` then returns what was held back and the closing error.
    pub fn feed(&mut self, chunk: &[u8], now: Option<u64>) -> Result<Vec<u8>, FrameError> {
        if let Some(err) = self.parser.failure() {
            return Err(err.clone());
        }
        if self.state.closed {
            return Ok(Vec::new());
        }
        let now = self.clock.now(now);
        let state = &mut self.state;
        match self.parser.feed(chunk, |ev| state.on_event(ev, now)) {
            Ok(()) => {
                state.keep_alive(now);
                Ok(std::mem::take(&mut state.out))
            }
            Err(err) => {
                self.pending.append(&mut state.out);
                Err(err)
            }
        }
    }

    /// Ends the upstream: emits whatever closes the client's stream, once.
    pub fn finish(&mut self, now: Option<u64>) -> Vec<u8> {
        let now = self.clock.now(now);
        if !self.state.closed {
            if let Some(err) = self.parser.failure() {
                let err = EngineError::new(&err.to_string(), "stream_error");
                self.state.col.errors.push(format!("stream error: {}", err.message));
                self.state.fail(&err, now);
            } else {
                if !self.parser.finish() {
                    self.state
                        .col
                        .errors
                        .push("engine stream ended inside an event; it was discarded".to_owned());
                }
                self.state.close(now);
            }
        }
        let mut out = std::mem::take(&mut self.pending);
        out.append(&mut self.state.out);
        out
    }

    /// Ends the response early with an error the client sees in its own dialect.
    pub fn abort(&mut self, message: &str, now: Option<u64>) -> Vec<u8> {
        let now = self.clock.now(now);
        if !self.state.closed {
            self.state.col.errors.push(format!("aborted: {message}"));
            self.state.fail(&EngineError::new(message, "server_error"), now);
        }
        let mut out = std::mem::take(&mut self.pending);
        out.append(&mut self.state.out);
        out
    }

    pub fn summary(&self) -> Summary {
        self.state.col.summary()
    }

    /// Whether the engine's `[DONE]` or final event was seen, or the stream was closed.
    pub fn done(&self) -> bool {
        self.state.saw_done || self.state.closed
    }
}

impl State {
    fn on_event(&mut self, ev: SseEvent<'_>, now: u64) {
        if self.closed {
            return;
        }
        if ev.event == "error" {
            self.engine_error(&EngineError::parse(ev.data), now);
            return;
        }
        if ev.data == "[DONE]" {
            self.saw_done = true;
            self.close(now);
            return;
        }
        if ev.data.trim() == "null" {
            // llama-server's separator between the prompts of a multi-prompt completion: nothing to send
            // (an OpenAI client would read it as a chunk that is not one)
            return;
        }
        let called = self.forced.as_mut().and_then(|call| call.rewrite(ev.data));
        let source = called.as_deref().unwrap_or(ev.data);
        let rewritten =
            rewrite(source, self.opts.dialect, &mut self.prefill, &mut self.offsets, self.opts.alternatives);
        let data = rewritten.as_deref().unwrap_or(source);
        let chunk: Completion<'_> = match parse_object(data) {
            Ok(chunk) => chunk,
            Err(err) => return self.bad_chunk(data, &err),
        };
        if chunk.error.is_some() {
            self.engine_error(&EngineError::parse(data), now);
            return;
        }
        if let Some(progress) = chunk.prompt_progress {
            return self.progress(progress.total, now);
        }
        let absorbed = self.col.absorb(&chunk, now);
        let message = first_message(&chunk);
        let content = message.and_then(|m| m.content.as_ref()).map_or("", |t| t.as_str());
        let thinking = message.and_then(|m| m.reasoning_content.as_ref()).map_or("", |t| t.as_str());
        let out = &mut self.out;
        match self.opts.dialect {
            Dialect::OpenAi => {
                if self.opts.include_usage && chunk.usage.is_some() {
                    self.usage_event = Some(data.to_owned());
                }
                if !openai::usage_only(&chunk) {
                    openai::chunk(out, data, &chunk, &self.model, self.opts.include_usage);
                }
            }
            Dialect::OllamaChat | Dialect::OllamaGenerate => {
                let generate = self.opts.dialect == Dialect::OllamaGenerate;
                // the tokens' logprobs go with the object that carries their text
                let logprobs = first_logprobs(&chunk);
                let (on_thinking, on_content) =
                    if content.is_empty() { (logprobs, "") } else { ("", logprobs) };
                if !thinking.is_empty() {
                    ollama::delta(out, generate, &self.model, now, "", thinking, &[], on_thinking);
                }
                if !content.is_empty() {
                    ollama::delta(out, generate, &self.model, now, content, "", &[], on_content);
                }
                if !generate {
                    self.flush_ollama_tools(now);
                }
            }
            Dialect::Anthropic => {
                let empty = content.is_empty() && thinking.is_empty() && absorbed.tool_slots.is_empty();
                if empty && self.prompt_hint == 0 && self.opts.prefill.is_some() {
                    // answering a prefill, llama-server sends its role-only first chunk before its
                    // prompt report: `message_start` waits for that (or for the first output), so it
                    // carries the prompt's size
                    return;
                }
                self.start_anthropic(now);
                if !thinking.is_empty() {
                    self.anthropic.thinking(&mut self.out, thinking);
                }
                if !content.is_empty() {
                    self.anthropic.text(&mut self.out, content);
                }
                let calls = &self.col.tools.calls;
                self.anthropic.tools(&mut self.out, calls, &absorbed.tool_slots, &self.message_id);
            }
            Dialect::Responses => {
                let head = head(&self.message_id, self.col.start_ns, &self.model, &self.opts.echo);
                let stream = &mut self.responses;
                if !stream.started {
                    stream.start(out, &head);
                }
                let calls = &self.col.tools.calls;
                if !thinking.is_empty() {
                    stream.reasoning(out, thinking, calls, &head);
                }
                if !content.is_empty() {
                    stream.text(out, content, calls, &head);
                }
                stream.tools(out, calls, &absorbed.tool_slots, &head);
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn bad_chunk(&mut self, data: &str, err: &str) {
        self.col.errors.push(format!("engine chunk is not a chat completion chunk: {err}"));
        if self.opts.dialect == Dialect::OpenAi {
            match self.opts.redact.as_deref().filter(|secret| data.contains(secret)) {
                Some(secret) => openai::raw(&mut self.out, &data.replace(secret, REDACTED)),
                None => openai::raw(&mut self.out, data),
            }
        }
    }

    /// A prompt-processing report: no output of its own (the gateway asks for it only to learn
    /// the prompt's size), but Anthropic's `message_start` can go out now, with `input_tokens`.
    #[cold]
    fn progress(&mut self, total: u64, now: u64) {
        if total > 0 {
            self.prompt_hint = total;
        }
        if self.opts.dialect == Dialect::Anthropic {
            self.start_anthropic(now);
        }
    }

    fn start_anthropic(&mut self, now: u64) {
        if !self.anthropic.started {
            let hint = self.prompt_hint;
            self.anthropic.start(&mut self.out, &self.message_id, &self.model, hint);
            self.last_output_ns = now;
        }
    }

    fn flush_ollama_tools(&mut self, now: u64) {
        let ready = self.col.tools.complete_count();
        if ready > self.ollama_sent {
            let calls = &self.col.tools.calls[self.ollama_sent..ready];
            ollama::delta(&mut self.out, false, &self.model, now, "", "", calls, "");
            self.ollama_sent = ready;
        }
    }

    fn keep_alive(&mut self, now: u64) {
        if !self.out.is_empty() {
            self.last_output_ns = now;
        } else if self.opts.dialect == Dialect::Anthropic
            && self.anthropic.started
            && !self.closed
            && now.saturating_sub(self.last_output_ns) >= PING_AFTER_NS
        {
            anthropic::ping(&mut self.out);
            self.last_output_ns = now;
        }
    }

    #[cold]
    fn engine_error(&mut self, err: &EngineError, now: u64) {
        let redacted = self.opts.redact.as_deref().map(|secret| err.redacted(secret));
        let err = redacted.as_ref().unwrap_or(err);
        self.col.engine_error(err);
        self.fail(err, now);
    }

    /// The normal end; an end before any finish reason or `[DONE]` is reported as an error.
    fn close(&mut self, now: u64) {
        if self.col.finish_reason.is_none() && !self.saw_done {
            let err =
                EngineError::new("engine stream ended before the response was complete", "upstream_error");
            self.col.errors.push(err.message.clone());
            return self.fail(&err, now);
        }
        self.closed = true;
        self.col.tools.complete_all();
        self.col.tools.validate(&mut self.col.errors);
        let hint = self.prompt_hint;
        match self.opts.dialect {
            Dialect::OpenAi => {
                if let Some(data) = self.usage_event.take() {
                    let total = (self.col.usage_reports > 1).then(|| self.col.usage()).flatten();
                    openai::usage_event(&mut self.out, &data, &self.model, total);
                }
                openai::done(&mut self.out)
            }
            Dialect::OllamaChat | Dialect::OllamaGenerate => {
                let generate = self.opts.dialect == Dialect::OllamaGenerate;
                if !generate {
                    self.flush_ollama_tools(now);
                }
                let col = &self.col;
                let start = col.start_ns;
                let first = col.first_token_ns.unwrap_or(now);
                let metrics = Metrics {
                    total_duration: self.opts.load_duration_ns.saturating_add(now.saturating_sub(start)),
                    load_duration: self.opts.load_duration_ns,
                    prompt_eval_count: col.prompt_tokens(hint),
                    prompt_eval_duration: first.saturating_sub(start),
                    eval_count: col.completion_tokens(),
                    eval_duration: col.last_token_ns.unwrap_or(first).saturating_sub(first),
                };
                let reason = ollama::done_reason(col.finish_reason.as_deref());
                ollama::final_object(
                    &mut self.out,
                    generate,
                    &self.model,
                    now,
                    "",
                    "",
                    &[],
                    "",
                    reason,
                    &metrics,
                    true,
                );
            }
            Dialect::Anthropic => {
                self.start_anthropic(now);
                self.anthropic.finish(&mut self.out, &self.col, hint);
            }
            Dialect::Responses => {
                let head = head(&self.message_id, self.col.start_ns, &self.model, &self.opts.echo);
                if !self.responses.started {
                    self.responses.start(&mut self.out, &head);
                }
                self.responses.finish(&mut self.out, &self.col, hint, &head);
            }
        }
    }

    /// The abnormal end: the dialect's in-stream error.
    fn fail(&mut self, err: &EngineError, _now: u64) {
        self.closed = true;
        self.col.tools.complete_all();
        self.col.tools.validate(&mut self.col.errors);
        match self.opts.dialect {
            Dialect::OpenAi => openai::error_event(&mut self.out, err),
            Dialect::OllamaChat | Dialect::OllamaGenerate => ollama::error(&mut self.out, &err.message, true),
            Dialect::Anthropic => {
                self.anthropic.close_block(&mut self.out);
                anthropic::error_event(&mut self.out, err);
            }
            Dialect::Responses => {
                let head = head(&self.message_id, self.col.start_ns, &self.model, &self.opts.echo);
                self.responses.fail(&mut self.out, &self.col, err, &head);
            }
        }
    }
}
