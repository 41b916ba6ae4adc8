//! What a response amounted to: assembled text, merged tool calls, finish reason, usage, timing
//! and errors, gathered the same way for every dialect and handed to Python once as the summary.
//!
//! Owns absorbing engine chunks into that record and the timing statistics (time to first token,
//! gaps between token-bearing chunks). It must not write client bytes.

use super::engine::{verbose_stop_word, Completion, EngineError, Usage};
use super::tools::{ToolCall, ToolMerger};

/// Statistics of the gaps between token-bearing chunks, in milliseconds (nearest-rank
/// percentiles).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GapStats {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// The end-of-response record.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub text: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    pub stop_sequence: Option<String>,
    pub usage: Option<Usage>,
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<GapStats>,
    pub chunks: u64,
    pub errors: Vec<String>,
    /// The engine's own error message, when it answered with an error object.
    pub engine_error: Option<String>,
    /// How many choices the response had (the highest choice index seen, plus one; 0 for none).
    pub choices: u64,
    /// How many usage reports `usage` adds up (llama-server reports each choice and each prompt of a
    /// stream on its own; a whole body carries one task's).
    pub usage_reports: u64,
    /// Chunks that carried text, reasoning or tool-call pieces: about the tokens generated, what a
    /// stream cut off before its usage report is charged.
    pub token_chunks: u64,
}

#[derive(Debug, Default)]
pub struct Collector {
    pub text: String,
    pub reasoning: String,
    pub tools: ToolMerger,
    pub finish_reason: Option<String>,
    pub stop_sequence: Option<String>,
    /// Every usage report added up (the prompt counted once per distinct prompt: see `usage`).
    usage_sum: Option<Usage>,
    pub usage_reports: u64,
    /// The client's `n`: each choice of one prompt reports that prompt again.
    per_prompt: u64,
    choices: u64,
    pub chunks: u64,
    pub token_chunks: u64,
    /// Chunks that carried reasoning: about the reasoning tokens (the Responses API reports them).
    pub reasoning_chunks: u64,
    pub errors: Vec<String>,
    pub engine_error: Option<String>,
    pub start_ns: u64,
    pub first_token_ns: Option<u64>,
    pub last_token_ns: Option<u64>,
    gaps_ns: Vec<u64>,
    other_choices_reported: bool,
}

/// What one chunk carried for choice 0, for the dialect writers.
#[derive(Debug, Default)]
pub struct Absorbed {
    /// Slots of the tool calls its fragments went to, in order.
    pub tool_slots: Vec<usize>,
    pub finished: bool,
}

impl Collector {
    /// A collector for a response whose clock started at `start_ns`, to a request for `n` choices
    /// of each prompt.
    pub fn new(start_ns: u64, n: u64) -> Self {
        Self { start_ns, per_prompt: n.max(1), ..Self::default() }
    }

