//! An assistant prefill the engine echoes back.
//!
//! A conversation that ends with an assistant message asks the model to continue that message.
//! llama-server (prefill_assistant, on by default) starts its answer's content with the prefill's
//! text itself ("1, 2, 3," then " 4, 5,"), where Anthropic and Ollama answer with the
//! continuation only. This module owns cutting that echo from the first choice's content, across
//! however many chunks it spans; a content that stops matching ends the cut there. It must not
//! touch anything else in a chunk.

use serde_json::Value;

/// What is left of the prefill to cut from the content still to come.
#[derive(Debug, Clone, Default)]
pub struct Prefill {
    rest: String,
}

impl Prefill {
    pub fn new(text: Option<String>) -> Self {
        Self { rest: text.unwrap_or_default() }
    }

    /// Whether content still has to be checked against the prefill.
    #[inline]
    pub fn pending(&self) -> bool {
        !self.rest.is_empty()
    }

    /// `content` without the part that repeats the prefill; what remains to cut shrinks by what
    /// was cut, and becomes nothing once `content` departs from it.
    pub fn cut<'a>(&mut self, content: &'a str) -> &'a str {
        let mut same = content.bytes().zip(self.rest.bytes()).take_while(|(a, b)| a == b).count();
        if same == content.len() {
            self.rest.drain(..same);
            return "";
        }
        while !content.is_char_boundary(same) {
            same -= 1; // two valid strings that part inside a character part before it
        }
        self.rest.clear();
        &content[same..]
    }

    /// `data` (an engine chunk or whole body) with the echo cut from its first choice's content;
    /// None when nothing in it changes (no content, or not an object).
    pub fn strip(&mut self, data: &str) -> Option<String> {
        let mut value: Value = serde_json::from_str(data).ok()?;
        let choice = value
            .get_mut("choices")?
            .as_array_mut()?
            .iter_mut()
            .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)?;
        let message = match choice.get("delta") {
            Some(Value::Object(_)) => choice.get_mut("delta")?,
            _ => choice.get_mut("message")?,
        };
        let content = message.get_mut("content")?;
        let text = content.as_str()?;
        if text.is_empty() {
            return None;
        }
        let kept = self.cut(text).to_owned();
        if kept.len() == text.len() {
            return None;
        }
        *content = Value::String(kept);
        serde_json::to_string(&value).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::Prefill;

    fn prefill(text: &str) -> Prefill {
        Prefill::new(Some(text.to_owned()))
    }

    #[test]
    fn cuts_the_echo_across_pieces_and_keeps_the_continuation() {
        let mut p = prefill("1, 2, 3,");
        assert_eq!(p.cut("1, 2"), "");
        assert!(p.pending());
        assert_eq!(p.cut(", 3, 4"), " 4");
        assert!(!p.pending());
        assert_eq!(p.cut("1, 2"), "1, 2");
    }

    #[test]
    fn content_that_departs_ends_the_cut_at_a_character_boundary() {
        let mut p = prefill("né");
        assert_eq!(p.cut("nè!"), "è!"); // é and è share their first UTF-8 byte
        assert!(!p.pending());
        let mut none = Prefill::new(None);
        assert!(!none.pending());
        assert_eq!(none.cut("text"), "text");
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
}
