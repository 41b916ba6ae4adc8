"""Pure-Python reference implementations of the native streaming core, for parity tests and
benchmarks only: never imported by blazar itself.

``frames`` mirrors ``native/src/frame`` (SSE and NDJSON framing) and ``translate`` mirrors
``native/src/translate`` (engine responses to OpenAI, Ollama and Anthropic client bytes, tool-call
merging, the summary). Both are written from the same rules as the Rust code, not from it, so a
disagreement points at a bug on one side. ``llama`` is a float64 forward pass of a llama GGUF, the reference
for the engine's prompt logprobs (``gateway.prompt_logprobs``).
"""
