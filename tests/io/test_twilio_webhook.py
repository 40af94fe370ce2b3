"""Twilio's voice webhook without a server: the signature check against Twilio's own example,
the TwiML answer parsed back, the URLs Twilio signs and streams to, one-time stream tokens."""

from __future__ import annotations

import base64
import hashlib
import hmac
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rejoinder.io.telephony.twilio_webhook import (
    TOKEN_PARAMETER,
    AnnouncedStreams,
    stream_url_for,
    twilio_signature,
    twiml_connect_stream,
    validate_twilio_signature,
    webhook_url_for,
    xml_can_carry,
)

# The worked example of https://www.twilio.com/docs/usage/security ("Validating requests are
# coming from Twilio"): auth token 12345, a POST to this URL with these parameters. (Older
# copies of the page used +14158675309 for Caller/From, signed RSOYDt4T1cUTdK1PDd93/VVr8B8=.)
DOC_TOKEN = "12345"
DOC_URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
DOC_PARAMS = {
    "CallSid": "CA1234567890ABCDE",
    "Caller": "+12349013030",
    "Digits": "1234",
    "From": "+12349013030",
    "To": "+18005551212",
}
DOC_SIGNATURE = "0/KCTR6DLpKmkAf8muzZqo1nDgQ="


def by_hand(token: str, data: str) -> str:
    """The documented algorithm, applied to an already-assembled string."""
    return base64.b64encode(hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()).decode()


def test_the_documented_example() -> None:
    assert twilio_signature(DOC_TOKEN, DOC_URL, DOC_PARAMS) == DOC_SIGNATURE
    assert validate_twilio_signature(DOC_TOKEN, DOC_URL, DOC_PARAMS, DOC_SIGNATURE)
    older = {**DOC_PARAMS, "Caller": "+14158675309", "From": "+14158675309"}
    assert twilio_signature(DOC_TOKEN, DOC_URL, older) == "RSOYDt4T1cUTdK1PDd93/VVr8B8="


def test_the_current_documented_example() -> None:
    # The page as it reads now: example.com and +14158675310 (recomputed by hand too).
    url = "https://example.com/myapp.php?foo=1&bar=2"
    params = {
        "Digits": "1234",
        "To": "+18005551212",
        "From": "+14158675310",
        "Caller": "+14158675310",
        "CallSid": "CA1234567890ABCDE",
    }
    signed = (
        "https://example.com/myapp.php?foo=1&bar=2CallSidCA1234567890ABCDE"
        "Caller+14158675310Digits1234From+14158675310To+18005551212"
    )
    expected = "L/OH5YylLD5NRKLltdqwSvS0BnU="
    assert by_hand("12345", signed) == expected
    assert twilio_signature("12345", url, params) == expected
    assert validate_twilio_signature("12345", url, params, expected)
    assert validate_twilio_signature("12345", url.replace(".com/", ".com:443/"), params, expected)
    assert not validate_twilio_signature("12345", url, {**params, "To": "+18005551213"}, expected)


def test_parameters_are_sorted_by_name_whatever_their_order() -> None:
    shuffled = dict(reversed(list(DOC_PARAMS.items())))
    assert twilio_signature(DOC_TOKEN, DOC_URL, shuffled) == DOC_SIGNATURE
    # case-sensitive code-point order: "B" < "a"
    data = "https://x.test/hB2a1"
    assert twilio_signature("t", "https://x.test/h", {"a": "1", "B": "2"}) == by_hand("t", data)


def test_a_repeated_name_signs_each_value_in_sorted_order() -> None:
    expected = by_hand("t", "https://x.test/hMediaUrla1MediaUrlb2Z9")
    params = {"Z": "9", "MediaUrl": ["b2", "a1"]}
    assert twilio_signature("t", "https://x.test/h", params) == expected
    assert validate_twilio_signature("t", "https://x.test/h", params, expected)


def test_no_parameters_signs_the_url_alone() -> None:
    assert twilio_signature("t", "https://x.test/h?a=1", {}) == by_hand("t", "https://x.test/h?a=1")


