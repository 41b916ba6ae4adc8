//! A forced tool call, streamed.
//!
//! When a chat template cannot emit tool calls, the gateway forces one by constraining the
//! generation to the JSON `{"name": <tool>, "arguments": <its parameters>}`, which the engine
//! streams as content. This module turns that content, chunk by chunk, into the tool-call
//! fragments llama-server streams for a template that can (`tool_calls[0]` with the call's id
//! and name first, then `function.arguments` pieces), so every dialect's writer relays the call
//! as it is generated. The call's head goes out with the first chunk when only one tool can be
//! called (the grammar fixes the name), else as soon as the name is complete; the wrapper's own
//! text never reaches the client. It must not touch anything but choice 0's delta and finish.

use serde_json::{json, Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the arguments' value: the wrapper's head is being read.
    Head,
    /// Inside the arguments' value.
    Arguments,
    /// After it: the wrapper's tail, dropped.
    Tail,
}

/// One forced call's progress through the constrained output.
#[derive(Debug)]
pub struct ForcedCall {
    id: String,
    name: Option<String>,
    head_sent: bool,
    phase: Phase,
    /// The head's text so far (while `Phase::Head`).
    head: String,
    started: bool,
    bracketed: bool,
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl ForcedCall {
    /// A call whose tool is one of `names` (the name is known from the start when there is one).
    pub fn new(names: &[String], id: String) -> Self {
        Self {
            id,
            name: (names.len() == 1).then(|| names[0].clone()),
            head_sent: false,
            phase: Phase::Head,
            head: String::new(),
            started: false,
            bracketed: false,
            depth: 0,
            in_string: false,
            escaped: false,
        }
    }

    /// Whether the arguments' value is complete.
    pub fn complete(&self) -> bool {
        self.phase == Phase::Tail
    }

    /// The arguments text in `content` (what follows the head, up to the value's end).
    fn arguments(&mut self, content: &str) -> String {
        match self.phase {
            Phase::Tail => String::new(),
            Phase::Arguments => self.scan(content),
            Phase::Head => {
                self.head.push_str(content);
                match parse_head(&self.head) {
                    Head::Incomplete => String::new(),
                    Head::Named(name) => {
                        self.name.get_or_insert(name); // the head can go out before the rest of it
                        String::new()
                    }
                    Head::Broken => {
                        self.phase = Phase::Tail; // not the JSON asked for: nothing of it is a call
                        String::new()
                    }
                    Head::Done(name, used) => {
                        self.name.get_or_insert(name);
                        let tail = self.head.split_off(used);
                        self.head.clear();
                        self.phase = Phase::Arguments;
                        self.scan(&tail)
                    }
                }
            }
        }
    }

    /// The part of `text` that belongs to the arguments' value, the scan state carried on.
    fn scan(&mut self, text: &str) -> String {
        let mut piece = String::new();
        for c in text.chars() {
            if self.phase != Phase::Arguments {
                break;
            }
            if !self.started {
                if c.is_whitespace() {
                    continue;
                }
                self.started = true;
                self.bracketed = c == '{' || c == '[';
            }
            if self.in_string {
                piece.push(c);
                if self.escaped {
                    self.escaped = false;
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == '"' {
                    self.in_string = false;
                }
                continue;
            }
            match c {
                '{' | '[' => self.depth += 1,
                '}' | ']' if self.depth > 0 => self.depth -= 1,
                '"' => self.in_string = true,
                _ => {}
            }
            if self.depth == 0 && !self.in_string {
                if self.bracketed {
                    piece.push(c);
                    self.phase = Phase::Tail;
                    break;
                }
                if c == ',' || c == '}' || c.is_whitespace() {
                    self.phase = Phase::Tail; // a scalar's end: the wrapper's text, not the value's
                    break;
                }
            }
            piece.push(c);
        }
        piece
    }

    /// `data` (an engine chunk) with choice 0's content turned into tool-call fragments and a
    /// finished call's `stop` into `tool_calls`; None when the chunk has no choice 0, or is a
    /// prompt-processing report (relayed to no client: the head waits for the next chunk).
    pub fn rewrite(&mut self, data: &str) -> Option<String> {
        let mut value: Value = serde_json::from_str(data).ok()?;
        if value.get("prompt_progress").is_some() {
            return None;
        }
        let choices = value.get_mut("choices")?.as_array_mut()?;
        let choice = choices.iter_mut().find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)?;
        let choice = choice.as_object_mut()?;
        let delta = choice.entry("delta").or_insert_with(|| Value::Object(Map::new()));
        let delta = delta.as_object_mut()?;
        let content = match delta.remove("content") {
            Some(Value::String(text)) => text,
            _ => String::new(),
        };
        let pieces = self.arguments(&content);
        let mut fragment = Map::new();
        fragment.insert("index".to_owned(), json!(0));
        if !self.head_sent {
            if let Some(name) = &self.name {
                fragment.insert("id".to_owned(), json!(self.id));
                fragment.insert("type".to_owned(), json!("function"));
                fragment.insert("function".to_owned(), json!({"name": name, "arguments": pieces}));
                self.head_sent = true;
                delta.insert("tool_calls".to_owned(), Value::Array(vec![Value::Object(fragment)]));
            }
        } else if !pieces.is_empty() {
            fragment.insert("function".to_owned(), json!({"arguments": pieces}));
            delta.insert("tool_calls".to_owned(), Value::Array(vec![Value::Object(fragment)]));
        }
        if self.complete() && choice.get("finish_reason").and_then(Value::as_str) == Some("stop") {
            choice.insert("finish_reason".to_owned(), json!("tool_calls"));
        }
        Some(value.to_string())
    }
}

enum Head {
    Incomplete,
    /// The name is complete, what follows it not yet.
    Named(String),
    Broken,
    /// The name and how many bytes the head took (up to the arguments' value, its leading space
    /// included as far as it came).
    Done(String, usize),
}

/// Reads `{ "name" : "<name>" , "arguments" :` (JSON whitespace anywhere between) from `text`.
fn parse_head(text: &str) -> Head {
    let bytes = text.as_bytes();
    let mut at = 0;
    let skip = |at: &mut usize| {
        while *at < bytes.len() && matches!(bytes[*at], b' ' | b'\t' | b'\n' | b'\r') {
            *at += 1;
        }
    };
    // each literal must match as far as the text goes
    let expect = |at: &mut usize, lit: &str| -> Option<bool> {
        let have = &bytes[*at..];
        let n = have.len().min(lit.len());
        if have[..n] != lit.as_bytes()[..n] {
            return None; // broken
        }
        *at += n;
        Some(n == lit.len())
    };
    for lit in ["{", "\"name\"", ":"] {
        skip(&mut at);
        match expect(&mut at, lit) {
            None => return Head::Broken,
            Some(false) => return Head::Incomplete,
            Some(true) => {}
        }
    }
    skip(&mut at);
    if at >= bytes.len() {
        return Head::Incomplete;
    }
    if bytes[at] != b'"' {
        return Head::Broken;
    }
    let start = at;
    at += 1;
    let mut escaped = false;
    loop {
        if at >= bytes.len() {
            return Head::Incomplete;
        }
        let b = bytes[at];
        at += 1;
        if escaped {
            escaped = false;
        } else if b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            break;
        }
    }
    let Ok(name) = serde_json::from_str::<String>(&text[start..at]) else { return Head::Broken };
    for lit in [",", "\"arguments\"", ":"] {
        skip(&mut at);
        match expect(&mut at, lit) {
            None => return Head::Broken,
            Some(false) => return Head::Named(name),
            Some(true) => {}
        }
    }
    Head::Done(name, at)
}

