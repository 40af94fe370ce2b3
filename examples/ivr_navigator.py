"""An agent that finds its way through another company's phone menu with the keypad.

    REJOINDER_LLM=gpt-4o-mini OPENAI_API_KEY=sk-... \\
        .venv/bin/rejoinder serve --telephony twilio examples/ivr_navigator.py

Point the call at the menu to navigate (an outbound call whose media stream comes here,
with the custom parameter ``goal``, "reach billing" by default). The menu's prompts reach
the agent as speech, as a caller's words would (Silero, Smart Turn and Whisper on this
machine); the model decides which key the goal needs and calls ``press``, which puts the
keys on the line as DTMF tones (``session.send_dtmf``): after anything the agent is
saying, paced like speech, and returning once the far end has played them. ``w`` in the
keys waits half a second, ``W`` a second. The tones are not the agent's voice: they never
make it ``speaking`` and are not in the transcript.

Offline, as a script::

    .venv/bin/python examples/ivr_navigator.py

runs a phone menu against the agent over a loopback socket: ``FakePhoneCall.answer_menu``
plays the company (a main menu, a billing submenu, then "you reached billing"), hearing
the keys from the tones in the audio alone. The test kit stands in for the models: each
prompt is voiced as a tone of its own length, which the scripted recognizer turns back
into the prompt's words (``PromptSTT``), and ``MenuReader``, a few lines that pick the
option naming the goal, plays the language model. It prints the path through the menu.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

import rejoinder as rj
from rejoinder.io import Connection
from rejoinder.models import ChatContext, FunctionCallOutput, Transcript
from rejoinder.models.audio import AudioFrame
from rejoinder.testing import (
    MenuNode,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    ToolCall,
    speech_frame,
)

INSTRUCTIONS = (
    "You are on a phone call with an automated phone menu, on behalf of a customer. Your "
    "goal: {goal}. Listen to each menu prompt and call press with the key of the option "
    "that leads to the goal; after a key, wait for the next prompt. Do not speak to the "
    "menu. If a key is cut off or not taken, press it again. Once you reach the goal or a "
    "person answers, say briefly who you are calling for and why."
)


class IVRNavigator(rj.Agent):
    """Presses the keys that lead to ``goal`` in a phone menu."""

    def __init__(self, goal: str = "reach billing") -> None:
        super().__init__(instructions=INSTRUCTIONS.format(goal=goal))

    @rj.function_tool
    async def press(self, ctx: rj.RunContext[None], keys: str) -> str:
        """Press keys on the phone's keypad, to choose an option in the menu you hear.

        Args:
            keys: the keys, in order: 0-9, * and #; w waits half a second, W a second
        """
        # After whatever this reply says before the keys ("one moment..."): the keys
        # would otherwise go out as soon as the model asks, before its words are voiced.
        await ctx.wait_for_playout()
        try:
            await ctx.session.send_dtmf(keys)
        except ValueError as exc:
            return f"not pressed: {exc}"
        except RuntimeError as exc:  # cut off (the menu talked over it), or no phone line
            return f"not pressed, or not all of it: {exc}"
        return f"pressed {keys}; now listen to what the menu says"


def make_session() -> rj.AgentSession[None]:
    """A model from ``$REJOINDER_LLM`` (``gpt-4o-mini``, ``anthropic/claude-sonnet-4-5``,
    ...: see ``rejoinder.providers.registry``) on the offline voice stack."""
    from rejoinder.providers import local
    from rejoinder.providers.registry import llm_from_name

    model = os.environ.get("REJOINDER_LLM", "").strip()
    if not model:
        raise RuntimeError("set REJOINDER_LLM to the model that reads the menu")
    return rj.AgentSession(llm=llm_from_name(model), **local.voice_session_options())


async def entrypoint(conn: Connection) -> None:
    goal = (conn.call.parameters.get("goal") if conn.call is not None else None) or ""
    await conn.serve(make_session(), IVRNavigator(goal or "reach billing"))


# ------------------------------------------------------------- offline, scripted

MAIN = "Thank you for calling. For sales, press 1. For billing and accounts, press 2."
BILLING_MENU = "For billing, press 1. For a payment plan, press 2."
BILLING = "You reached billing. Please hold."
MENU = MenuNode(
    MAIN,
    {
        "1": MenuNode("You reached sales. Please hold."),
        "2": MenuNode(BILLING_MENU, {"1": MenuNode(BILLING), "2": MenuNode("Payment plans.")}),
    },
)
PROMPT_SECONDS = {
    MAIN: 0.2,
    BILLING_MENU: 0.45,
    BILLING: 0.7,
    "You reached sales. Please hold.": 0.95,
    "Payment plans.": 1.2,
}
RATE = 8000


def voice(prompt: str) -> Any:
    """A prompt as the menu says it offline: a tone of the prompt's own length."""
    return speech_frame(PROMPT_SECONDS[prompt], RATE).data


