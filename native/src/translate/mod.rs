//! Response translation: the engine's OpenAI-dialect responses to the client's dialect.
//!
//! Owns turning engine SSE streams (chunk by chunk) and whole bodies into OpenAI (Chat
//! Completions and the Responses API), Ollama and Anthropic client bytes, merging tool-call fragments, and the end-of-response summary. The
//! engine's format is read in `engine`; each dialect writes in its own module (`openai`,
//! `responses`, `ollama`, `anthropic`) for streams and bodies alike; `stream` and `whole` drive them;
//! `python` is the surface. It must not do I/O or log: bytes in, bytes out.

mod anthropic;
mod clock;
mod collect;
mod engine;
mod forced;
mod json;
mod legacy;
mod ollama;
mod openai;
mod prefill;
mod python;
mod responses;
mod stream;
#[cfg(test)]
mod tests;
mod tools;
mod whole;

pub use collect::{GapStats, Summary};
pub use python::{init_pymodule, StreamTranslator};
pub use stream::{Dialect, Options, Translator, PING_AFTER_NS};
pub use tools::ToolCall;
pub use whole::{translate_whole, WholeOptions};