    /// Records one engine chunk (streamed delta or whole message) arriving at `now`.
    pub fn absorb(&mut self, chunk: &Completion<'_>, now: u64) -> Absorbed {
        let mut absorbed = Absorbed::default();
        self.chunks += 1;
        if let Some(usage) = chunk.usage {
            let sum = self.usage_sum.get_or_insert_with(Usage::default);
            sum.prompt_tokens = sum.prompt_tokens.saturating_add(usage.value.prompt_tokens);
            sum.completion_tokens = sum.completion_tokens.saturating_add(usage.value.completion_tokens);
            sum.cached_tokens = sum.cached_tokens.saturating_add(usage.value.cached_tokens);
            self.usage_reports += 1;
        }
        let mut tokens = false;
        for choice in chunk.choices.iter().flatten() {
            self.choices = self.choices.max(u64::from(choice.index) + 1);
            if choice.index != 0 {
                if !std::mem::replace(&mut self.other_choices_reported, true) {
                    self.errors.push("only choice 0 is translated; other choices were ignored".to_owned());
                }
                continue;
            }
            for (message, whole) in [(&choice.delta, false), (&choice.message, true)] {
                let Some(message) = message else { continue };
                if let Some(text) = message.reasoning_content.as_ref().filter(|t| !t.0.is_empty()) {
                    self.reasoning.push_str(text.as_str());
                    self.reasoning_chunks += 1;
                    tokens = true;
                }
                if let Some(text) = message.content.as_ref().filter(|t| !t.0.is_empty()) {
                    self.text.push_str(text.as_str());
                    tokens = true;
                }
                for (position, frag) in message.tool_calls.iter().flatten().enumerate() {
                    let default_index = whole.then(|| u32::try_from(position).unwrap_or(u32::MAX));
                    absorbed.tool_slots.push(self.tools.merge(frag, default_index, &mut self.errors));
                    tokens = true;
                }
            }
            if let Some(reason) = &choice.finish_reason {
                self.finish_reason = Some(reason.as_str().to_owned());
                self.tools.complete_all();
                absorbed.finished = true;
            }
            if let Some(word) = choice.stop_reason.as_ref().and_then(|w| w.0.as_ref()) {
                self.stop_sequence = Some(word.as_str().to_owned());
            }
        }
        // llama.cpp names the stop word only in `__verbose`, on one chunk of its final result
        // (the first of them, a content chunk or the finish chunk) or in a whole body.
        if let Some(word) = chunk.verbose.and_then(verbose_stop_word) {
            self.stop_sequence = Some(word.as_str().to_owned());
        }
        if tokens {
            self.token_chunks += 1;
            if let Some(last) = self.last_token_ns {
                self.gaps_ns.push(now.saturating_sub(last));
            } else {
                self.first_token_ns = Some(now);
            }
            self.last_token_ns = Some(now);
        }
        absorbed
    }

    pub fn engine_error(&mut self, err: &EngineError) {
        self.errors.push(format!("engine error: {}", err.message));
        self.engine_error.get_or_insert_with(|| err.message.clone());
    }

    /// The engine's usage: every report's completion tokens added up, and each distinct prompt's
    /// tokens once (the `n` reports of one prompt's choices count it `n` times).
    pub fn usage(&self) -> Option<Usage> {
        let per_prompt = if self.usage_reports >= self.per_prompt { self.per_prompt } else { 1 };
        self.usage_sum.map(|u| Usage {
            prompt_tokens: u.prompt_tokens / per_prompt,
            cached_tokens: u.cached_tokens / per_prompt,
            ..u
        })
    }

    /// Prompt tokens: the engine's count, else the caller's hint.
    pub fn prompt_tokens(&self, hint: u64) -> u64 {
        self.usage().map_or(hint, |u| u.prompt_tokens)
    }

    /// Completion tokens: the engine's count, else the number of token-bearing chunks.
    pub fn completion_tokens(&self) -> u64 {
        self.usage().map_or(self.token_chunks, |u| u.completion_tokens)
    }

    pub fn summary(&self) -> Summary {
        Summary {
            text: self.text.clone(),
            reasoning: self.reasoning.clone(),
            tool_calls: self.tools.calls.clone(),
            finish_reason: self.finish_reason.clone(),
            stop_sequence: self.stop_sequence.clone(),
            usage: self.usage(),
            ttft_ms: self.first_token_ns.map(|t| ms(t.saturating_sub(self.start_ns))),
            tpot_ms: gap_stats(&self.gaps_ns),
            chunks: self.chunks,
            errors: self.errors.clone(),
            engine_error: self.engine_error.clone(),
            choices: self.choices,
            usage_reports: self.usage_reports,
            token_chunks: self.token_chunks,
        }
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn gap_stats(gaps: &[u64]) -> Option<GapStats> {
    if gaps.is_empty() {
        return None;
    }
    let mut sorted = gaps.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    let rank = |p: usize| sorted[(p * n).div_ceil(100).max(1) - 1];
    let sum: u128 = sorted.iter().map(|&g| u128::from(g)).sum();
    Some(GapStats {
        count: n,
        mean: sum as f64 / n as f64 / 1e6,
        p50: ms(rank(50)),
        p90: ms(rank(90)),
        p99: ms(rank(99)),
        max: ms(sorted[n - 1]),
    })
}
