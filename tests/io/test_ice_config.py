"""The ICE configuration (rejoinder.io.webrtc.ice_config): STUN/TURN URLs, TURN REST
credentials, the command line and environment, what ``GET /api/ice`` and ``ready`` give a
client, and that the protocol's schema takes it. No socket but the app's, on loopback;
the credentials' acceptance by a real TURN server is tests/io/test_turn_relay.py's."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from rejoinder.io.protocol import (
    IceServerInfo,
    ProtocolError,
    Ready,
    encode,
    parse_server_message,
)
from rejoinder.io.webrtc import IceServer, WebRTCOptions
from rejoinder.io.webrtc.ice_config import (
    DEFAULT_TURN_TTL,
    IceConfig,
    add_ice_arguments,
    ice_config_from_args,
    parse_ice_url,
    ready_with_ice,
    turn_rest_credentials,
    webrtc_options_from_args,
)

ROOT = Path(__file__).parents[2]
TURN = "turn:turn.example.org:3478?transport=udp"
STUN = "stun:stun.example.org:3478"


# ------------------------------------------------------------------ URLs


@pytest.mark.parametrize(
    "url",
    [
        "stun:stun.example.org",
        "stun:stun.example.org:3478",
        "stuns:stun.example.org:5349",
        "turn:198.51.100.7:3478",
        "turn:turn.example.org:3478?transport=udp",
        "TURN:turn.example.org:3478?transport=tcp",
        "turns:turn.example.org:443?transport=tcp",
        "turn:[2001:db8::1]:3478?transport=udp",
        "stun:[::1]",
        "  stun:trimmed.example  ",
    ],
)
def test_stun_and_turn_urls_are_taken(url: str) -> None:
    assert parse_ice_url(url) == url.strip()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://turn.example.org", "starts with stun:, stuns:, turn: or turns:"),
        ("turn.example.org:3478", "starts with stun:"),
        ("turn://turn.example.org:3478", "has no '//'"),
        ("stun:", "no valid host"),
        ("stun:bad_host", "no valid host"),
        ("turn:host name:3478", "no valid host"),
        ("turn:example.org:0", "a port is 1 to 65535"),
        ("turn:example.org:70000", "a port is 1 to 65535"),
        ("turn:example.org:port", "a port is 1 to 65535"),
        ("turn:[2001:db8::1:3478", "ends with ']'"),
        ("turn:[not-v6]:3478", "not an IPv6 address"),
        ("turn:[::1]3478", "expected ':port'"),
        ("stun:example.org?transport=udp", "a STUN URL takes no query"),
        ("turn:example.org?transport=sctp", "?transport=udp|tcp"),
        ("turns:example.org?transport=udp", "?transport=tcp"),
        ("turn:example.org?proto=udp", "?transport=udp|tcp"),
    ],
)
def test_what_is_not_a_stun_or_turn_url_is_refused_saying_why(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        parse_ice_url(url)


@given(st.text(max_size=40))
def test_any_text_is_a_url_or_a_value_error(text: str) -> None:
    try:
        url = parse_ice_url(text)
    except ValueError:
        return
    assert url.split(":", 1)[0].lower() in ("stun", "stuns", "turn", "turns")


# ------------------------------------------------------------ credentials


def test_turn_rest_credentials_are_coturns_formula() -> None:
    # the password as `openssl dgst -sha1 -hmac north-wind -binary | base64` makes it
    assert turn_rest_credentials("north-wind", "alice", 1700000000) == (
        "1700000000:alice",
        "Oko4dt8u/EbTRjRUJWQDFm/zTCc=",
    )
    _, password = turn_rest_credentials("north-wind", "bob", 1700000000)
    assert len(base64.b64decode(password)) == 20  # an SHA-1 HMAC
    assert password != "Oko4dt8u/EbTRjRUJWQDFm/zTCc="


def test_each_client_gets_its_own_credentials_valid_for_the_ttl() -> None:
    ice = IceConfig(urls=(STUN, TURN), secret="s3cret", ttl=600)
    mine = ice.for_client("session_ab12", now=1_000_000.5)
    stun, turn = mine.servers
    assert stun == IceServer(urls=(STUN,))
    assert turn.urls == (TURN,)
    assert turn.username == "1000600:session_ab12"
    assert (turn.username, turn.credential) == turn_rest_credentials(
        "s3cret", "session_ab12", 1000600
    )
    assert mine.ttl == 600 and mine.transport_policy == "all"
    other = ice.for_client("session_cd34", now=1_000_000.5).servers[1]
    assert other.credential != turn.credential
    # a user id cannot smuggle a separator (nor anything else) into the username
    odd = ice.for_client("a:b c/d", now=0).servers[1]
    assert odd.username == "600:a_b_c_d"
    assert ice.for_client("::", now=0).servers[1].username == "600:rejoinder"


def test_static_credentials_are_the_same_for_everyone_and_have_no_ttl() -> None:
    ice = IceConfig(urls=(TURN,), username="alice", password="wonderland")
    one, two = ice.for_client("x"), ice.for_client("y")
    assert one == two
    assert one.servers == (IceServer(urls=(TURN,), username="alice", credential="wonderland"),)
    assert one.as_json() == {
        "ice_servers": [{"urls": [TURN], "username": "alice", "credential": "wonderland"}],
        "ice_transport_policy": "all",
    }


def test_secrets_never_show_in_a_repr_or_the_summary() -> None:
    for ice in (
        IceConfig(urls=(TURN,), secret="s3cret-value"),
        IceConfig(urls=(TURN,), username="alice", password="s3cret-value"),
    ):
        assert "s3cret-value" not in repr(ice)
        assert "s3cret-value" not in ice.summary()
        assert "s3cret-value" not in repr(WebRTCOptions(ice=ice))
    assert IceConfig(urls=(STUN, TURN), secret="x", transport_policy="relay").summary() == (
        f"{STUN}, {TURN}; TURN credentials minted per client, valid 3600 s; clients relay only"
    )


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"urls": (TURN,)}, "needs credentials"),
        ({"urls": (STUN,), "secret": "x"}, "no turn: or turns: URL"),
        ({"urls": (TURN,), "secret": "x", "username": "a", "password": "b"}, "one way"),
        ({"urls": (TURN,), "username": "a"}, "both a user and a password"),
        ({"urls": (TURN,), "secret": ""}, "secret is empty"),
        ({"urls": (TURN,), "secret": "x", "ttl": 59}, "60 to 86400"),
        ({"urls": (TURN,), "secret": "x", "ttl": float("nan")}, "60 to 86400"),
        ({"urls": (STUN,), "transport_policy": "relay"}, "relay-only ICE policy needs"),
        ({"urls": (TURN,), "secret": "x", "transport_policy": "nohost"}, '"all" or "relay"'),
        ({"urls": ("turn://x",), "secret": "x"}, "has no '//'"),
    ],
)
def test_a_configuration_that_does_not_add_up_is_refused(config: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        IceConfig(**config)


def test_the_server_itself_uses_the_stun_servers_only() -> None:
    assert IceConfig(urls=(STUN, TURN), secret="x").server_ice_servers() == (
        IceServer(urls=(STUN,)),
    )
    assert IceConfig(urls=(TURN,), secret="x").server_ice_servers() == ()


# ------------------------------------------------------------ command line


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_ice_arguments(parser)
    return parser.parse_args(argv)


def test_the_arguments_build_the_configuration() -> None:
    args = parse(
        ["--ice-server", STUN, "--ice-server", TURN, "--turn-secret", "s", "--turn-ttl", "900"]
    )
    assert ice_config_from_args(args, {}) == IceConfig(urls=(STUN, TURN), secret="s", ttl=900)
    args = parse(["--ice-server", TURN, "--turn-user", "a", "--turn-password", "b"])
    args.ice_transport_policy = "relay"
    config = ice_config_from_args(args, {})
    assert config == IceConfig(urls=(TURN,), username="a", password="b", transport_policy="relay")


def test_the_environment_fills_in_what_the_command_line_leaves_out() -> None:
    env = {
        "REJOINDER_ICE_SERVERS": f"{STUN}, {TURN}\n",
        "REJOINDER_TURN_SECRET": "from-env",
    }
    config = ice_config_from_args(parse([]), env)
    assert config == IceConfig(urls=(STUN, TURN), secret="from-env", ttl=DEFAULT_TURN_TTL)
    # the command line wins
    config = ice_config_from_args(parse(["--ice-server", TURN, "--turn-secret", "cli"]), env)
    assert config is not None and config.urls == (TURN,) and config.secret == "cli"
    env = {"REJOINDER_TURN_USER": "alice", "REJOINDER_TURN_PASSWORD": "wonderland"}
    config = ice_config_from_args(parse(["--ice-server", TURN]), env)
    assert config is not None and (config.username, config.password) == ("alice", "wonderland")


def test_nothing_configured_is_none_and_the_apps_default_options() -> None:
    assert ice_config_from_args(parse([]), {}) is None
    assert webrtc_options_from_args(parse([]), {}) is None
    assert ice_config_from_args(argparse.Namespace(), {}) is None  # a parser without them


def test_mistakes_are_value_errors_for_the_cli_to_print() -> None:
    with pytest.raises(ValueError, match="needs credentials"):
        ice_config_from_args(parse(["--ice-server", TURN]), {})
    with pytest.raises(ValueError, match="no turn: or turns: URL"):
        ice_config_from_args(parse(["--turn-secret", "x"]), {})
    with pytest.raises(ValueError, match="needs a TURN server"):
        ice_config_from_args(parse(["--ice-transport-policy", "relay"]), {})
    with pytest.raises(SystemExit):  # argparse's own usage error
        parse(["--turn-ttl", "5"])


def test_webrtc_options_carry_the_configuration_and_the_servers_stun() -> None:
    pytest.importorskip("aiortc", reason="the webrtc extra is not installed")
    args = parse(["--ice-server", STUN, "--ice-server", TURN, "--turn-secret", "s"])
    base = WebRTCOptions(host_addresses=["127.0.0.1"])
    options = webrtc_options_from_args(args, {}, base=base)
    assert options is not None
    assert options.ice == IceConfig(urls=(STUN, TURN), secret="s")
    assert options.ice_servers == (IceServer(urls=(STUN,)),)
    assert options.host_addresses == ["127.0.0.1"]  # the rest of base kept


# ---------------------------------------------------------- what clients get


@pytest.mark.looptime(False)
async def test_get_api_ice_mints_credentials_per_request_and_is_never_cached() -> None:
    pytest.importorskip("aiortc", reason="the webrtc extra is not installed")
    from rejoinder.io.webrtc import ICE_PATH, add_webrtc_routes

    async def entrypoint(_: Any) -> None:
        raise AssertionError("no offer is made here")

    bodies: list[dict[str, Any]] = []
    for options in (
        WebRTCOptions(),
        WebRTCOptions(ice=IceConfig(urls=(STUN, TURN), secret="s", transport_policy="relay")),
    ):
        app = web.Application()
        add_webrtc_routes(app, entrypoint, options)
        async with TestClient(TestServer(app, host="127.0.0.1")) as http:
            for _ in range(2):
                resp = await http.get(ICE_PATH)
                assert resp.status == 200
                assert resp.headers["Cache-Control"] == "no-store"
                bodies.append(await resp.json())
    assert bodies[0] == bodies[1] == {"ice_servers": [], "ice_transport_policy": "all"}
    one, two = bodies[2], bodies[3]
    assert one["ice_transport_policy"] == "relay" and one["ttl"] == DEFAULT_TURN_TTL
    assert one["ice_servers"][0] == {"urls": [STUN]}
    first, second = one["ice_servers"][1], two["ice_servers"][1]
    assert first["urls"] == [TURN]
    assert first["username"].split(":")[1].startswith("client_")
    assert first["username"] != second["username"]  # one user id per request
    expires, user = first["username"].split(":")
    assert (first["username"], first["credential"]) == turn_rest_credentials(
        "s", user, int(expires)
    )


def test_ready_carries_the_servers_minted_for_its_session() -> None:
    ready = Ready(sample_rate=48000, session_id="session_1")
    assert ready_with_ice(ready, None) is ready
    ice = IceConfig(urls=(STUN, TURN), secret="s", transport_policy="relay")
    told = ready_with_ice(ready, ice, "session_9")
    assert told.ice_transport_policy == "relay"
    assert told.ice_servers is not None
    stun, turn = told.ice_servers
    assert stun == IceServerInfo(urls=[STUN])
    assert turn.urls == [TURN] and turn.username is not None
    assert turn.username.endswith(":session_9")
    assert ready_with_ice(ready, ice).ice_servers[1].username.endswith(":session_1")  # type: ignore[index]
    # on the wire, and back
    assert parse_server_message(encode(told)) == told


def test_the_schema_takes_a_ready_with_ice_servers() -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema validates messages here")
    schema = json.loads((ROOT / "clients" / "protocol.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    ice = IceConfig(urls=(STUN, TURN), username="a", password="b", transport_policy="relay")
    told = ready_with_ice(Ready(sample_rate=48000), ice, "s")
    validator.validate(json.loads(encode(told)))
    refused = [
        {"type": "ready", "sample_rate": 48000, "ice_servers": [{"urls": []}]},
        {"type": "ready", "sample_rate": 48000, "ice_servers": [{"username": "a"}]},
        {"type": "ready", "sample_rate": 48000, "ice_transport_policy": "nohost"},
    ]
    for message in refused:
        assert not validator.is_valid(message), message
        with pytest.raises(ProtocolError, match="invalid server message"):
            parse_server_message(json.dumps(message))


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_a_websocket_ready_carries_webrtcs_servers_minted_for_its_session() -> None:
    """A page that fell back to the WebSocket learns where to try WebRTC next from its
    ``ready``: the same servers as ``/api/ice``, TURN credentials minted for the session;
    without ICE servers configured, ``ready`` has no such fields."""
    import aiohttp

    import rejoinder as rj
    from rejoinder.io import Connection, create_app
    from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedTTS, ScriptedVAD

    pytest.importorskip("aiortc", reason="the webrtc extra is not installed")
    sessions: list[rj.AgentSession[Any]] = []

    async def entrypoint(conn: Connection) -> None:
        session: rj.AgentSession[Any] = rj.AgentSession(
            vad=ScriptedVAD(), stt=ScriptedSTT([]), llm=ScriptedLLM([]), tts=ScriptedTTS()
        )
        sessions.append(session)
        try:
            await conn.serve(session, rj.Agent(instructions="test"))
        finally:
            served.set()

    served = asyncio.Event()

    async def first_ready(webrtc: Any) -> dict[str, Any]:
        served.clear()
        server = TestServer(create_app(entrypoint, webrtc=webrtc), host="127.0.0.1")
        await server.start_server()
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.ws_connect(server.make_url("/ws")) as ws,
            ):
                await ws.send_str(json.dumps({"type": "start", "sample_rate": 16000}))
                while True:
                    message = json.loads(await asyncio.wait_for(ws.receive_str(), 10))
                    if message["type"] == "ready":
                        break
            await asyncio.wait_for(served.wait(), 10)  # the session ended with the socket
            return message
        finally:
            await server.close()

    plain = await first_ready(False)
    assert "ice_servers" not in plain and "ice_transport_policy" not in plain
    ice = IceConfig(urls=(STUN, TURN), secret="s", transport_policy="relay")
    told = await first_ready(WebRTCOptions(ice=ice))
    assert told["ice_transport_policy"] == "relay"
    stun, turn = told["ice_servers"]
    assert stun == {"urls": [STUN]} and turn["urls"] == [TURN]
    expires, user = turn["username"].split(":")
    assert user == sessions[-1].id  # minted for this session
    assert (turn["username"], turn["credential"]) == turn_rest_credentials("s", user, int(expires))
