//! The engine's wire format (OpenAI chat completions, as llama.cpp's server speaks it), read with
//! serde into borrowed views.
//!
//! Owns which engine fields the translators look at; everything else is skipped unparsed.
//! Strings borrow from the event's data unless they hold escapes. It must not decide what a
//! field means for a client dialect.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// A JSON string, borrowed from the input when it has no escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor<'a>(PhantomData<&'a ()>);

        impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
            type Value = Text<'a>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }

        deserializer.deserialize_str(TextVisitor(PhantomData))
    }
}

impl Text<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One streamed `chat.completion.chunk`, or a whole `chat.completion` body.
#[derive(Debug, Deserialize)]
pub struct Completion<'a> {
    #[serde(default, borrow)]
    pub choices: Option<Vec<Choice<'a>>>,
    /// `usage`, read, and its raw JSON: the OpenAI pass-through cuts it out of a chunk that also
    /// carries choices (llama.cpp's `/v1/completions` stream) when the client did not ask for usage.
    #[serde(default, borrow, deserialize_with = "usage_field")]
    pub usage: Option<UsageField<'a>>,
    /// The raw `"model"` value, located in the input so it can be rewritten in place.
    #[serde(default, borrow)]
    pub model: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub error: Option<&'a RawValue>,
    #[serde(default)]
    pub timings: Option<Timings>,
    /// llama.cpp's prompt-processing report (sent when the request sets `return_progress`):
    /// these chunks carry no output, only the prompt's size before its first token.
    #[serde(default)]
    pub prompt_progress: Option<Progress>,
    /// llama.cpp's `__verbose` object (sent when the request sets `verbose`; `response_fields`
    /// trims it), kept raw: `verbose_stop_word` reads the stop from it, and the OpenAI
    /// pass-through cuts it out. A `null` value is kept too, so that it is cut as well.
    #[serde(default, borrow, rename = "__verbose", deserialize_with = "some_raw")]
    pub verbose: Option<&'a RawValue>,
}

/// A chunk's `usage`: the counts and where they are in the chunk.
#[derive(Debug, Clone, Copy)]
pub struct UsageField<'a> {
    pub value: Usage,
    pub raw: &'a RawValue,
}

fn usage_field<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<UsageField<'a>>, D::Error> {
    match <Option<&'a RawValue>>::deserialize(deserializer)? {
        None => Ok(None),
        Some(raw) => serde_json::from_str::<Usage>(raw.get())
            .map(|value| Some(UsageField { value, raw }))
            .map_err(|e| serde::de::Error::custom(format!("usage: {e}"))),
    }
}

fn some_raw<'de: 'a, 'a, D: Deserializer<'de>>(deserializer: D) -> Result<Option<&'a RawValue>, D::Error> {
    <&'a RawValue>::deserialize(deserializer).map(Some)
}

/// The stop string a `__verbose` object names: its `stopping_word` when `stop_type` is `"word"`
/// (llama.cpp's other stop types are `none`, `eos` and `limit`). Anything else, a value that is
/// not an object or a field of another type included, names none.
pub fn verbose_stop_word(raw: &RawValue) -> Option<Text<'_>> {
    #[derive(Deserialize)]
    struct Verbose<'a> {
        #[serde(default, borrow)]
        stop_type: Option<StopWord<'a>>,
        #[serde(default, borrow)]
        stopping_word: Option<StopWord<'a>>,
    }
    if !raw.get().starts_with('{') {
        return None;
    }
    let verbose: Verbose<'_> = serde_json::from_str(raw.get()).ok()?;
    let word = verbose.stop_type?.0.filter(|t| t.as_str() == "word").and(verbose.stopping_word)?;
    word.0
}

#[derive(Debug, Deserialize)]
pub struct Choice<'a> {
    #[serde(default)]
    pub index: u32,
    #[serde(default, borrow)]
    pub delta: Option<Message<'a>>,
    #[serde(default, borrow)]
    pub message: Option<Message<'a>>,
    #[serde(default, borrow)]
    pub finish_reason: Option<Text<'a>>,
    /// The stop string that ended generation, where the engine reports one (`stop_reason` as
    /// vLLM writes it, `stopping_word` as llama.cpp's native endpoint does).
    #[serde(default, borrow, alias = "stopping_word")]
    pub stop_reason: Option<StopWord<'a>>,
    /// A text completion's (`/v1/completions`) output; read as the message content.
    #[serde(default, borrow)]
    pub text: Option<Text<'a>>,
    /// The sampled tokens' log-probabilities, when the request asked for them.
    #[serde(default, borrow)]
    pub logprobs: Option<Logprobs<'a>>,
}

/// A choice's `logprobs`: llama.cpp's `content` array (one entry per token: `token`, `logprob`,
/// `bytes`, `top_logprobs`) kept raw, for dialects that carry it on.
#[derive(Debug, Default, Deserialize)]
pub struct Logprobs<'a> {
    #[serde(default, borrow)]
    pub content: Option<&'a RawValue>,
}

