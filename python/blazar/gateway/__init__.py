"""The HTTP gateway: an RSGI app served by Granian in the daemon's process.

``app`` owns routing and the per-request envelope (trace id, body limit, access log, errors); ``openai`` holds
the OpenAI-dialect handlers; ``proxy`` dispatches to engine children; ``server`` binds and runs Granian.
"""
