"""SipEndpoint: the UDP socket around ``SipCore``, and each answered call's life.

``SipEndpoint(entrypoint, gate=..., options=SipOptions(...))``; ``await start()`` binds
and returns the address, ``await aclose()`` says BYE to live calls and closes. For each
INVITE the core accepts: ``gate.admit()`` (486 Busy Here when full, 503 with
Retry-After while draining), the call's RTP is opened (``RtpCall.open`` from ``media``,
or the ``open_media`` given), the 200 OK carries its port, and the entry point runs in
``gate.run(entrypoint, rtp.connection)``. A caller's BYE ends the session (``"call
ended"``), a CANCEL before the answer means nothing runs, the entry point returning
(the agent hung up) or the media going silent (``on_dead``) sends our BYE.

Each call's ``Connection`` gets a ``SipLine`` as ``conn.line``: ``transfer(target)``
(REFER, then the NOTIFYs until the target answered: ``TransferFailed`` otherwise) and
``send_dtmf(digits)`` (RFC 4733, through the media).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from ..admission import Admission, SessionGate
from ..connection import Connection, Entrypoint
from ..telephony.line import TransferFailed
from .core import SipCore
from .dialog import Address, Dialog
from .events import (
    CallCancelled,
    CallEnded,
    CallOffered,
    KeysPressed,
    MediaChanged,
    Output,
    ReferAnswered,
    Send,
    TransferNotified,
)
from .message import parse_name_address
from .options import SipOptions
from .sdp import Negotiated

__all__ = ["MediaCall", "OpenMedia", "SipEndpoint", "SipLine"]

logger = logging.getLogger("rejoinder.io.sip")


class MediaCall(Protocol):
    """What the endpoint needs of a call's RTP (``media.RtpCall`` is one)."""

    local_port: int
    connection: Connection
    on_dead: Callable[[str], None] | None

    def update_remote(
        self, host: str, port: int, payload_type: int, codec: str, dtmf_payload_type: int | None
    ) -> None: ...

    def set_hold(self, held: bool) -> None: ...

    async def send_dtmf(self, digits: str) -> None: ...

    def client_left(self, reason: str) -> None: ...

    async def aclose(self) -> None: ...


OpenMedia = Callable[..., Awaitable[MediaCall]]
"""``RtpCall.open``'s signature: keyword arguments only."""


class SipLine:
    """A SIP call's phone line (``conn.line``): transfers and keys."""

    def __init__(self, endpoint: SipEndpoint, call: _Call) -> None:
        self._endpoint = endpoint
        self._call = call

    @property
    def call_id(self) -> str:
        return self._call.dialog.call_id

    async def send_dtmf(self, digits: str) -> None:
        await self._call.media.send_dtmf(digits)

    async def transfer(self, target: str) -> None:
        """REFER the caller to ``target`` and wait for the NOTIFY saying the target
        answered; ``TransferFailed`` (the call stays) when refused, failed or too slow."""
        await self._endpoint._transfer(self._call, target)


class _Call:
    def __init__(self, dialog: Dialog, media: MediaCall) -> None:
        self.dialog = dialog
        self.media = media
        self.refer_answer: asyncio.Future[int] | None = None
        self.notified: asyncio.Queue[tuple[int, bool]] = asyncio.Queue()


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, endpoint: SipEndpoint) -> None:
        self.endpoint = endpoint

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.endpoint._received(data, (str(addr[0]), int(addr[1])))

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable and the like
        logger.debug("SIP socket error: %s", exc)


