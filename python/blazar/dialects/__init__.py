"""Request-side translation: each client dialect (OpenAI, Ollama, Anthropic) into one canonical request, and the
canonical request into the engine's OpenAI dialect (llama-server).

``canonical`` is the hub; ``openai``, ``ollama`` and ``anthropic`` are spokes that import only the hub. Every function
here is pure: no I/O, no logging, no network or server imports. Responses are translated natively elsewhere.
"""
