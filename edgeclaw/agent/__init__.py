"""The agent: the loop, conversation sessions, LLM providers and slash commands."""