def test_a_port_variant_keeps_the_rest_of_the_url_exactly() -> None:
    signature = twilio_signature("t", "https://x.test:443/h?", {})  # the bare "?" is signed
    assert validate_twilio_signature("t", "https://x.test/h?", {}, signature)
    assert not validate_twilio_signature("t", "https://x.test/h", {}, signature)


@pytest.mark.parametrize(
    ("signed", "checked"),
    [
        ("https://mycompany.com:443/myapp.php?foo=1&bar=2", DOC_URL),  # proxy dropped :443
        (DOC_URL, "https://mycompany.com:443/myapp.php?foo=1&bar=2"),  # proxy added :443
        ("http://u:p@x.test:80/h", "http://u:p@x.test/h"),
        ("http://u:p@x.test/h", "http://u:p@x.test:80/h"),
        ("https://[2001:db8::1]:443/h", "https://[2001:db8::1]/h"),
    ],
)
def test_default_port_variants_validate(signed: str, checked: str) -> None:
    signature = twilio_signature(DOC_TOKEN, signed, DOC_PARAMS)
    assert validate_twilio_signature(DOC_TOKEN, checked, DOC_PARAMS, signature)


@pytest.mark.parametrize(
    ("signed", "checked"),
    [
        ("https://x.test:8443/h", "https://x.test/h"),  # only the default port is optional
        ("https://x.test/h", "https://x.test:8443/h"),
        ("http://x.test:443/h", "http://x.test/h"),  # 443 is not http's default
        ("https://x.test/h", "http://x.test/h"),  # the scheme is signed
    ],
)
def test_other_url_differences_fail(signed: str, checked: str) -> None:
    signature = twilio_signature("t", signed, {})
    assert not validate_twilio_signature("t", checked, {}, signature)


def test_tampering_fails() -> None:
    ok = (DOC_TOKEN, DOC_URL, DOC_PARAMS, DOC_SIGNATURE)
    assert validate_twilio_signature(*ok)
    assert not validate_twilio_signature("54321", DOC_URL, DOC_PARAMS, DOC_SIGNATURE)
    assert not validate_twilio_signature(DOC_TOKEN, DOC_URL + "&x=1", DOC_PARAMS, DOC_SIGNATURE)
    assert not validate_twilio_signature(
        DOC_TOKEN, DOC_URL, {**DOC_PARAMS, "Digits": "1235"}, DOC_SIGNATURE
    )
    assert not validate_twilio_signature(
        DOC_TOKEN, DOC_URL, {**DOC_PARAMS, "Extra": ""}, DOC_SIGNATURE
    )
    for bad in ("", "0/KCTR6DLpKmkAf8muzZqo1nDgQ", "1/KCTR6DLpKmkAf8muzZqo1nDgQ=", "é"):
        assert not validate_twilio_signature(DOC_TOKEN, DOC_URL, DOC_PARAMS, bad)
    assert not validate_twilio_signature(DOC_TOKEN, "https://x.test:99999/h", {}, "x")


@given(
    params=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), min_size=1),
    data=st.data(),
)
def test_changing_any_value_changes_the_signature(
    params: dict[str, str], data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(params)))
    new = data.draw(st.text(max_size=8).filter(lambda v: v != params[name]))
    changed = {**params, name: new}
    assert twilio_signature("t", "https://x.test/h", changed) != twilio_signature(
        "t", "https://x.test/h", params
    )


def parsed(twiml: str) -> ET.Element:
    assert twiml.startswith('<?xml version="1.0" encoding="UTF-8"?><Response>')
    root = ET.fromstring(twiml.encode())
    assert root.tag == "Response"
    assert [child.tag for child in root] == ["Connect"]
    assert [child.tag for child in root[0]] == ["Stream"]
    return root[0][0]


