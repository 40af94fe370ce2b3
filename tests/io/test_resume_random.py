"""Randomized: drops and resumes at random points among user turns (typed and spoken) and
replies (short, long with a pause in its generation, with a slow tool), on virtual time,
through the real WebSocket peer and socket loop over an in-memory socket
(``_memory_client``), with the test kit's scripted models.

After every step the reported state follows from the floor's facts. Throughout:

* nothing becomes ``speaking`` while the session is detached (no client can hear it), and
  a ``speaking`` that was on when the client dropped ends at the drop (the reply stays
  owed, ``thinking``, while its generation goes on);
* each client's first messages are ``ready`` and the state snapshot, ``resumed`` true
  exactly for the clients that resumed;
* nothing owed is lost: whenever a resumed client has heard everything (the agent is
  ``listening``), the words the history keeps the agent said are exactly the words the
  model produced, in order: a reply cut by a drop is there as its heard part followed by
  its unheard rest;
* a client that does not come back within the grace finds its token refused (4004) and
  its session closed; every session ends, with no obligation open, every tool call
  answered, and no task of ours left running.

``REJOINDER_STRESS_EXAMPLES`` raises the example count.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.io import Connection
from rejoinder.io.protocol import (
    AgentStateMessage,
    CloseCode,
    ErrorMessage,
    Ready,
    UserStateMessage,
)
from rejoinder.io.resume import ResumeRegistry
from rejoinder.testing import (
    Delay,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    ToolCall,
)

from ..session._lifecycle import check_floor, check_history, run_on_virtual_time, stress_settings
from ._memory_client import MemoryClient

GRACE = 2.0
BOUND = 60.0
"""Virtual seconds any wait of the scenario may take."""
GENERATION_PAUSE = 0.3
REPLIES: dict[str, list[Any]] = {
    "short": ["Okay, got it."],
    "long": ["This is a longer answer,", Delay(GENERATION_PAUSE), " and it goes on a while."],
    "tool": ["Let me check that.", ToolCall("slow")],
}
FOLLOW_UP = ["It is done now."]


@rj.function_tool
async def slow() -> str:
    """Slow."""
    await asyncio.sleep(1.0)
    return "done"


class World:
    """One scenario: the registry, the session, its clients, and what was observed."""

    def __init__(self) -> None:
        self.registry = ResumeRegistry(GRACE)
        self.sessions: list[rj.AgentSession[Any]] = []
        self.conns: list[Connection] = []
        self.entries_done = 0
        self.produced: list[str] = []
        """The model's texts, in the order it produced them."""
        self.clients: list[tuple[MemoryClient, bool]] = []
        """Each client, and whether it resumed."""
        self.client: MemoryClient | None = None
        self.token: str | None = None
        self.detached_at: float | None = None
        self.speaking_at_drop: float | None = None
        self.violations: list[str] = []

    @property
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def model(self, ctx: rj.ChatContext) -> list[Any]:
        last = ctx.items[-1] if ctx.items else None
        if isinstance(last, rj.ChatMessage) and last.role == "user":
            steps = REPLIES[last.content if last.content in REPLIES else "long"]
        else:
            steps = FOLLOW_UP
        self.produced.append("".join(s for s in steps if isinstance(s, str)))
        return steps

    async def entrypoint(self, conn: Connection) -> None:
        session: rj.AgentSession[None] = rj.AgentSession(
            llm=ScriptedLLM(self.model),  # type: ignore[arg-type]
            vad=ScriptedVAD(),
            stt=ScriptedSTT(lambda _: "long"),
            tts=ScriptedTTS(seconds_per_char=0.03),
            user_away_timeout=None,
            min_endpointing_delay=0.1,
        )
        self.sessions.append(session)
        self.conns.append(conn)
        session.on("agent_state_changed", self._agent_state)
        try:
            await conn.serve(session, rj.Agent(instructions="test", tools=[slow]))
        finally:
            self.entries_done += 1

    def _agent_state(self, ev: Any) -> None:
        conn = self.conns[0]
        if ev.new_state == "speaking" and conn.detached:
            self.violations.append(f"speaking at {self.now:.3f} while detached")
        if self.speaking_at_drop is not None and ev.old_state == "speaking":
            # the reply that was audible when the client dropped stops counting as
            # heard at the drop, even while its generation goes on
            lasted = self.now - self.speaking_at_drop
            if lasted > 1e-6:
                self.violations.append(f"speaking {lasted:.3f} s after the drop")
            self.speaking_at_drop = None

    # ----------------------------------------------------------- operations

    @property
    def session(self) -> rj.AgentSession[Any] | None:
        return self.sessions[0] if self.sessions else None

    @property
    def alive(self) -> bool:
        return bool(self.conns) and not self.conns[0].left

    @property
    def attached(self) -> bool:
        return self.alive and self.client is not None and not self.client.gone

    async def connect(self, resume: str | None = None) -> Any:
        client = MemoryClient(self.entrypoint, resume=self.registry)
        answer = await client.start(resume)
        if isinstance(answer, Ready):
            assert answer.resumed is (resume is not None), answer
            assert answer.resume_token and answer.resume_token != resume
            first = [type(m) for _, m in client.messages[:3]]
            assert first == [Ready, AgentStateMessage, UserStateMessage], first
            self.clients.append((client, resume is not None))
            if self.client is not None and not self.client.gone:
                await self.client.ended(BOUND)  # taken over: closed by the server
                assert self.client.close_code == CloseCode.RESUMED
            self.client = client
            self.token = answer.resume_token
            self.detached_at = None
            self.speaking_at_drop = None  # heard again from here
        return answer

    async def heard_turns(self, count: int) -> None:
        """Until the history has ``count`` user turns (a spoken one ends after the
        microphone's silence, heard while detached too)."""
        session = self.session
        assert session is not None
        async with asyncio.timeout(BOUND):
            while True:
                users = [m for m in session.history.messages() if m.role == "user"]
                if len(users) >= count or not self.alive:
                    return
                await asyncio.sleep(0.05)

    async def idle(self) -> None:
        """Until the agent owes nothing and the client heard everything."""
        session = self.session
        assert session is not None and self.client is not None
        playback = self.conns[0].audio_output
        async with asyncio.timeout(BOUND):
            while True:
                idle = session.agent_state == "listening" and not session.owed()
                if idle and not playback.pending:
                    return
                await asyncio.sleep(0.05)

    async def drop(self) -> None:
        assert self.client is not None and self.session is not None
        event(f"dropped while {self.session.agent_state}")
        if self.session.agent_state == "speaking":
            self.speaking_at_drop = self.now
        await self.client.drop()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        conn = self.conns[0]
        assert conn.detached or conn.left
        self.detached_at = self.now

    async def resume(self) -> None:
        """The dropped client comes back with its token."""
        assert self.token is not None and self.detached_at is not None
        away = self.now - self.detached_at
        answer = await self.connect(self.token)
        if isinstance(answer, Ready):
            event("resumed")
            assert away < GRACE + 0.01, away
            return
        event("came back too late")
        assert isinstance(answer, ErrorMessage) and answer.code == "resume_failed"
        assert away >= GRACE - 0.01 and not self.alive

    def check_words(self) -> None:
        """Everything the model produced was heard, once, in order."""
        session = self.session
        assert session is not None
        heard = [m.content for m in session.history.messages() if m.role == "assistant"]
        assert " ".join(heard).split() == " ".join(self.produced).split(), (
            heard,
            self.produced,
        )


