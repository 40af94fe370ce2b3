"""Conformance suites for providers: the promises every STT, TTS, LLM and realtime model
must keep, as pytest tests any implementation runs against itself (ours, or one in
another package).

For each kind there is a *harness* (``LLMHarness``, ``STTHarness``, ``TTSHarness``,
``RealtimeHarness``) that the provider's test fills in for its own server (a loopback
server that speaks the provider's wire protocol), and a *test class* (``LLMConformance``,
``STTConformance``, ``TTSConformance``, ``RealtimeConformance``) whose tests use only the
kind's public interface and the harness: output arrives whole; a transient failure
before the first output is retried (and counted), a final one raises the kind's error
with ``retryable``/``fatal`` right and the cause in its message; a cut, malformed data or
a stalled server raise within a bounded time (never a silently shorter result); stopping
or cancelling midway leaves no task running and the next request works; ``aclose`` is
idempotent and releases every task and connection; usage is reported where the kind has
it. A scenario the server cannot stage raises ``NotSupported("why")`` in the harness,
and the tests that need it are skipped with that reason.

Subclass the test class (its name must start with ``Test`` for pytest to collect it) and
give it a ``harness`` fixture::

    import pytest_asyncio
    from rejoinder.testing.conformance import LLMConformance, LLMHarness

    class MyHarness(LLMHarness):
        stall_timeout = 5.0   # what make() configures
        retries = 2

        def __init__(self, server: MyServer) -> None:
            self.server = server

        def make(self) -> MyLLM:
            return MyLLM(base_url=self.server.url, timeout=5.0, max_retries=2)

        def reply_text(self, *chunks, usage=None): self.server.queue_text(chunks, usage)
        ...  # and the other scripting methods

    class TestMyLLM(LLMConformance):
        @pytest_asyncio.fixture
        async def harness(self):
            async with MyServer() as server:
                yield MyHarness(server)

Requirements: pytest and pytest-asyncio (the classes carry the ``asyncio`` mark, so
strict mode works; an ``async`` harness fixture needs ``pytest_asyncio.fixture`` there).
With the ``looptime`` plugin installed the tests run on virtual time (a 5 s stall costs
nothing); a provider doing its work in threads sets ``pytestmark =
pytest.mark.looptime(False)`` on its subclass. Importing this package needs neither:
each name loads its module (and pytest) on first use. ``docs/providers.md`` says more.
"""

from typing import TYPE_CHECKING

from ..._lazy import lazy_names
from ._errors import NotSupported

if TYPE_CHECKING:
    from .llm import LLMConformance, LLMHarness
    from .realtime import RealtimeConformance, RealtimeHarness
    from .stt import STTConformance, STTHarness
    from .tts import TTSConformance, TTSHarness

__all__ = [
    "LLMConformance",
    "LLMHarness",
    "NotSupported",
    "RealtimeConformance",
    "RealtimeHarness",
    "STTConformance",
    "STTHarness",
    "TTSConformance",
    "TTSHarness",
]

__getattr__ = lazy_names(
    __name__,
    globals(),
    {
        "LLMConformance": ".llm",
        "LLMHarness": ".llm",
        "RealtimeConformance": ".realtime",
        "RealtimeHarness": ".realtime",
        "STTConformance": ".stt",
        "STTHarness": ".stt",
        "TTSConformance": ".tts",
        "TTSHarness": ".tts",
    },
)