class SipEndpoint:
    """Answers SIP calls with the agent (see the module docstring)."""

    def __init__(
        self,
        entrypoint: Entrypoint,
        *,
        gate: SessionGate[Connection],
        options: SipOptions | None = None,
        open_media: OpenMedia | None = None,
    ) -> None:
        self.entrypoint = entrypoint
        self.gate = gate
        self.options = opts = options or SipOptions()
        self._open_media = open_media
        self._core: SipCore | None = None
        self._authority = opts.authority()
        self._transport: asyncio.DatagramTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._calls: dict[int, _Call] = {}
        """id(dialog) -> the call, once its media is open."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._routes: dict[str, str] = {}
        self.address: Address | None = None

    # --------------------------------------------------------------- life

    async def start(self) -> Address:
        """Bind the UDP socket; return the bound (host, port)."""
        if self._transport is not None:
            raise RuntimeError("the SIP endpoint is already started")
        loop = asyncio.get_running_loop()
        opts = self.options
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Protocol(self), local_addr=(opts.host, opts.port)
        )
        self._transport = transport
        bound = transport.get_extra_info("sockname")
        self.address = (str(bound[0]), int(bound[1]))
        self._core = SipCore(
            port=self.address[1],
            advertise=self.advertised_host,
            allow_from=opts.networks(),
            authority=self._authority,
            timers=opts.timers,
            rate_limit=opts.rate_limiter(),
            user_agent=opts.user_agent,
        )
        logger.info("SIP listening on udp %s:%d", *self.address)
        return self.address

    async def aclose(self) -> None:
        """Hang up every live call (BYE), end its session and close the socket."""
        for call in list(self._calls.values()):
            self._hang_up(call, "server closing")
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=2.0)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=1.0)
        if self._timer is not None:
            self._timer.cancel()
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    @property
    def connections(self) -> list[Connection]:
        """The connections of the calls with media open."""
        return [call.media.connection for call in self._calls.values()]

    def advertised_host(self, peer: Address) -> str:
        """Our address as ``peer`` should reach it (see ``SipOptions.public_host``)."""
        opts = self.options
        if opts.public_host is not None:
            return opts.public_host
        if not opts.wildcard:
            return self.address[0] if self.address else opts.host
        route = self._routes.get(peer[0])
        if route is None:
            route = _route_toward(peer[0])
            if len(self._routes) > 1000:
                self._routes.clear()
            self._routes[peer[0]] = route
        return route

    # ------------------------------------------------------------ the wire

    def _received(self, data: bytes, source: Address) -> None:
        core = self._core
        if core is None:
            return
        try:
            outputs = core.receive(data, source, asyncio.get_running_loop().time())
        except Exception:  # a bug of ours must not stop the other calls
            logger.exception("SIP datagram from %s failed", source[0])
            return
        self._act(outputs)

    def _act(self, outputs: list[Output]) -> None:
        for output in outputs:
            if isinstance(output, Send):
                if self._transport is not None:
                    self._transport.sendto(output.data, output.to)
            else:
                try:
                    self._event(output)
                except Exception:
                    logger.exception("SIP event %s failed", type(output).__name__)
        self._arm_timer()

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self._core.deadline if self._core is not None else None
        if deadline is not None and self._transport is not None:
            self._timer = asyncio.get_running_loop().call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._core is not None:
            self._act(self._core.poll(asyncio.get_running_loop().time()))

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    # ------------------------------------------------------------- events

    def _event(self, event: object) -> None:
        core = self._core
        assert core is not None
        if isinstance(event, CallOffered):
            self._offered(event.dialog, event.negotiated)
            return
        call = self._calls.get(id(getattr(event, "dialog", None)))
        if isinstance(event, CallEnded) and call is not None:
            call.media.client_left(event.reason)
        elif isinstance(event, CallCancelled):
            logger.info("SIP call %s cancelled before the answer", event.dialog.call_id)
        elif isinstance(event, MediaChanged) and call is not None:
            n = event.negotiated
            call.media.update_remote(
                n.remote_host, n.remote_port, n.payload_type, n.codec, n.dtmf_payload_type
            )
            call.media.set_hold(n.held)
        elif isinstance(event, ReferAnswered) and call is not None:
            if call.refer_answer is not None and not call.refer_answer.done():
                call.refer_answer.set_result(event.status)
        elif isinstance(event, TransferNotified) and call is not None:
            call.notified.put_nowait((event.status, event.final))
        elif isinstance(event, KeysPressed) and call is not None:
            call.media.connection.keypad(event.key)

    def _offered(self, dialog: Dialog, negotiated: Negotiated) -> None:
        core = self._core
        assert core is not None
        # linger: the place stays held while the media opens, until gate.run claims it
        with self.gate.admit(linger=self.options.media_timeout + 1.0) as admission:
            if admission is None:
                if self.gate.draining:
                    headers = [("Retry-After", str(self.options.retry_after))]
                    self._act(core.reject(dialog, 503, "Service Unavailable", self._now(), headers))
                else:
                    self._act(core.reject(dialog, 486, "Busy Here", self._now()))
                logger.info("SIP call %s refused: %s", dialog.call_id, self.gate.refusal())
                return
            task = asyncio.get_running_loop().create_task(
                self._run_call(dialog, negotiated, admission),
                name=f"rejoinder-sip-{dialog.call_id[:24]}",
            )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_call(self, dialog: Dialog, negotiated: Negotiated, admission: Admission) -> None:
        core = self._core
        assert core is not None
        try:
            media = await asyncio.wait_for(
                self._open(dialog, negotiated), timeout=self.options.media_timeout
            )
        except Exception as exc:
            admission.release()
            logger.error("SIP call %s: the media did not open: %r", dialog.call_id, exc)
            if isinstance(exc, OSError):  # no free RTP port, too slow: try again later
                retry = [("Retry-After", str(self.options.retry_after))]
                self._act(core.reject(dialog, 503, "Service Unavailable", self._now(), retry))
            else:
                self._act(core.reject(dialog, 500, "Server Internal Error", self._now()))
            return
        if dialog.state != "offered":  # cancelled, or hung up, while the media opened
            admission.release()
            await media.aclose()
            return
        call = _Call(dialog, media)
        self._calls[id(dialog)] = call
        media.on_dead = lambda reason: self._hang_up(call, reason)
        conn = media.connection
        conn.line = SipLine(self, call)
        media_address = (self.advertised_host(dialog.peer), media.local_port)
        self._act(core.accept(dialog, negotiated, media_address, self._now()))
        try:
            await self.gate.run(self.entrypoint, conn)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("the entry point failed for SIP call %s", dialog.call_id)
        finally:
            if dialog.state != "ended" and self.options.hangup_delay > 0:
                # The agent hung up: its last words are still in the caller's jitter
                # buffer; a BYE now would cut them off.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(self.options.hangup_delay)
            self._hang_up(call, "session ended")
            self._calls.pop(id(dialog), None)
            try:
                await media.aclose()
            except Exception:
                logger.exception("closing the media of SIP call %s failed", dialog.call_id)

    async def _open(self, dialog: Dialog, negotiated: Negotiated) -> MediaCall:
        open_media = self._open_media
        if open_media is None:
            from .media import RtpCall  # the RTP half: numpy and the codecs, lazily

            open_media = RtpCall.open
        params: Mapping[str, str] = {
            name[2:]: value for name, value in dialog.invite.headers if name.startswith("X-")
        }
        return await open_media(
            bind_host=self._media_bind_host(),
            remote_host=negotiated.remote_host,
            remote_port=negotiated.remote_port,
            codec=negotiated.codec,
            payload_type=negotiated.payload_type,
            dtmf_payload_type=negotiated.dtmf_payload_type,
            call_id=dialog.call_id,
            from_number=dialog.from_number,
            to_number=dialog.to_number,
            parameters=params,
            remote=dialog.peer[0],
            options=self.options.media,
        )

    def _media_bind_host(self) -> str:
        return self.options.host if self.address is None else self.address[0]

    def _hang_up(self, call: _Call, reason: str) -> None:
        """We end the call: BYE (once), and the session ends with ``reason``."""
        if self._core is not None and call.dialog.state != "ended":
            logger.info("SIP call %s: hanging up (%s)", call.dialog.call_id, reason)
            self._act(self._core.hangup(call.dialog, self._now()))
        call.media.client_left(reason)

    # ---------------------------------------------------------- transfers

    async def transfer(self, call: str | Connection, target: str) -> None:
        """Transfer a live call (its Call-ID or its ``Connection``) to ``target``; on
        success its session ends with the reason ``"transferred"``."""
        found = next(
            (
                c
                for c in self._calls.values()
                if c.dialog.call_id == call or c.media.connection is call
            ),
            None,
        )
        if found is None:
            raise RuntimeError(f"no live SIP call {call!r}")
        await self._transfer(found, target)
        found.media.client_left("transferred")

    async def _transfer(self, call: _Call, target: str) -> None:
        core = self._core
        if core is None or call.dialog.state != "confirmed":
            raise TransferFailed("the call is not up: nothing to transfer")
        if call.refer_answer is not None and not call.refer_answer.done():
            raise TransferFailed("a transfer of this call is already under way")
        uri = _target_uri(target, call.dialog)
        loop = asyncio.get_running_loop()
        call.refer_answer = loop.create_future()
        while not call.notified.empty():  # a former transfer's late news
            call.notified.get_nowait()
        self._act(core.refer(call.dialog, uri, self._now()))
        try:
            async with asyncio.timeout(self.options.transfer_timeout):
                status = await call.refer_answer
                if not 200 <= status < 300:
                    raise TransferFailed(f"the transfer to {target} was refused ({status})")
                while True:
                    status, final = await call.notified.get()
                    if final:
                        break
        except TimeoutError:
            raise TransferFailed(f"the transfer to {target} did not complete in time") from None
        if not 200 <= status < 300:
            raise TransferFailed(f"the transfer to {target} failed ({status})")
        logger.info("SIP call %s transferred to %s", call.dialog.call_id, uri)


def _target_uri(target: str, dialog: Dialog) -> str:
    """A ``sip:``/``sips:``/``tel:`` URI as given; a number (``+15551234567``) as a SIP
    URI at the host of the caller's side (the trunk that will place the new call)."""
    text = target.strip()
    if text.lower().startswith(("sip:", "sips:", "tel:")):
        return text
    if not text or any(c not in "+0123456789*#" for c in text):
        raise TransferFailed(f"transfer target {target!r} is neither a number nor a URI")
    host = parse_name_address(dialog.remote_target).uri.split("@")[-1].split(";")[0]
    host = host.split(":", 1)[-1] if host.lower().startswith(("sip:", "sips:")) else host
    return f"sip:{text}@{host}"


def _route_toward(host: str) -> str:
    """The local address the system would send from to reach ``host`` (no packet sent)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1" if family == socket.AF_INET else "::1"
