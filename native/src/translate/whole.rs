//! Whole (non-streamed) responses: an engine `chat.completion` body to the client's body.
//!
//! Owns choosing the dialect writer for a body and the durations a body carries (llama.cpp's
//! `timings`). The shapes themselves are the same writers the stream uses, so each dialect rule
//! exists once. It must not touch Python.

use super::anthropic;
use super::collect::{Collector, Summary};
use super::engine::{Completion, EngineError};
use super::json::str_literal;
use super::legacy;
use super::ollama::{self, Metrics};
use super::openai;
use super::prefill::Prefill;
use super::responses;
use super::stream::{first_logprobs, parse_object, rewrite};
use super::stream::{new_message_id, response_id, Dialect};

/// What the caller knows about a whole response.
#[derive(Debug, Clone)]
pub struct WholeOptions {
    pub dialect: Dialect,
    pub model: String,
    pub load_duration_ns: u64,
    pub message_id: Option<String>,
    pub total_duration_ns: u64,
    pub now_ns: u64,
    /// The assistant prefill the engine repeats at the start of its answer (see `prefill`).
    pub prefill: Option<String>,
    /// The client's `n` (see `Options::n`).
    pub n: u64,
    /// Responses API: see `Options::echo`.
    pub echo: Option<String>,
    /// See `Options::alternatives`.
    pub alternatives: bool,
}

fn ms_to_ns(ms: Option<f64>) -> u64 {
    // `as` saturates (negative and NaN become 0), as the oracle's max(0, int(...)) does.
    ms.map_or(0, |ms| (ms * 1e6) as u64)
}

/// Translates `body`; Err when it is not a UTF-8 JSON chat completion. An engine error body
/// becomes the dialect's error body, with the error in the summary.
pub fn translate_whole(opts: &WholeOptions, body: &[u8]) -> Result<(Vec<u8>, Summary), String> {
    let body = std::str::from_utf8(body).map_err(|e| format!("engine body is not UTF-8: {e}"))?;
    let mut prefill = Prefill::new(opts.prefill.clone(), opts.n);
    let mut offsets = legacy::Offsets::default();
    let rewritten = rewrite(body, opts.dialect, &mut prefill, &mut offsets, opts.alternatives);
    let body = rewritten.as_deref().unwrap_or(body);
    let completion: Completion<'_> =
        parse_object(body).map_err(|e| format!("engine body is not a JSON chat completion: {e}"))?;
    let model = str_literal(&opts.model);
    let now = opts.now_ns;
    let mut col = Collector::new(now, opts.n);
    let mut out = Vec::with_capacity(body.len() + 128);
    if completion.error.is_some() {
        let err = EngineError::parse(body);
        col.engine_error(&err);
        match opts.dialect {
            Dialect::OpenAi | Dialect::Responses => openai::error_object(&mut out, &err),
            Dialect::OllamaChat | Dialect::OllamaGenerate => ollama::error(&mut out, &err.message, false),
            Dialect::Anthropic => anthropic::error_object(&mut out, &err),
        }
        return Ok((out, whole_summary(&col)));
    }
    col.absorb(&completion, now);
    col.tools.complete_all();
    col.tools.validate(&mut col.errors);
    match opts.dialect {
        Dialect::OpenAi => openai::whole(&mut out, body, &completion, &model),
        Dialect::OllamaChat | Dialect::OllamaGenerate => {
            let generate = opts.dialect == Dialect::OllamaGenerate;
            let timings = completion.timings.unwrap_or_default();
            let metrics = Metrics {
                total_duration: opts.total_duration_ns,
                load_duration: opts.load_duration_ns,
                prompt_eval_count: col.prompt_tokens(0),
                prompt_eval_duration: ms_to_ns(timings.prompt_ms),
                eval_count: col.completion_tokens(),
                eval_duration: ms_to_ns(timings.predicted_ms),
            };
            let reason = ollama::done_reason(col.finish_reason.as_deref());
            let calls = if generate { &[][..] } else { &col.tools.calls[..] };
            let (text, thinking) = (&col.text, &col.reasoning);
            let logprobs = first_logprobs(&completion);
            ollama::final_object(
                &mut out, generate, &model, now, text, thinking, calls, logprobs, reason, &metrics, false,
            );
        }
        Dialect::Anthropic => {
            let message_id = opts.message_id.clone().unwrap_or_else(new_message_id);
            anthropic::whole(&mut out, &message_id, &model, &col, 0);
        }
        Dialect::Responses => {
            let id = response_id(opts.dialect, opts.message_id.as_ref());
            let head = responses::Head {
                id: &id,
                created_at: now / 1_000_000_000,
                model: &model,
                echo: opts.echo.as_deref().unwrap_or(""),
            };
            responses::whole(&mut out, &col, &head);
        }
    }
    Ok((out, whole_summary(&col)))
}

fn whole_summary(col: &Collector) -> Summary {
    let mut summary = col.summary();
    summary.ttft_ms = None;
    summary.tpot_ms = None;
    summary
}
