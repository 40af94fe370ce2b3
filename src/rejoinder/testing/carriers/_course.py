"""What the three fake carriers share: the scripted outcome, the call's course from ringing
to its end (every wait bounded), scripted REST failures, signed posts, and the called
party on a Telnyx or Plivo media stream (``StreamCaller``)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ...models import g711
from .._loopback import LoopbackServer

if TYPE_CHECKING:
    import aiohttp
    from aiohttp import web

    from ..phone import FakePhoneCall

__all__ = ["Answer", "CallOutcome", "FakeCall", "FakeCarrier", "StreamCaller", "basic_auth"]

Answer = Literal["human", "machine", "busy", "no-answer", "silent"]
_SILENCE = g711.ulaw_encode(np.zeros(160, np.int16))


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """How the called party behaves."""

    answer: Answer = "human"
    ring_seconds: float = 0.05
    talk_seconds: float | None = None
    """Once the stream is up, the callee hangs up after this long (None: it waits for a
    hang-up from our side: the stream closed, a REST hang-up or a transfer)."""
    beep: bool = True
    """A machine's greeting ends with a beep (its AMD result says so)."""


@dataclass
class FakeCall:
    """One call the fake carrier placed."""

    id: str
    to: str
    from_: str
    outcome: CallOutcome
    request: dict[str, Any]
    statuses: list[str] = field(default_factory=list)
    """What was posted to our status callbacks (the provider's words), in order."""
    callback_answers: list[int] = field(default_factory=list)
    stream: Any = None
    """``FakePhoneCall`` (Twilio) or ``StreamCaller`` once the stream is up."""
    transfers: list[str] = field(default_factory=list)
    """The transfer targets and the XML/TwiML that carried them."""
    said: list[str] = field(default_factory=list)
    """What the carrier spoke to the callee (a warm transfer's briefing: Twilio
    ``<Say>``, Plivo ``<Speak>``, Telnyx ``speak``), in order."""
    conference: str | None = None
    """The conference room the call was put in (Twilio, Plivo)."""
    bridged_with: str | None = None
    """The call this one was bridged to (Telnyx ``bridge``)."""
    hung_up_by_api: bool = False
    over: asyncio.Event = field(default_factory=asyncio.Event)
    _hangup: asyncio.Event = field(default_factory=asyncio.Event)
    stream_up: asyncio.Event = field(default_factory=asyncio.Event)