#[cfg(test)]
mod tests {
    use super::ForcedCall;
    use serde_json::Value;

    fn chunk(content: &str, finish: Option<&str>) -> String {
        serde_json::json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]})
            .to_string()
    }

    fn fragments(call: &mut ForcedCall, pieces: &[&str]) -> Vec<Value> {
        let last = pieces.len() - 1;
        pieces
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let out = call.rewrite(&chunk(p, (i == last).then_some("stop"))).unwrap();
                serde_json::from_str(&out).unwrap()
            })
            .collect()
    }

    fn arguments(chunks: &[Value]) -> String {
        chunks
            .iter()
            .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0/function/arguments"))
            .map(|a| a.as_str().unwrap().to_owned())
            .collect()
    }

    const PIECES: &[&str] = &[
        "{\"",
        "name",
        "\":",
        " \"get",
        "_weather",
        "\",",
        " \"arguments",
        "\": {\"",
        "city\": \"",
        "P}a\\\"ris",
        "\"}",
        "}",
    ];

    #[test]
    fn one_candidate_sends_the_head_with_the_first_chunk() {
        let mut call = ForcedCall::new(&["get_weather".to_owned()], "call_1".to_owned());
        let out = fragments(&mut call, PIECES);
        let head = out[0].pointer("/choices/0/delta/tool_calls/0").unwrap();
        assert_eq!(head["id"], "call_1");
        assert_eq!(head["function"]["name"], "get_weather");
        assert_eq!(arguments(&out), "{\"city\": \"P}a\\\"ris\"}");
        assert!(out.iter().all(|c| c.pointer("/choices/0/delta/content").is_none()));
        assert_eq!(out[out.len() - 1]["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn several_candidates_send_the_head_once_the_name_is_complete() {
        let mut call = ForcedCall::new(&["a".to_owned(), "get_weather".to_owned()], "call_2".to_owned());
        let out = fragments(&mut call, PIECES);
        let first = out.iter().position(|c| c.pointer("/choices/0/delta/tool_calls").is_some()).unwrap();
        assert_eq!(first, 5); // the chunk that closed the name
        assert_eq!(out[first]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "get_weather");
        assert_eq!(arguments(&out), "{\"city\": \"P}a\\\"ris\"}");
    }

    #[test]
    fn a_prompt_report_is_left_alone_and_the_head_goes_with_the_next_chunk() {
        let mut call = ForcedCall::new(&["f".to_owned()], "call_4".to_owned());
        let report = r#"{"choices":[{"index":0,"delta":{}}],"prompt_progress":{"total":9,"processed":9}}"#;
        assert!(call.rewrite(report).is_none());
        let out: Value = serde_json::from_str(&call.rewrite(&chunk("{\"", None)).unwrap()).unwrap();
        assert_eq!(out["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "f");
    }

    #[test]
    fn a_call_cut_short_keeps_its_finish_and_the_arguments_so_far() {
        let mut call = ForcedCall::new(&["f".to_owned()], "call_3".to_owned());
        let out: Vec<Value> = ["{\"name\": \"f\", \"arguments\": {\"x\": [1, ", "2"]
            .iter()
            .enumerate()
            .map(|(i, p)| {
                serde_json::from_str(&call.rewrite(&chunk(p, (i == 1).then_some("length"))).unwrap()).unwrap()
            })
            .collect();
        assert_eq!(arguments(&out), "{\"x\": [1, 2");
        assert_eq!(out[1]["choices"][0]["finish_reason"], "length");
        assert!(!call.complete());
    }
}