impl<'a> Choice<'a> {
    /// Text completions carry `text` where chat carries a message: fold it into `delta` so every
    /// writer reads one shape.
    pub fn fold_text(&mut self) {
        if self.delta.is_none() && self.message.is_none() {
            if let Some(text) = self.text.take() {
                self.delta = Some(Message { content: Some(text), ..Message::default() });
            }
        }
    }
}

/// A stop word; engines that report a stop token id instead give no word.
#[derive(Debug)]
pub struct StopWord<'a>(pub Option<Text<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for StopWord<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either<'a> {
            #[serde(borrow)]
            Word(Text<'a>),
            Other(serde::de::IgnoredAny),
        }
        Ok(match Either::deserialize(deserializer)? {
            Either::Word(w) => StopWord(Some(w)),
            Either::Other(_) => StopWord(None),
        })
    }
}

/// A streamed `delta` or a whole `message`.
#[derive(Debug, Default, Deserialize)]
pub struct Message<'a> {
    #[serde(default, borrow)]
    pub content: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub reasoning_content: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub tool_calls: Option<Vec<ToolFragment<'a>>>,
}

/// One `tool_calls` entry: a fragment in a stream, a whole call in a body.
#[derive(Debug, Default, Deserialize)]
pub struct ToolFragment<'a> {
    #[serde(default)]
    pub index: Option<u32>,
    #[serde(default, borrow)]
    pub id: Option<Text<'a>>,
    #[serde(default, borrow, rename = "type")]
    pub kind: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub function: Option<FunctionFragment<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct FunctionFragment<'a> {
    #[serde(default, borrow)]
    pub name: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub arguments: Option<Text<'a>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    /// `prompt_tokens_details.cached_tokens`: the prompt tokens the engine's cache held (0 when the
    /// engine does not say; `null` details are none).
    #[serde(default, rename = "prompt_tokens_details", deserialize_with = "cached_tokens")]
    pub cached_tokens: u64,
}

fn cached_tokens<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    struct Details {
        #[serde(default)]
        cached_tokens: Option<u64>,
    }
    Ok(Option::<Details>::deserialize(deserializer)?.and_then(|d| d.cached_tokens).unwrap_or(0))
}

/// llama.cpp's per-response timings, used for whole bodies' Ollama durations.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct Timings {
    #[serde(default)]
    pub prompt_ms: Option<f64>,
    #[serde(default)]
    pub predicted_ms: Option<f64>,
}

/// llama.cpp's `prompt_progress`: `total` is the prompt's token count, cached tokens included.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Progress {
    #[serde(default)]
    pub total: u64,
}

/// What a redacted credential is replaced with.
pub const REDACTED: &str = "<redacted>";

/// An engine error as found in an `error` event or an `{"error": ...}` payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineError {
    pub message: String,
    pub kind: String,
    /// The raw JSON of the error's `code`, or `null`.
    pub code: String,
}

impl EngineError {
    /// Reads `{"error": {...}}`, `{"message": ..., "type": ..., "code": ...}` or any other text.
    pub fn parse(raw: &str) -> Self {
        #[derive(Deserialize)]
        struct Outer<'a> {
            #[serde(borrow)]
            error: &'a RawValue,
        }
        #[derive(Deserialize)]
        struct Inner<'a> {
            #[serde(default, borrow)]
            message: Option<Text<'a>>,
            #[serde(default, borrow, rename = "type")]
            kind: Option<Text<'a>>,
            #[serde(default, borrow)]
            code: Option<&'a RawValue>,
        }
        let body = serde_json::from_str::<Outer<'_>>(raw).map_or(raw, |o| o.error.get());
        match serde_json::from_str::<Inner<'_>>(body) {
            Ok(inner) => Self {
                message: inner.message.map_or_else(|| body.to_owned(), |m| m.0.into_owned()),
                kind: inner.kind.map_or_else(|| "server_error".to_owned(), |k| k.0.into_owned()),
                code: inner.code.map_or_else(|| "null".to_owned(), |c| c.get().to_owned()),
            },
            Err(_) => match serde_json::from_str::<Text<'_>>(body) {
                Ok(text) => Self::new(text.as_str(), "server_error"),
                Err(_) => Self::new(body, "server_error"),
            },
        }
    }

    pub fn new(message: &str, kind: &str) -> Self {
        Self { message: message.to_owned(), kind: kind.to_owned(), code: "null".to_owned() }
    }

    /// The error with every occurrence of `secret` (a credential the upstream may quote) replaced.
    pub fn redacted(&self, secret: &str) -> Self {
        Self {
            message: self.message.replace(secret, REDACTED),
            kind: self.kind.replace(secret, REDACTED),
            code: self.code.replace(secret, REDACTED),
        }
    }
}
