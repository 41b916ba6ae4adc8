"""Stored files and batch jobs for OpenAI's Files and Batches APIs (``store``); the gateway runs them."""
