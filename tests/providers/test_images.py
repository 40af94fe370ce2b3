"""Images in each provider's own format: the conversions, and a request through each
loopback server carrying them (OpenAI-compatible chat, Anthropic, OpenAI Realtime)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import pytest

import rejoinder as rj
from rejoinder.models import ChatContext, RealtimeError
from rejoinder.models.realtime import RealtimeConfig
from rejoinder.providers import anthropic, openai
from rejoinder.providers.anthropic import _convert as anthropic_convert
from rejoinder.providers.openai import _convert as openai_convert
from rejoinder.testing import ScriptedLLM
from rejoinder.testing.anthropic_server import AnthropicServer, message
from rejoinder.testing.openai_chat_server import OpenAIChatServer, StreamReply, text_chunks
from rejoinder.testing.openai_realtime_server import OpenAIRealtimeServer

pytestmark = pytest.mark.looptime(noop_cycles=2000)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
PNG_B64 = base64.b64encode(PNG).decode()
SHOWN = rj.ImageContent.from_bytes(PNG, detail="low")
LINKED = rj.ImageContent.from_url("https://example.test/cat.jpg")


def shown(text: str = "What is this?") -> ChatContext:
    ctx = ChatContext()
    ctx.add_message(role="system", content="You can see.")
    ctx.add_message(role="user", content=text, images=[SHOWN, LINKED])
    return ctx


def test_openai_compatible_messages_carry_image_url_parts() -> None:
    messages = openai_convert.to_messages(shown())
    assert messages[0] == {"role": "system", "content": "You can see."}
    assert messages[1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {
                "type": "image_url",
                "image_url": {"url": f"data:image/png;base64,{PNG_B64}", "detail": "low"},
            },
            {"type": "image_url", "image_url": {"url": "https://example.test/cat.jpg"}},
        ],
    }
    only_image = openai_convert.to_messages(shown(""))[1]["content"]
    assert [part["type"] for part in only_image] == ["image_url", "image_url"]
    # Without images a message stays a plain string, as before.
    plain = ChatContext()
    plain.add_message(role="user", content="Hi")
    assert openai_convert.to_messages(plain) == [{"role": "user", "content": "Hi"}]


def test_anthropic_messages_put_image_blocks_before_the_words() -> None:
    system, messages = anthropic_convert.to_system_and_messages(shown())
    assert system == [{"type": "text", "text": "You can see."}]
    assert messages == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
                },
                {"type": "image", "source": {"type": "url", "url": "https://example.test/cat.jpg"}},
                {"type": "text", "text": "What is this?"},
            ],
        }
    ]


@pytest.fixture
async def chat_server() -> AsyncIterator[OpenAIChatServer]:
    async with OpenAIChatServer() as server:
        yield server


async def test_a_session_sends_the_image_to_an_openai_compatible_server(
    chat_server: OpenAIChatServer,
) -> None:
    chat_server.add(StreamReply(text_chunks("A square.")))
    llm = openai.LLM(model="gpt-test", base_url=chat_server.base_url, api_key="sk-test")
    session: rj.AgentSession[object] = rj.AgentSession(llm=llm, user_away_timeout=None)
    await session.start(rj.Agent(instructions="You can see."))
    session.add_image(SHOWN)
    assert (await session.run(user_input="What is this?")).final_output == "A square."
    user = chat_server.requests[0]["messages"][-1]
    assert user["content"][1]["image_url"]["url"] == f"data:image/png;base64,{PNG_B64}"
    await session.aclose()
    await llm.aclose()


async def test_a_session_sends_the_image_to_anthropic() -> None:
    async with AnthropicServer(api_key="sk-ant-test") as server:
        server.add(StreamReply(message("A square.")))
        llm = anthropic.LLM(model="claude-test", base_url=server.base_url, api_key="sk-ant-test")
        session: rj.AgentSession[object] = rj.AgentSession(llm=llm, user_away_timeout=None)
        await session.start(rj.Agent(instructions="You can see."))
        session.add_image(SHOWN)
        assert (await session.run(user_input="What is this?")).final_output == "A square."
        blocks = server.requests[0]["messages"][-1]["content"]
        assert [block["type"] for block in blocks] == ["image", "text"]
        assert blocks[0]["source"]["data"] == PNG_B64
        await session.aclose()
        await llm.aclose()


async def test_openai_realtime_gets_the_image_as_an_input_image_item() -> None:
    async with OpenAIRealtimeServer() as server:
        model = openai.Realtime(base_url=server.base_url, api_key="sk-test")
        rt = model.session()
        history = shown("Earlier picture")
        await rt.start(RealtimeConfig("Be brief.", (), lambda: history))
        rt.add_image(SHOWN)
        with pytest.raises(RealtimeError, match="not a link"):
            rt.add_image(LINKED)
        await server.wait_for("conversation.item.create", count=4)
        items = [e["item"] for e in server.received if e["type"] == "conversation.item.create"]
        images = [item for item in items if item["content"][0]["type"] == "input_image"]
        # One replayed with the history (the link is left out), one shown now.
        assert [item["content"][0]["image_url"] for item in images] == [
            f"data:image/png;base64,{PNG_B64}"
        ] * 2
        assert all(item["role"] == "user" for item in images)
        await rt.aclose()


async def test_a_realtime_model_that_cannot_see_says_so() -> None:
    from rejoinder.testing import GPTLiveServer

    async with GPTLiveServer() as server:
        llm = openai.GPTLive(base_url=server.base_url, api_key="sk-test")
        session: rj.AgentSession[object] = rj.AgentSession(llm=llm, user_away_timeout=None)
        await session.start(rj.Agent(instructions="x"))
        with pytest.raises(RealtimeError, match="does not take images"):
            session.add_image(SHOWN)
        await session.aclose()


def test_the_scripted_model_records_the_images_it_was_shown() -> None:
    llm = ScriptedLLM([["ok"]])
    llm.chat(shown())
    assert llm.calls[0].chat_ctx.messages()[-1].images == (SHOWN, LINKED)


async def test_gemini_live_gets_the_image_as_an_inline_part_of_a_user_turn() -> None:
    from rejoinder.providers import google
    from rejoinder.testing import GeminiLiveServer

    async with GeminiLiveServer() as server:
        llm = google.Live(api_key="test", base_url=server.base_url)
        session: rj.AgentSession[object] = rj.AgentSession(llm=llm, user_away_timeout=None)
        await session.start(rj.Agent(instructions="You can see."))
        session.add_image(SHOWN)
        with pytest.raises(RealtimeError, match="not a link"):
            session.add_image(LINKED)
        message = await server.wait_for("clientContent")
        content = message["clientContent"]
        assert content["turnComplete"] is False  # seen with what the user says next
        assert content["turns"] == [
            {"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": PNG_B64}}]}
        ]
        await session.aclose()
