"""What a strict chat API is sent where the conversation has no user turn to begin or end
with (Anthropic's Messages and Gemini's contents must start and end with one): one
wording for every provider, so the model reads the same marks whichever it is."""

CONVERSATION_STARTS = "(the conversation starts)"
"""Before an agent's greeting, when nothing the user said comes first."""

GO_ON = "(go on)"
"""After the agent's own words, when they end the context (else they read as a prefill)."""
