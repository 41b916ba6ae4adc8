//! Reading llama-server's `/embeddings` answer (pooling `none`) and pooling token spans.

use std::fmt;

use serde::Deserialize;

/// Why an engine's per-token answer could not be pooled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolError {
    /// The body is not the JSON shape llama-server answers with.
    Shape(String),
    /// A span is empty or reaches past the tokens the engine returned.
    Span { start: usize, end: usize, tokens: usize },
    /// The token vectors do not all have one length.
    Ragged { first: usize, other: usize },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shape(why) => write!(f, "engine's per-token embeddings are not readable: {why}"),
            Self::Span { start, end, tokens } => write!(
                f,
                "token span {start}..{end} is empty or outside the {tokens} token vectors the engine returned"
            ),
            Self::Ragged { first, other } => {
                write!(f, "engine returned token vectors of {first} and of {other} dimensions")
            }
        }
    }
}

impl std::error::Error for PoolError {}

#[derive(Deserialize)]
struct Item {
    embedding: Vec<Vec<f32>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Answer {
    Many(Vec<Item>),
    One(Item),
}

/// The token vectors of the one input in `body`: `[{"index": 0, "embedding": [[f32...], ...]}]`
/// (or the bare object).
fn token_vectors(body: &[u8]) -> Result<Vec<Vec<f32>>, PoolError> {
    let answer: Answer = serde_json::from_slice(body).map_err(|_| {
        PoolError::Shape(
            "expected [{\"embedding\": [[numbers...], ...]}] (is the engine running with --pooling none?)"
                .into(),
        )
    })?;
    let mut items = match answer {
        Answer::Many(items) => items,
        Answer::One(item) => vec![item],
    };
    if items.len() != 1 {
        return Err(PoolError::Shape(format!("expected one input's vectors, got {}", items.len())));
    }
    Ok(items.pop().map(|i| i.embedding).unwrap_or_default())
}

/// For each `(start, end)` token span of the engine's answer in `body`, the mean of those
/// tokens' vectors, L2-normalised (a zero mean stays zero). Sums are in f64.
pub fn pool_spans(body: &[u8], spans: &[(usize, usize)]) -> Result<Vec<Vec<f32>>, PoolError> {
    let tokens = token_vectors(body)?;
    let dim = tokens.first().map_or(0, Vec::len);
    if let Some(other) = tokens.iter().map(Vec::len).find(|&n| n != dim) {
        return Err(PoolError::Ragged { first: dim, other });
    }
    if dim == 0 {
        return Err(PoolError::Shape("no token vectors".into()));
    }
    let mut out = Vec::with_capacity(spans.len());
    let mut sum = vec![0f64; dim];
    for &(start, end) in spans {
        if start >= end || end > tokens.len() {
            return Err(PoolError::Span { start, end, tokens: tokens.len() });
        }
        sum.iter_mut().for_each(|s| *s = 0.0);
        for vector in &tokens[start..end] {
            for (s, &v) in sum.iter_mut().zip(vector) {
                *s += f64::from(v);
            }
        }
        let norm = sum.iter().map(|s| s * s).sum::<f64>().sqrt();
        let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
        out.push(sum.iter().map(|s| (s * scale) as f32).collect());
    }
    Ok(out)
}
