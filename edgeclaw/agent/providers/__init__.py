"""LLM providers over HTTP: OpenAI-compatible chat completions and Anthropic messages."""