def test_twiml_connect_stream_round_trips_url_and_parameters() -> None:
    weird = "a&b<c>\"d'e\n\tf"
    stream = parsed(
        twiml_connect_stream(
            "wss://x.test/twilio?&<", {TOKEN_PARAMETER: "tok", "who": weird, '"&<': "v"}
        )
    )
    assert stream.get("url") == "wss://x.test/twilio?&<"
    got = [(p.tag, p.get("name"), p.get("value")) for p in stream]
    expected = [(TOKEN_PARAMETER, "tok"), ("who", weird), ('"&<', "v")]
    assert got == [("Parameter", name, value) for name, value in expected]


def test_twiml_connect_stream_without_parameters() -> None:
    assert len(parsed(twiml_connect_stream("ws://localhost:8080/twilio"))) == 0
    assert len(parsed(twiml_connect_stream("WSS://x.test/t", {}))) == 0


@pytest.mark.parametrize(
    "url",
    ["https://x.test/t", "http://x.test/t", "x.test/t", "wss://", "wss:///t", "", "wss://[::1"],
)
def test_twiml_connect_stream_refuses_non_websocket_urls(url: str) -> None:
    with pytest.raises(ValueError, match="ws:// or wss://"):
        twiml_connect_stream(url)


def test_twiml_connect_stream_refuses_what_xml_cannot_carry() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        twiml_connect_stream("wss://x.test/t", {"": "v"})
    with pytest.raises(ValueError, match="XML cannot carry"):
        twiml_connect_stream("wss://x.test/t", {"n": "bell\x07"})


@pytest.mark.parametrize(
    ("request_url", "public_url", "expected"),
    [
        ("http://127.0.0.1:8080/twilio/twiml?x=1", None, "ws://127.0.0.1:8080/twilio"),
        ("https://voice.example.com/twilio/twiml", None, "wss://voice.example.com/twilio"),
        (
            "http://127.0.0.1:8080/twilio/twiml",
            "https://abc.ngrok.app",
            "wss://abc.ngrok.app/twilio",
        ),
        ("http://127.0.0.1/t", "https://abc.ngrok.app/", "wss://abc.ngrok.app/twilio"),
        ("http://127.0.0.1/t", "wss://abc.ngrok.app/base", "wss://abc.ngrok.app/base/twilio"),
        ("http://127.0.0.1/t", "http://h.test:8000/a/b/", "ws://h.test:8000/a/b/twilio"),
    ],
)
def test_stream_url_for(request_url: str, public_url: str | None, expected: str) -> None:
    assert stream_url_for(request_url, public_url) == expected


def test_stream_url_for_custom_path() -> None:
    assert stream_url_for("https://h.test/x", None, "media") == "wss://h.test/media"
    assert stream_url_for("https://h.test/x", "https://p.test/b", "/m/s") == "wss://p.test/b/m/s"


LOCAL = "http://127.0.0.1:8080"
NGROK = "https://abc.ngrok.app"


@pytest.mark.parametrize(
    ("request_url", "public_url", "expected"),
    [
        (f"{LOCAL}/twilio/twiml?a=1&b=%20", None, f"{LOCAL}/twilio/twiml?a=1&b=%20"),
        (f"{LOCAL}/twilio/twiml", NGROK, f"{NGROK}/twilio/twiml"),
        (
            f"{LOCAL}/twilio/twiml?a=1&b=%20",
            f"{NGROK}/base/",
            f"{NGROK}/base/twilio/twiml?a=1&b=%20",
        ),
        (f"{LOCAL}/t", "wss://abc.ngrok.app/base", f"{NGROK}/base/twilio/twiml"),
        (f"{LOCAL}/t", "ws://h.test:8000", "http://h.test:8000/twilio/twiml"),
    ],
)
def test_webhook_url_for(request_url: str, public_url: str | None, expected: str) -> None:
    assert webhook_url_for(request_url, public_url) == expected


def test_webhook_url_for_is_what_the_signature_check_needs() -> None:
    public = webhook_url_for("http://10.0.0.5:8080/voice?x=1", "https://abc.ngrok.app", "/voice")
    signature = twilio_signature("t", "https://abc.ngrok.app/voice?x=1", DOC_PARAMS)
    assert validate_twilio_signature("t", public, DOC_PARAMS, signature)