def hear(seconds: float) -> str:
    """The prompt whose tone is nearest to ``seconds`` long."""
    return min(PROMPT_SECONDS, key=lambda p: abs(PROMPT_SECONDS[p] - seconds))


class PromptSTT(ScriptedSTT):
    """The scripted recognizer's side of ``voice``: it measures the tone in an utterance
    (its loud frames: the utterance also holds the quiet around it) and hears the prompt
    of that length."""

    def __init__(self) -> None:
        super().__init__(hear)

    async def transcribe(self, frames: Sequence[AudioFrame]) -> Transcript:
        loud = [f for f in frames if f.data.size and np.abs(f.data).mean() > 1000]
        return await super().transcribe(loud)


class MenuReader:
    """Stands in for the language model offline: reads the last prompt heard and presses
    the option that names ``word``; says who it is once no option is left to choose."""

    def __init__(self, word: str = "billing", *, pauses: Sequence[str] = ()) -> None:
        self.word = word
        self.pauses = pauses
        """What to start the n-th press with (``"w"``: half a second's wait first)."""
        self.pressed: list[str] = []

    def __call__(self, chat_ctx: ChatContext) -> list[Any]:
        last = chat_ctx.items[-1] if chat_ctx.items else None
        if isinstance(last, FunctionCallOutput):
            return []  # a key was pressed: say nothing, wait for the next prompt
        text = getattr(last, "content", "") or ""
        for label, key in re.findall(r"For ([^,]+), press (\d)", text):
            if self.word in label:
                n = len(self.pressed)
                keys = (self.pauses[n] if n < len(self.pauses) else "") + key
                self.pressed.append(keys)
                return [ToolCall("press", {"keys": keys})]
        return ["Hi, I am calling about my bill."]


def offline_session(reader: MenuReader) -> rj.AgentSession[None]:
    return rj.AgentSession(
        llm=ScriptedLLM(reader),
        vad=ScriptedVAD(min_silence=0.15),
        stt=PromptSTT(),
        tts=ScriptedTTS(seconds_per_char=0.02),
        user_away_timeout=None,
        min_endpointing_delay=0.05,
    )


async def offline() -> list[tuple[float, str, str]]:
    """The scripted menu against the agent over a loopback socket: the menu's log."""
    from aiohttp.test_utils import TestServer

    from rejoinder.io import create_app
    from rejoinder.testing import FakePhoneCall

    async def scripted_entrypoint(conn: Connection) -> None:
        await conn.serve(offline_session(MenuReader()), IVRNavigator())

    app = create_app(scripted_entrypoint, telephony=["twilio"], webrtc=False, page=False)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with FakePhoneCall.connect(str(server.make_url("/twilio"))) as call:
            await call.answer_menu(MENU, voice)
        return call.menu_log
    finally:
        await server.close()


def main() -> None:
    log = asyncio.run(offline())
    start = log[0][0]
    for at, what, value in log:
        print(f"{at - start:5.2f} s  {'menu said' if what == 'said' else 'key heard'}: {value}")


if __name__ == "__main__":
    main()
