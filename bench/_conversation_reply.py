"""The one reply the conversation benchmark's fake model gives to every user turn: three
sentences, about 6 s of Piper speech, so that a barge-in lands while the agent talks.
Its own module so the client can time it without importing the agent (which loads the
speech models)."""

REPLY = (
    "Sure, I can help you with that. I am looking up the details for you right now. "
    "Is there anything else you need?"
)
