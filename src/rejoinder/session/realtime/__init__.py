"""The realtime engine: a session over a realtime or duplex model
(``AgentSession(llm=<RealtimeModel>)``), where the provider hears, decides and speaks.

- ``engine.py``: runs the session on the provider's events (``RealtimeEngine``);
- ``provider_obligations.py``: the provider's protocol facts as obligations;
- ``playout.py``: the provider's audio to the output, one stretch at a time;
- ``record.py``: what the provider said and heard, written to the history;
- ``client_delegation.py``: work the voice model hands to the application.
"""
