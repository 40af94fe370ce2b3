"""session.add_image: an image goes with the user's next message to the model (and
only that one), in the pipeline, in a speculative reply, and to a realtime model."""

from __future__ import annotations

import json
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.models import ChatMessage
from rejoinder.testing import (
    MemoryAudioInput,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    speech_frame,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 24


def last_user_message(call: Any) -> ChatMessage:
    message = call.chat_ctx.items[-1]
    assert isinstance(message, ChatMessage) and message.role == "user"
    return message


async def text_session(llm: ScriptedLLM, **options: Any) -> rj.AgentSession[Any]:
    session: rj.AgentSession[Any] = rj.AgentSession(llm=llm, user_away_timeout=None, **options)
    await session.start(rj.Agent(instructions="You can see."))
    return session


async def test_the_image_goes_with_the_next_user_message_only() -> None:
    llm = ScriptedLLM([["A red square."], ["You said hello."]])
    session = await text_session(llm)
    image = rj.ImageContent.from_bytes(PNG)
    session.add_image(image)
    result = await session.run(user_input="What is this?")
    assert result.final_output == "A red square."
    sent = last_user_message(llm.calls[0])
    assert (sent.content, sent.images) == ("What is this?", (image,))
    recorded = [m for m in session.history.messages() if m.role == "user"]
    assert recorded[0].images == (image,)
    await session.run(user_input="Hello.")
    assert last_user_message(llm.calls[1]).images == ()
    # The first message still carries its image in the context the model is given.
    assert [m.images for m in llm.calls[1].chat_ctx.messages() if m.role == "user"] == [
        (image,),
        (),
    ]
    await session.aclose()


async def test_at_most_four_wait_for_a_message_the_latest() -> None:
    llm = ScriptedLLM([["Five frames."]])
    session = await text_session(llm)
    frames = [rj.ImageContent.from_bytes(PNG if i % 2 else JPEG) for i in range(6)]
    for frame in frames:
        session.add_image(frame)
    await session.run(user_input="What changed?")
    assert last_user_message(llm.calls[0]).images == tuple(frames[-4:])
    await session.aclose()


async def test_bad_calls_are_clear() -> None:
    session: rj.AgentSession[Any] = rj.AgentSession(llm=ScriptedLLM([]), user_away_timeout=None)
    with pytest.raises(RuntimeError, match="not running"):
        session.add_image(rj.ImageContent.from_bytes(PNG))
    await session.start(rj.Agent(instructions="x"))
    with pytest.raises(TypeError, match="add_image"):
        session.add_image(PNG)  # type: ignore[arg-type]
    await session.aclose()


async def test_a_scripted_model_can_check_what_it_was_shown() -> None:
    """A response function sees the image: a test of an agent that reads a picture."""

    def describe(ctx: rj.ChatContext) -> list[str]:
        images = ctx.messages()[-1].images
        if not images:
            return ["I cannot see anything."]
        return [f"I see a {images[0].mime_type} image."]

    session = await text_session(ScriptedLLM(describe))
    blind = await session.run(user_input="What do you see?")
    session.add_image(rj.ImageContent.from_bytes(JPEG))
    seeing = await session.run(user_input="And now?")
    assert (blind.final_output, seeing.final_output) == (
        "I cannot see anything.",
        "I see a image/jpeg image.",
    )
    await session.aclose()


async def speak(mic: MemoryAudioInput, seconds: float) -> None:
    for _ in range(round(seconds / 0.02)):
        await mic.push(speech_frame(0.02))


@pytest.mark.parametrize("shown", ["before speaking", "after the speculation started"])
async def test_a_speculative_reply_is_used_only_if_it_saw_the_image(shown: str) -> None:
    """Preemptive generation starts on the transcript before the turn ends; an image
    shown after it started makes it stale (the reply is generated again with it)."""
    llm = ScriptedLLM([["Prepared."], ["Fresh."]])
    mic = MemoryAudioInput(16000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=llm,
        stt=ScriptedSTT(["What is this?"]),
        tts=ScriptedTTS(),
        vad=ScriptedVAD(),
        preemptive_generation=True,
        user_away_timeout=None,
        min_endpointing_delay=0.5,
    )
    session.input.audio = mic
    await session.start(rj.Agent(instructions="voice"))
    image = rj.ImageContent.from_bytes(PNG)
    if shown == "before speaking":
        session.add_image(image)
    await speak(mic, 1.0)
    await mic.push_silence(0.35)  # recognized: the speculation starts
    assert len(llm.calls) == 1
    if shown != "before speaking":
        session.add_image(image)
    await mic.push_silence(2.0)
    sent = [last_user_message(call).images for call in llm.calls]
    if shown == "before speaking":
        assert sent == [(image,)]  # the speculation saw it and was used
    else:
        assert sent == [(), (image,)]  # generated again, with the image
    recorded = [m for m in session.history.messages() if m.role == "user"]
    assert [m.images for m in recorded] == [(image,)]
    await session.aclose()


async def test_a_recording_describes_images_without_their_bytes(tmp_path: Any) -> None:
    from rejoinder.recording import SessionRecorder

    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([["Seen."]]), user_away_timeout=None
    )
    SessionRecorder(session, tmp_path / "call.wav")
    await session.start(rj.Agent(instructions="x"))
    session.add_image(rj.ImageContent.from_bytes(PNG))
    await session.run(user_input="Look.")
    await session.aclose()
    record = json.loads((tmp_path / "call.json").read_text())
    user = next(item for item in record["history"] if item.get("role") == "user")
    assert user["images"] == [{"type": "image", "mime_type": "image/png", "bytes": len(PNG)}]


async def test_a_keyed_image_replaces_the_pending_one_with_its_key() -> None:
    """A camera's still (``key="camera"``) replaces the camera's earlier still that no
    message took; images without a key, or with another, stay."""
    llm = ScriptedLLM([["Seen."]])
    session = await text_session(llm)
    upload = rj.ImageContent.from_bytes(JPEG)
    stills = [rj.ImageContent.from_bytes(PNG) for _ in range(3)]
    session.add_image(stills[0], key="camera")
    session.add_image(upload)
    session.add_image(stills[1], key="camera")
    session.add_image(stills[2], key="camera")
    await session.run(user_input="Look.")
    assert last_user_message(llm.calls[0]).images == (upload, stills[2])
    with pytest.raises(TypeError, match="key"):
        session.add_image(upload, key=1)  # type: ignore[arg-type]
    await session.aclose()
    with pytest.raises(RuntimeError, match="closing"):
        session.add_image(upload)
