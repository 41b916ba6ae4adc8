//! Tool-call delta merging: OpenAI `tool_calls` fragments joined by `index` into whole calls.
//!
//! Owns the merge rules: a fragment's `id`, `type`, `function.name` and `arguments` pieces go to
//! the call with its `index`; a call is complete once a fragment for another call arrives, or
//! when the choice finishes. Anything odd (no index, a conflicting id, a late fragment for a
//! finished call, a call without a name, arguments that are not a JSON object) is merged as well
//! as it can be and reported as an error string, never dropped silently. It must not write any
//! client dialect.

use super::engine::ToolFragment;
use super::json::minify_object;

/// One merged call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCall {
    /// The engine's `index` for this call.
    pub index: u32,
    pub id: Option<String>,
    pub name: String,
    /// The raw arguments text, as the engine streamed it.
    pub arguments: String,
}

impl ToolCall {
    /// The arguments as a compact JSON object text, or `{}` when they are not an object.
    pub fn arguments_object(&self) -> String {
        minify_object(&self.arguments).unwrap_or_else(|_| "{}".to_owned())
    }
}

#[derive(Debug, Default)]
pub struct ToolMerger {
    pub calls: Vec<ToolCall>,
    /// `calls[..complete]` are complete.
    complete: usize,
    current: Option<usize>,
}

impl ToolMerger {
    /// Merges one fragment and returns the slot (position in `calls`) it went to. A fragment
    /// without an `index` takes `default_index` (a whole message's calls: their position) or, in
    /// a stream, joins the current call and is reported.
    pub fn merge(
        &mut self,
        frag: &ToolFragment<'_>,
        default_index: Option<u32>,
        errors: &mut Vec<String>,
    ) -> usize {
        let index = match frag.index.or(default_index) {
            Some(i) => i,
            None => {
                let fallback = self.current.map_or(0, |s| self.calls[s].index);
                errors.push(format!("tool call fragment without an index; merged into call {fallback}"));
                fallback
            }
        };
        let slot = match self.calls.iter().position(|c| c.index == index) {
            Some(slot) => {
                if self.current != Some(slot) {
                    errors.push(format!(
                        "tool call {index} received a fragment after another call had started; \
                         streamed clients may have seen it incomplete"
                    ));
                }
                slot
            }
            None => {
                self.calls.push(ToolCall { index, ..ToolCall::default() });
                self.calls.len() - 1
            }
        };
        if self.current != Some(slot) {
            self.complete = self.complete.max(slot);
            self.current = Some(slot);
        }
        let call = &mut self.calls[slot];
        if let Some(id) = &frag.id {
            match &call.id {
                None => call.id = Some(id.as_str().to_owned()),
                Some(old) if old == id.as_str() => {}
                Some(old) => errors.push(format!(
                    "tool call {index} has conflicting ids '{old}' and '{}'; kept the first",
                    id.as_str()
                )),
            }
        }
        if let Some(kind) = &frag.kind {
            if kind.as_str() != "function" {
                errors.push(format!("tool call {index} has type '{}', expected 'function'", kind.as_str()));
            }
        }
        if let Some(function) = &frag.function {
            if let Some(name) = &function.name {
                // A repeated whole name is ignored; differing pieces are joined.
                if call.name != name.as_str() {
                    call.name.push_str(name.as_str());
                }
            }
            if let Some(arguments) = &function.arguments {
                call.arguments.push_str(arguments.as_str());
            }
        }
        slot
    }

    /// Marks every call complete (the choice finished).
    pub fn complete_all(&mut self) {
        self.complete = self.calls.len();
        self.current = None;
    }

    /// How many leading calls are complete.
    pub fn complete_count(&self) -> usize {
        self.complete
    }

    /// Reports calls that cannot be used as they are.
    pub fn validate(&self, errors: &mut Vec<String>) {
        for call in &self.calls {
            if call.name.is_empty() {
                errors.push(format!("tool call {} has no function name", call.index));
            }
            if let Err(err) = minify_object(&call.arguments) {
                errors.push(format!("tool call {} arguments are not a JSON object: {err}", call.index));
            }
        }
    }
}