class StreamCaller:
    """The called party on a Telnyx or Plivo media stream: a ``start``, silence every
    20 ms, marks (Plivo checkpoints) echoed once the audio before them has played in real
    time; what was heard is kept. ``hang_up`` sends ``stop`` and closes."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, provider: str, start: dict[str, Any]):
        self.ws, self.provider, self._start = ws, provider, start
        self.heard: list[np.ndarray[Any, np.dtype[np.int16]]] = []
        self.heard_at: list[float] = []
        """Loop time each piece of ``heard`` started playing."""
        self.marks_echoed: list[str] = []
        self.clears = 0
        self._play_until = 0.0
        self._pending: list[tuple[asyncio.TimerHandle, str]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.closed_by_server = asyncio.Event()

    async def begin(self) -> None:
        if self.provider == "telnyx":
            await self.ws.send_json({"event": "connected", "version": "1.0.0"})
        await self.ws.send_json(self._start)
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._talk())]

    def heard_seconds(self) -> float:
        return sum(len(pcm) for pcm in self.heard) / 8000

    def audible(self) -> bool:
        return any(len(pcm) and int(np.abs(pcm).max()) > 200 for pcm in self.heard)

    def audible_at(self, *, threshold: int = 200) -> list[float]:
        """Times the pieces that were not near-silence started playing."""
        return [
            at
            for at, pcm in zip(self.heard_at, self.heard, strict=True)
            if len(pcm) and int(np.abs(pcm).max()) > threshold
        ]

    async def _talk(self) -> None:
        payload = base64.b64encode(_SILENCE).decode("ascii")
        chunk = 0
        while not self.ws.closed:
            chunk += 1
            media = {"track": "inbound", "chunk": str(chunk), "timestamp": str(chunk * 20)}
            media["payload"] = payload
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.ws.send_json({"event": "media", "media": media})
            await asyncio.sleep(0.02)

    async def _read(self) -> None:
        import aiohttp

        loop = asyncio.get_running_loop()
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            message = json.loads(msg.data)
            event = message.get("event")
            now = loop.time()
            if event in ("media", "playAudio"):
                pcm = g711.ulaw_decode(base64.b64decode(message["media"]["payload"]))
                self.heard_at.append(max(now, self._play_until))
                self._play_until = max(now, self._play_until) + len(pcm) / 8000
                self.heard.append(pcm)
            elif event in ("mark", "checkpoint"):
                name = message["mark"]["name"] if event == "mark" else message["name"]
                delay = max(0.0, self._play_until - now)
                self._pending.append((loop.call_later(delay, self._echo, name), name))
            elif event in ("clear", "clearAudio"):
                self.clears += 1
                self._play_until = now
                # what was buffered and not played yet is dropped, never heard
                played = sum(1 for at in self.heard_at if at <= now)
                del self.heard[played:], self.heard_at[played:]
                pending = [name for handle, name in self._pending if not handle.cancelled()]
                for handle, _ in self._pending:
                    handle.cancel()
                self._pending = []
                if self.provider == "plivo":  # Plivo drops pending checkpoints
                    await self.ws.send_json({"event": "clearedAudio"})
                else:  # Telnyx echoes them at once
                    for name in pending:
                        self._echo(name)
        self.closed_by_server.set()

    def _echo(self, name: str) -> None:
        self.marks_echoed.append(name)
        message: dict[str, Any]
        if self.provider == "plivo":
            message = {"event": "playedStream", "name": name}
        else:
            message = {"event": "mark", "mark": {"name": name}}
        task = asyncio.ensure_future(self.ws.send_json(message))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def hang_up(self) -> None:
        if not self.ws.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.ws.send_json({"event": "stop"})
        await self.aclose()

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for handle, _ in self._pending:
            handle.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if not self.ws.closed:
            await self.ws.close()

    @property
    def closed(self) -> bool:
        return self.ws.closed


class FakeCarrier(LoopbackServer):
    """What the three fakes share: the script, scripted failures, the call's course."""

    provider = ""

    def __init__(
        self, *, outcomes: list[CallOutcome] | None = None, max_call_seconds: float = 30.0
    ):
        super().__init__()
        self.outcomes: deque[CallOutcome] = deque(outcomes or [])
        self.default_outcome = CallOutcome()
        self.max_call_seconds = max_call_seconds
        self.calls: list[FakeCall] = []
        self.requests: list[tuple[str, str]] = []
        """Every REST request, ``(method, path)``, failed ones too."""
        self.hangups: list[str] = []
        self.conferences: dict[str, list[str]] = {}
        """Each conference room and the calls put in it, in order."""
        self.join_lag = 0.05
        """Seconds between a call's move to a conference or bridge and its stream's end."""
        self._failures: deque[int] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._http: aiohttp.ClientSession | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail_next(self, status: int = 500, times: int = 1) -> None:
        """Answer the next ``times`` REST requests with ``status`` (and do nothing)."""
        self._failures.extend([status] * times)

    def callee_hangs_up(self, call: FakeCall) -> None:
        """The called party hangs up: the stream stops, then the call completes."""
        call._hangup.set()

    def call(self, call_id: str) -> FakeCall | None:
        return next((c for c in self.calls if c.id == call_id), None)

    async def until(self, condition: Callable[[], bool], timeout: float = 5.0) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout):
            while not condition():  # noqa: ASYNC110 - conditions on calls and streams
                await asyncio.sleep(0.01)

    def _failure(self, request: web.Request) -> web.Response | None:
        from aiohttp import web

        self.requests.append((request.method, request.path))
        if not self._failures:
            return None
        status = self._failures.popleft()
        return web.json_response(self._error_body(status, "scripted failure"), status=status)

    def _error_body(self, status: int, message: str) -> Any:
        raise NotImplementedError

    def _place(self, to: str, from_: str, request: dict[str, Any], call_id: str) -> FakeCall:
        outcome = self.outcomes.popleft() if self.outcomes else self.default_outcome
        call = FakeCall(call_id, to, from_, outcome, request)
        self.calls.append(call)
        task = asyncio.create_task(self._course(call))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return call

    async def _course(self, call: FakeCall) -> None:
        """The call from ringing to its end; every wait bounded."""
        outcome = call.outcome
        try:
            await asyncio.sleep(0.01)  # after the REST answer, as a carrier does
            await self._progress(call, "initiated")
            await self._progress(call, "ringing")
            if outcome.answer == "silent":
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(call._hangup.wait(), self.max_call_seconds)
                await self._progress(call, "canceled")
                return
            if await self._hung_up_within(call, outcome.ring_seconds):
                await self._progress(call, "canceled")
                return
            if outcome.answer in ("busy", "no-answer"):
                await self._progress(call, outcome.answer)
                return
            if not await self._answer(call):
                await self._progress(call, "failed")
                return
            call.stream_up.set()
            await self._detected(call)
            await self._talking(call)
            if call.stream is not None:
                await call.stream.hang_up()
            await self._progress(call, "completed")
        finally:
            if call.stream is not None:
                await call.stream.aclose()
            call.over.set()

    async def _hung_up_within(self, call: FakeCall, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(call._hangup.wait(), seconds)
        return call._hangup.is_set()

    async def _talking(self, call: FakeCall) -> None:
        """Until the callee hangs up, we close the stream, hang up or transfer."""
        stream = call.stream
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(call._hangup.wait())]
        if stream is not None:
            closed = getattr(stream, "closed_by_server", None)
            if closed is not None:
                waits.append(asyncio.ensure_future(closed.wait()))
            else:  # FakePhoneCall: its socket closes
                waits.append(asyncio.ensure_future(_closed(stream)))
        limit = call.outcome.talk_seconds or self.max_call_seconds
        try:
            await asyncio.wait(waits, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if call.transfers or call.conference or call.bridged_with:
            # the call goes on with the transfer's target or the person, not with us
            await self._hung_up_within(call, limit)
            return
        # Telnyx keeps a call whose stream ended: its application hangs it up.
        telnyx_left = self.provider == "telnyx" and not call._hangup.is_set()
        if telnyx_left and stream is not None and stream.closed and not call.outcome.talk_seconds:
            await self._hung_up_within(call, 5.0)

    def _leave_for_transfer(self, call: FakeCall) -> None:
        """The call leaves the agent for the transfer's target: its stream ends; the call
        goes on until the callee hangs up (``callee_hangs_up``) or ``talk_seconds``."""
        if call.stream is not None:
            task = asyncio.create_task(call.stream.hang_up())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _join(self, call: FakeCall, room: str, *, leaves_stream: bool) -> None:
        """``call`` enters conference ``room``; a call streaming to us leaves its stream
        (``join_lag`` later: the carrier acts after answering the request)."""
        call.conference = room
        self.conferences.setdefault(room, []).append(call.id)
        if leaves_stream:
            self._leave_later(call)

    def _leave_later(self, call: FakeCall) -> None:
        async def leave() -> None:
            await asyncio.sleep(self.join_lag)
            if call.stream is not None:
                await call.stream.hang_up()

        task = asyncio.create_task(leave())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _hang_up(self, call: FakeCall, by_api: bool = True) -> None:
        call.hung_up_by_api = by_api
        self.hangups.append(call.id)
        call._hangup.set()

    async def _post(
        self,
        call: FakeCall,
        url: str,
        *,
        form: Mapping[str, str] | None = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, str]:
        import aiohttp

        if self._http is None:
            self._http = aiohttp.ClientSession()
        try:
            async with self._http.post(
                url,
                data=dict(form) if form is not None else body,
                headers=dict(headers or {}),
                timeout=aiohttp.ClientTimeout(total=5),
            ) as response:
                call.callback_answers.append(response.status)
                return response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError):
            call.callback_answers.append(0)
            return 0, ""

    async def _before_cleanup(self) -> None:
        for call in self.calls:
            call._hangup.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()

    # each provider: its callbacks, its answer, its AMD
    async def _progress(self, call: FakeCall, status: str) -> None:
        raise NotImplementedError

    async def _answer(self, call: FakeCall) -> bool:
        raise NotImplementedError

    async def _detected(self, call: FakeCall) -> None:
        raise NotImplementedError


async def _closed(stream: FakePhoneCall) -> None:
    while not stream.closed:  # noqa: ASYNC110 - FakePhoneCall has no closed event
        await asyncio.sleep(0.02)


def basic_auth(request: web.Request) -> tuple[str, str] | None:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Basic "):
        return None
    try:
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    except ValueError:
        return None
    return user, password