@pytest.mark.parametrize(
    "public_url",
    ["abc.ngrok.app", "ftp://abc.ngrok.app", "https://", "https:///base", "https://h.test?x=1",
     "https://h.test/#frag", "https://h.test:notaport", ""],
)  # fmt: skip
def test_bad_public_urls_are_refused(public_url: str) -> None:
    with pytest.raises(ValueError, match="public URL"):
        stream_url_for("http://127.0.0.1/t", public_url)
    with pytest.raises(ValueError, match="public URL"):
        webhook_url_for("http://127.0.0.1/t", public_url)


def test_a_bad_request_url_is_refused_without_a_public_url() -> None:
    with pytest.raises(ValueError, match="request URL"):
        stream_url_for("/twilio/twiml", None)


def test_announced_stream_is_accepted_once() -> None:
    streams = AnnouncedStreams()
    token = streams.announce("CA1", now=100.0)
    assert len(token) >= 20
    assert streams.claim("CA1", token, now=101.0)
    assert not streams.claim("CA1", token, now=101.5)  # replay
    assert len(streams) == 0


def test_unknown_wrong_call_and_wrong_token_are_refused() -> None:
    streams = AnnouncedStreams()
    token = streams.announce("CA1", now=0.0)
    other = streams.announce("CA2", now=0.0)
    assert not streams.claim("CA9", token, now=1.0)  # never announced
    assert not streams.claim("CA2", token, now=1.0)  # CA1's token for CA2
    assert not streams.claim("CA1", "", now=1.0)
    assert not streams.claim("CA1", token + "x", now=1.0)
    # a wrong guess does not spoil the real stream
    assert streams.claim("CA1", token, now=2.0)
    assert streams.claim("CA2", other, now=2.0)


def test_a_new_announcement_replaces_the_old_token() -> None:
    streams = AnnouncedStreams()
    first = streams.announce("CA1", now=0.0)
    second = streams.announce("CA1", now=1.0)
    assert first != second
    assert not streams.claim("CA1", first, now=2.0)
    assert streams.claim("CA1", second, now=2.0)


def test_tokens_expire_after_ttl() -> None:
    streams = AnnouncedStreams(ttl=60.0)
    early = streams.announce("CA1", now=0.0)
    late = streams.announce("CA2", now=0.0)
    assert streams.claim("CA1", early, now=59.999)
    assert not streams.claim("CA2", late, now=60.0)
    assert len(streams) == 0
    # expired entries are dropped on announce, too
    streams.announce("CA3", now=100.0)
    streams.announce("CA4", now=170.0)
    assert len(streams) == 1


def test_the_oldest_is_evicted_over_max_entries() -> None:
    streams = AnnouncedStreams(max_entries=3)
    tokens = {sid: streams.announce(sid, now=float(i)) for i, sid in enumerate("ABCD")}
    assert len(streams) == 3
    assert not streams.claim("A", tokens["A"], now=5.0)
    assert all(streams.claim(sid, tokens[sid], now=5.0) for sid in "BCD")


def test_re_announcing_makes_a_call_the_newest() -> None:
    streams = AnnouncedStreams(max_entries=2)
    streams.announce("A", now=0.0)
    streams.announce("B", now=1.0)
    again = streams.announce("A", now=2.0)
    streams.announce("C", now=3.0)  # evicts B, not A
    assert streams.claim("A", again, now=4.0)
    assert len(streams) == 1


@pytest.mark.parametrize(("ttl", "max_entries"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_bad_limits_are_refused(ttl: float, max_entries: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        AnnouncedStreams(ttl=ttl, max_entries=max_entries)


def test_an_empty_call_sid_cannot_be_announced() -> None:
    with pytest.raises(ValueError, match="call_sid"):
        AnnouncedStreams().announce("", now=0.0)


def test_xml_can_carry() -> None:
    assert xml_can_carry("+1 <&> é")
    for bad in (None, "", "+1\x01", "\ud800", "\ufffe"):
        assert not xml_can_carry(bad)
