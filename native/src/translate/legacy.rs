//! OpenAI's legacy completions logprobs.
//!
//! llama-server's `/v1/completions` gives a text choice's logprobs in the chat shape
//! (`{"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}`), where OpenAI's
//! completions API (and clients typed on it) has `{"tokens", "token_logprobs", "top_logprobs",
//! "text_offset"}`. This module owns that reshaping, for chunks and whole bodies, with each
//! choice's text offsets running across a stream. It touches nothing else in a chunk.

use serde_json::{Map, Value};

/// Each text choice's offset so far (characters of its text before the next token).
#[derive(Debug, Default)]
pub struct Offsets(Vec<u64>);

impl Offsets {
    fn next(&mut self, index: usize) -> &mut u64 {
        if self.0.len() <= index {
            self.0.resize(index + 1, 0);
        }
        &mut self.0[index]
    }
}

/// Whether `data` may hold a text choice with chat-shaped logprobs (a cheap test before parsing).
#[inline]
pub fn may_need(data: &str) -> bool {
    data.contains("\"logprobs\":{") && data.contains("\"text\"")
}

/// `data` with every text choice's chat-shaped logprobs in the legacy shape; None when none has any.
pub fn reshape(data: &str, offsets: &mut Offsets) -> Option<String> {
    let mut value: Value = serde_json::from_str(data).ok()?;
    let mut changed = false;
    for choice in value.get_mut("choices")?.as_array_mut()? {
        let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        if choice.get("text").is_none_or(|t| !t.is_string()) {
            continue;
        }
        let Some(entries) = choice.pointer("/logprobs/content").and_then(Value::as_array) else { continue };
        let legacy = legacy(entries, offsets.next(index.min(1 << 16)));
        choice["logprobs"] = legacy;
        changed = true;
    }
    changed.then(|| value.to_string())
}

fn legacy(entries: &[Value], offset: &mut u64) -> Value {
    let (mut tokens, mut logprobs, mut tops, mut offsets) = (vec![], vec![], vec![], vec![]);
    for entry in entries {
        let token = entry.get("token").and_then(Value::as_str).unwrap_or("");
        tokens.push(Value::from(token));
        logprobs.push(entry.get("logprob").cloned().unwrap_or(Value::Null));
        if entry.get("top_logprobs").is_some_and(Value::is_null) {
            // a token with no alternatives to give (a scored prompt's first: OpenAI's null)
            tops.push(Value::Null);
        } else {
            let mut top = Map::new();
            for alt in entry.get("top_logprobs").and_then(Value::as_array).into_iter().flatten() {
                if let Some(t) = alt.get("token").and_then(Value::as_str) {
                    top.insert(t.to_owned(), alt.get("logprob").cloned().unwrap_or(Value::Null));
                }
            }
            tops.push(Value::Object(top));
        }
        offsets.push(Value::from(*offset));
        *offset += token.chars().count() as u64;
    }
    let mut out = Map::new();
    out.insert("tokens".to_owned(), Value::Array(tokens));
    out.insert("token_logprobs".to_owned(), Value::Array(logprobs));
    out.insert("top_logprobs".to_owned(), Value::Array(tops));
    out.insert("text_offset".to_owned(), Value::Array(offsets));
    Value::Object(out)
}

/// `data` (a chunk or body) with each token's `top_logprobs` cut: an empty list for an OpenAI
/// client (`openai`), which the API sends at top_logprobs 0, else no member at all (Ollama's
/// shape then); None when nothing changes.
pub fn without_alternatives(data: &str, openai: bool) -> Option<String> {
    let mut value: Value = serde_json::from_str(data).ok()?;
    let mut changed = false;
    for choice in value.get_mut("choices")?.as_array_mut()?.iter_mut() {
        let entries = choice.get_mut("logprobs").and_then(|l| l.get_mut("content"));
        for entry in entries.and_then(Value::as_array_mut).into_iter().flatten() {
            let Some(entry) = entry.as_object_mut() else { continue };
            if openai {
                if let Some(tops) = entry.get_mut("top_logprobs") {
                    changed |= tops.as_array().is_none_or(|a| !a.is_empty());
                    *tops = Value::Array(Vec::new());
                }
            } else {
                changed |= entry.remove("top_logprobs").is_some();
            }
        }
    }
    if changed {
        serde_json::to_string(&value).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{may_need, reshape, Offsets};

    #[test]
    fn text_choices_get_the_legacy_shape_with_running_offsets() {
        let entry = |t: &str, lp: f64| {
            format!(
                r#"{{"id":1,"token":"{t}","bytes":[],"logprob":{lp},"top_logprobs":[{{"id":1,"token":"{t}","bytes":[],"logprob":{lp}}}]}}"#
            )
        };
        let chunk = |t: &str| {
            format!(
                r#"{{"choices":[{{"text":"{t}","index":0,"logprobs":{{"content":[{}]}}}}],"object":"text_completion"}}"#,
                entry(t, -0.5)
            )
        };
        let mut offsets = Offsets::default();
        let first = chunk("Hé");
        assert!(may_need(&first));
        let got: serde_json::Value = serde_json::from_str(&reshape(&first, &mut offsets).unwrap()).unwrap();
        assert_eq!(
            got["choices"][0]["logprobs"],
            serde_json::json!({"tokens": ["Hé"], "token_logprobs": [-0.5], "top_logprobs": [{"Hé": -0.5}],
                               "text_offset": [0]})
        );
        let got: serde_json::Value =
            serde_json::from_str(&reshape(&chunk("y"), &mut offsets).unwrap()).unwrap();
        assert_eq!(got["choices"][0]["logprobs"]["text_offset"], serde_json::json!([2]));
        let chat = r#"{"choices":[{"index":0,"delta":{"content":"x"},"logprobs":{"content":[]}}]}"#;
        assert_eq!(reshape(chat, &mut offsets), None);
        assert!(!may_need(r#"{"choices":[{"text":"x","index":0,"logprobs":null}]}"#));
        // a token whose alternatives are null keeps them null (an echoed prompt's first token)
        let first = r#"{"choices":[{"text":"Hi","index":0,"logprobs":{"content":[{"token":"Hi","logprob":null,"top_logprobs":null}]}}]}"#;
        let got: serde_json::Value =
            serde_json::from_str(&reshape(first, &mut Offsets::default()).unwrap()).unwrap();
        assert_eq!(
            got["choices"][0]["logprobs"],
            serde_json::json!({"tokens": ["Hi"], "token_logprobs": [null], "top_logprobs": [null],
                               "text_offset": [0]})
        );
    }

    #[test]
    fn alternatives_are_cut_in_each_dialects_shape() {
        let chunk = r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"id":1,"token":"Hi","logprob":-0.5,"top_logprobs":[{"id":1,"token":"Hi","logprob":-0.5}]}]}}]}"#;
        let openai = super::without_alternatives(chunk, true).unwrap();
        assert!(openai.contains(r#""top_logprobs":[]"#) && openai.contains(r#""logprob":-0.5"#), "{openai}");
        let ollama = super::without_alternatives(chunk, false).unwrap();
        assert!(!ollama.contains("top_logprobs") && ollama.contains(r#""token":"Hi""#), "{ollama}");
        assert_eq!(super::without_alternatives(&openai, true), None); // nothing left to cut
        assert_eq!(super::without_alternatives(r#"{"choices":[{"index":0}]}"#, true), None);
    }
}