TURNS = [*sorted(REPLIES), "spoken"]

blocks = st.lists(
    st.tuples(
        # the user's turn: typed (the reply's kind), or said into the microphone
        st.sampled_from(TURNS),
        # the connection drops this long after the turn (None: it does not)
        st.sampled_from([None, 0.0, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0, 1.3, 1.7, 2.2]),
        # the client is away this long, then resumes (past the grace: too late)
        st.sampled_from([0.0, 0.3, 1.0, GRACE + 0.5]),
        # instead of dropping, the client comes back before the server saw it go
        st.sampled_from([False, False, False, True]),
    ),
    min_size=1,
    max_size=4,
)


async def scenario(drop_at_start: bool, steps: list[tuple[Any, ...]]) -> None:
    before = {t for t in asyncio.all_tasks() if not t.done()}
    world = World()
    await world.connect()
    if drop_at_start:  # while the session starts
        await world.drop()
        await world.resume()
    for turns, (turn, drop_after, away, take_over) in enumerate(steps):
        if not world.alive:
            break
        await world.heard_turns(turns)  # the last turn reached the session (one at a time)
        await world.idle()
        assert world.client is not None
        if turn == "spoken":
            await world.client.speak(0.4)
        else:
            world.client.send({"type": "text", "text": turn})
        if drop_after is None:
            continue
        await asyncio.sleep(drop_after)
        if take_over:
            assert isinstance(await world.connect(world.token), Ready)
            event("taken over")
        else:
            await world.drop()
            await asyncio.sleep(away)
            await world.resume()
        if world.alive:
            await world.idle()
            world.check_words()
            session = world.session
            assert session is not None
            check_floor(session)
    # the end: a goodbye, or a client that never came back
    if world.attached and world.client is not None:
        await world.client.goodbye()
    async with asyncio.timeout(BOUND):
        while True:
            if world.entries_done == len(world.conns):
                break
            await asyncio.sleep(0.1)
    session = world.session
    assert session is not None and world.conns[0].left
    assert session.owed() == [] and session.agent_state == "listening"
    check_history(session.history)
    late = MemoryClient(world.entrypoint, resume=world.registry)
    refused = await late.start(world.token)
    assert isinstance(refused, ErrorMessage) and refused.code == "resume_failed"
    await late.ended(BOUND)
    assert late.close_code == CloseCode.RESUME_FAILED
    assert world.registry.detached == 0
    assert world.violations == []
    for client, _ in world.clients:
        with contextlib.suppress(TimeoutError):
            await client.ended(BOUND)
    await asyncio.sleep(0)
    left = [t for t in asyncio.all_tasks() if t not in before and not t.done()]
    left = [t for t in left if t is not asyncio.current_task()]
    if left:
        await asyncio.wait(left, timeout=5.0)
    assert [t for t in left if not t.done()] == []


@stress_settings(default_examples=60)
@given(drop_at_start=st.booleans(), steps=blocks)
def test_drops_and_resumes_at_random_points_keep_the_promises(
    drop_at_start: bool, steps: list[tuple[Any, ...]]
) -> None:
    run_on_virtual_time(lambda: scenario(drop_at_start, steps))
