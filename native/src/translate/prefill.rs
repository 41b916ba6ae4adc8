//! An assistant prefill the engine echoes back.
//!
//! A conversation that ends with an assistant message asks the model to continue that message.
//! llama-server (prefill_assistant, on by default) starts its answer's content with the prefill's
//! text itself ("1, 2, 3," then " 4, 5,"), where Anthropic and Ollama answer with the
//! continuation only. This module owns cutting that echo from each choice's content (an OpenAI
//! request for `n` choices gets it in every one), across however many chunks it spans; a content
//! that stops matching ends that choice's cut there. It must not touch anything else in a chunk.

use serde_json::Value;

/// What is left of the prefill to cut from each choice's content still to come.
#[derive(Debug, Clone, Default)]
pub struct Prefill {
    text: String,
    /// Per choice index seen so far: what is left to cut from it.
    rests: Vec<(u64, String)>,
    /// Choices whose cut has ended (the echo cut whole, or content that departed from it).
    ended: u64,
    /// Choices the answer has (the client's `n`, at least 1).
    choices: u64,
}

impl Prefill {
    pub fn new(text: Option<String>, choices: u64) -> Self {
        Self { text: text.unwrap_or_default(), rests: Vec::new(), ended: 0, choices: choices.max(1) }
    }

    /// Whether content still has to be checked against the prefill.
    #[inline]
    pub fn pending(&self) -> bool {
        !self.text.is_empty() && self.ended < self.choices
    }

    /// `content` of choice `index` without the part that repeats the prefill; what remains to
    /// cut from that choice shrinks by what was cut, and becomes nothing once `content` departs.
    pub fn cut<'a>(&mut self, index: u64, content: &'a str) -> &'a str {
        let at = match self.rests.iter().position(|(i, _)| *i == index) {
            Some(at) => at,
            None => {
                self.rests.push((index, self.text.clone()));
                self.rests.len() - 1
            }
        };
        let rest = &mut self.rests[at].1;
        if rest.is_empty() {
            return content;
        }
        let mut same = content.bytes().zip(rest.bytes()).take_while(|(a, b)| a == b).count();
        if same == content.len() {
            rest.drain(..same);
            if rest.is_empty() {
                self.ended += 1;
            }
            return "";
        }
        while !content.is_char_boundary(same) {
            same -= 1; // two valid strings that part inside a character part before it
        }
        rest.clear();
        self.ended += 1;
        &content[same..]
    }

    /// `data` (an engine chunk or whole body) with the echo cut from each choice's content; None
    /// when nothing in it changes (no content, or not an object).
    pub fn strip(&mut self, data: &str) -> Option<String> {
        let mut value: Value = serde_json::from_str(data).ok()?;
        let mut changed = false;
        for choice in value.get_mut("choices")?.as_array_mut()?.iter_mut() {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            let message = match choice.get("delta") {
                Some(Value::Object(_)) => choice.get_mut("delta"),
                _ => choice.get_mut("message"),
            };
            let Some(content) = message.and_then(|m| m.get_mut("content")) else { continue };
            let Some(text) = content.as_str() else { continue };
            if text.is_empty() {
                continue;
            }
            let kept = self.cut(index, text).to_owned();
            if kept.len() != text.len() {
                *content = Value::String(kept);
                changed = true;
            }
        }
        if changed {
            serde_json::to_string(&value).ok()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Prefill;

    fn prefill(text: &str) -> Prefill {
        Prefill::new(Some(text.to_owned()), 1)
    }

    #[test]
    fn cuts_the_echo_across_pieces_and_keeps_the_continuation() {
        let mut p = prefill("1, 2, 3,");
        assert_eq!(p.cut(0, "1, 2"), "");
        assert!(p.pending());
        assert_eq!(p.cut(0, ", 3, 4"), " 4");
        assert!(!p.pending());
        assert_eq!(p.cut(0, "1, 2"), "1, 2");
    }

    #[test]
    fn content_that_departs_ends_the_cut_at_a_character_boundary() {
        let mut p = prefill("né");
        assert_eq!(p.cut(0, "nè!"), "è!"); // é and è share their first UTF-8 byte
        assert!(!p.pending());
        let mut none = Prefill::new(None, 1);
        assert!(!none.pending());
        assert_eq!(none.cut(0, "text"), "text");
    }

    #[test]
    fn strips_chunks_and_bodies_and_leaves_others_alone() {
        let mut p = prefill("Sure, ");
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}"#;
        assert_eq!(p.strip(role), None);
        let first = r#"{"choices":[{"index":0,"delta":{"content":"Sure, here"}}],"model":"x"}"#;
        let got = p.strip(first).unwrap();
        assert!(got.contains(r#""content":"here""#), "{got}");
        assert!(got.contains(r#""model":"x""#), "{got}");
        assert!(!p.pending());
        let mut whole = prefill("A");
        let body = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"AB"}}]}"#;
        assert!(whole.strip(body).unwrap().contains(r#""content":"B""#));
        assert_eq!(prefill("A").strip("[1]"), None);
    }

    #[test]
    fn every_choice_has_its_echo_cut() {
        let mut p = Prefill::new(Some("1, 2,".to_owned()), 2);
        let both = r#"{"choices":[{"index":0,"message":{"content":"1, 2, 3"}},{"index":1,"message":{"content":"1, 2, 4"}}]}"#;
        let got = p.strip(both).unwrap();
        assert!(got.contains(r#""content":" 3""#) && got.contains(r#""content":" 4""#), "{got}");
        assert!(!p.pending());
        let mut s = Prefill::new(Some("ab".to_owned()), 2);
        let chunk =
            |i: u64, t: &str| format!(r#"{{"choices":[{{"index":{i},"delta":{{"content":"{t}"}}}}]}}"#);
        assert!(s.strip(&chunk(0, "a")).unwrap().contains(r#""content":"""#));
        assert!(s.strip(&chunk(1, "abc")).unwrap().contains(r#""content":"c""#));
        assert!(s.pending()); // choice 0 has "b" left
        assert!(s.strip(&chunk(0, "bd")).unwrap().contains(r#""content":"d""#));
        assert!(!s.pending());
        assert_eq!(s.strip(&chunk(1, "ab")), None); // its cut ended: content stands
    }
}
