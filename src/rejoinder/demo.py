"""The ``rejoinder console`` demo: an agent whose tools show the runtime's features, and a
small rule-based stand-in for a language model so the demo runs with no model and no network.

``DemoLLM`` is *not* a language model. It picks a canned answer or a tool call by looking
for keywords in the last user message, and it turns tool results into sentences with
templates. It exists so that ``rejoinder console`` shows real state changes (thinking,
speaking, tool follow-ups, a background tool whose result is spoken later, a failing tool)
out of the box; pass ``--llm MODEL`` to talk to a real model instead.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from .models import (
    LLM,
    ChatChunk,
    ChatContext,
    ChatMessage,
    FunctionCallOutput,
    ToolCallRequest,
    ToolDefinition,
    ToolError,
)
from .models.llm import ToolChoice
from .session import Agent, RunContext, function_tool

__all__ = ["MAX_TIMER_SECONDS", "DemoAgent", "DemoLLM", "DemoReply"]

MAX_TIMER_SECONDS = 3600

_FORECASTS = {
    "paris": "sunny, 22 °C, light wind from the west",
    "london": "light rain, 14 °C, clearing in the evening",
    "rome": "clear skies, 27 °C",
    "tokyo": "humid and cloudy, 25 °C",
    "new york": "partly cloudy, 18 °C",
    "berlin": "overcast, 16 °C",
}

INSTRUCTIONS = (
    "You are a friendly assistant in a text console demo of the rejoinder framework. "
    "Keep answers to one or two short sentences. Use get_weather for weather questions, "
    "set_timer to start timers (it runs in the background; say it started, and announce "
    "when it is done), and book_flight to book flights. If a tool fails, apologise and "
    "quote the error."
)


class DemoAgent(Agent):
    """The demo assistant: a quick tool, a slow background tool, and a tool that fails."""

    def __init__(self) -> None:
        super().__init__(instructions=INSTRUCTIONS)

    @function_tool
    async def get_weather(self, city: str) -> str:
        """Get today's weather forecast for a city.

        Args:
            city: the city name, e.g. "Paris"
        """
        forecast = _FORECASTS.get(city.strip().lower(), "mild and mostly sunny, 20 °C")
        return f"In {city.strip()} today: {forecast}"

    @function_tool
    async def set_timer(
        self,
        ctx: RunContext[Any],
        seconds: Annotated[int, Field(ge=1, le=MAX_TIMER_SECONDS)],
    ) -> str:
        """Start a timer. It runs in the background; the user is told when it is done.

        Args:
            seconds: how long the timer runs, in seconds (1 to 3600)
        """
        # The first update releases the tool: the model hears "Timer started" now and the
        # conversation goes on; the return value below is spoken later as a deferred reply.
        await ctx.update("Timer started")
        await asyncio.sleep(seconds)
        return f"Timer for {seconds} seconds is done"

    @function_tool
    async def book_flight(self, destination: str) -> str:
        """Book a flight.

        Args:
            destination: the city to fly to
        """
        raise ToolError("the booking service is down")


# ----------------------------------------------------------------- the rules


@dataclass(frozen=True, slots=True)
class DemoReply:
    """What ``DemoLLM`` decided to answer: text, then optionally one tool call."""

    text: str
    tool: str | None = None
    arguments: dict[str, Any] | None = None


_HELP = (
    "I'm a rule-based demo, not a language model, so I only understand a few things. "
    'Ask me about the weather ("weather in Paris"), to set a timer '
    '("set a timer for 5 seconds"), or to book a flight ("book a flight to Rome"). '
    "Type /quit to leave."
)
_GREETING = (
    "Hello! I'm the rejoinder demo assistant, a rule-based stand-in for a model. "
    "Type help to see what I can do."
)
_FALLBACK = (
    "Sorry, I'm only a rule-based demo and didn't understand that. Type help to see what I can do."
)
_DEFAULT_CITY = "London"
_WORD = re.compile(r"[A-Za-z][\w'-]*")
_NAME = re.compile(r"\b[A-Z][a-zA-Z'-]*(?:\s+[A-Z][a-zA-Z'-]*)*")
_AFTER_PREPOSITION = re.compile(r"\b(?:in|for|at|to)\s+([A-Za-z][a-zA-Z'-]*)", re.IGNORECASE)
_DURATION = re.compile(r"(\d+)\s*(h|hours?|m|mins?|minutes?|s|secs?|seconds?)?\b", re.IGNORECASE)
_NOT_PLACES = frozenset({"I", "Please", "Can", "Could", "What", "What's", "Whats", "How"})


def _words(text: str) -> set[str]:
    return {word.lower() for word in _WORD.findall(text)}


def _place(text: str) -> str | None:
    """A capitalised name after the first word (e.g. "New York"), else the word after
    in/for/at/to (capitalised for it), else ``None``."""
    first = _WORD.search(text)
    start = first.end() if first is not None else 0
    for match in _NAME.finditer(text, start):
        words = [w for w in match.group().split() if w not in _NOT_PLACES]
        if words:
            return " ".join(words)
    for match in _AFTER_PREPOSITION.finditer(text):
        word = match.group(1)
        if word.lower() not in {"the", "a", "an", "me", "my", "today", "tomorrow"}:
            return word.capitalize()
    return None


# fmt: off
_UNITS = (  # zero to nineteen
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
    "eighteen", "nineteen",
)
# fmt: on
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "ninety": 90}
_NUMBER_WORD = re.compile(
    rf"\b(?:({'|'.join(_TENS)})(?:[\s-]({'|'.join(_UNITS[1:10])}))?|({'|'.join(_UNITS)}))\b"
)


def _spelled_number(match: re.Match[str]) -> str:
    tens, unit, alone = match.groups()
    if alone is not None:
        return str(_UNITS.index(alone))
    return str(_TENS[tens] + (_UNITS.index(unit) if unit else 0))


def _seconds(text: str) -> int | None:
    """A duration in seconds; numbers may be spelled out ("five seconds"), as a speech
    recogniser often writes them."""
    text = _NUMBER_WORD.sub(_spelled_number, text.lower())
    match = _DURATION.search(text)
    if match is None:
        return None
    value = int(match.group(1))
    unit = (match.group(2) or "s").lower()
    if unit.startswith("h"):
        return value * 3600
    if unit.startswith("m"):
        return value * 60
    return value


def reply_to_user(text: str) -> DemoReply:
    """The keyword rules for a user message (tested directly)."""
    words = _words(text)
    if words & {"weather", "forecast"}:
        city = _place(text) or _DEFAULT_CITY
        return DemoReply(f"Let me check the weather in {city}.", "get_weather", {"city": city})
    if "timer" in words:
        seconds = _seconds(text)
        if seconds is None:
            return DemoReply(
                "How many seconds should the timer run? Try: set a timer for 10 seconds."
            )
        return DemoReply(
            f"Okay, starting a {seconds}-second timer.", "set_timer", {"seconds": seconds}
        )
    if words & {"book", "flight", "flights", "fly"}:
        destination = _place(text)
        if destination is None:
            return DemoReply("Where would you like to fly? Try: book a flight to Rome.")
        return DemoReply(
            f"Let me try to book a flight to {destination}.",
            "book_flight",
            {"destination": destination},
        )
    if words & {"help", "commands"} or "what can you do" in text.lower():
        return DemoReply(_HELP)
    if words & {"hello", "hi", "hey", "hiya", "greetings"} or "good morning" in text.lower():
        return DemoReply(_GREETING)
    if words & {"thanks", "thank", "thx"}:
        return DemoReply("You're welcome!")
    if words & {"bye", "goodbye"}:
        return DemoReply("Goodbye! Type /quit to leave the console.")
    return DemoReply(_FALLBACK)


_SPOKEN = (
    ("Type help to see what I can do.", "Say help to hear what I can do."),
    (" Type /quit to leave the console.", ""),
    (" Type /quit to leave.", ""),
    ("Try: set a timer for 10 seconds.", "Try: set a timer for ten seconds."),
)


def spoken_wording(reply: DemoReply) -> DemoReply:
    """The reply as a voice agent says it: no typing instructions."""
    text = reply.text
    for typed, said in _SPOKEN:
        text = text.replace(typed, said)
    return DemoReply(text, reply.tool, reply.arguments)


_FAILED_ACTION = {
    "get_weather": "get the weather",
    "set_timer": "set that timer",
    "book_flight": "book that flight",
}


def report_output(output: FunctionCallOutput) -> str:
    """One sentence about a tool result. It always quotes ``output.output`` verbatim, which
    is how ``DemoLLM`` later recognises results it has already reported."""
    text = output.output
    if output.is_error:
        action = _FAILED_ACTION.get(output.name, f"run {output.name}")
        return f"Sorry, I couldn't {action}: {text}."
    final = output.call_id.endswith("_final")
    if output.name == "get_weather":
        return f"{text}."
    if output.name == "set_timer":
        return f"Time's up! {text}." if final else f"{text}. I'll tell you when it's done."
    return f"The {output.name} tool says: {text}."


def unreported_outputs(chat_ctx: ChatContext) -> list[FunctionCallOutput]:
    """Tool results no later assistant message has quoted yet, oldest first.

    A real model reads the whole context and knows what it has said; this stand-in relies
    on always quoting results verbatim (``report_output``). That also covers the results
    of background tools (the ``<call_id>_final`` items), which may land while another
    reply is being produced and be carried by a later one."""
    pending: list[FunctionCallOutput] = []
    for item in chat_ctx.items:
        if isinstance(item, FunctionCallOutput) and item.output:
            pending.append(item)
        elif isinstance(item, ChatMessage) and item.role == "assistant" and pending:
            pending = [o for o in pending if o.output not in item.content]
    return pending


def last_user_message(chat_ctx: ChatContext) -> ChatMessage | None:
    """The last item that is neither a system nor a developer message, when it is a user
    message (``None`` when the last thing that happened was not the user speaking)."""
    for item in reversed(chat_ctx.items):
        if isinstance(item, ChatMessage) and item.role in ("system", "developer"):
            continue
        if isinstance(item, ChatMessage) and item.role == "user":
            return item
        return None
    return None


def decide(chat_ctx: ChatContext, tools: Sequence[str] | None = None) -> DemoReply:
    """The whole rule set: report results still owed, then answer the user if the user
    spoke last. ``tools`` names the tools offered (``None``: all of them)."""
    reports = [report_output(o) for o in unreported_outputs(chat_ctx)]
    user = last_user_message(chat_ctx)
    if user is None:
        return DemoReply(" ".join(reports) if reports else "Is there anything else?")
    answer = reply_to_user(user.content)
    if answer.tool is not None and tools is not None and answer.tool not in tools:
        answer = DemoReply(f"I'd use the {answer.tool} tool for that, but it isn't available now.")
    return DemoReply(" ".join([*reports, answer.text]), answer.tool, answer.arguments)


class DemoLLM(LLM):
    """A rule-based demo stand-in for a model: keywords in, canned text and tool calls out.

    NOT a language model. It looks at the end of the chat context: if the user spoke last
    it maps keywords to a tool call (weather/forecast → ``get_weather``, timer + a number →
    ``set_timer``, book/flight → ``book_flight``) or to a canned reply (greeting, help,
    fallback); otherwise it turns the tool results it has not reported yet into sentences
    (an apology quoting the error for a failed tool). Text streams in word-sized chunks
    with ``chunk_delay`` seconds between them so the state changes are visible.
    ``spoken=True`` words the canned replies for a voice agent ("say help", no "/quit").
    """

    def __init__(self, *, chunk_delay: float = 0.03, spoken: bool = False) -> None:
        self._chunk_delay = chunk_delay
        self._spoken = spoken
        self._call_ids = itertools.count(1)

    @property
    def model(self) -> str:
        return "rule-based demo (not a language model)"

    @property
    def provider(self) -> str:
        return "rejoinder.demo"

    def chat(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncIterator[ChatChunk]:
        offered = [] if tool_choice == "none" else [t.name for t in tools]
        reply = decide(chat_ctx, offered)
        return self._stream(spoken_wording(reply) if self._spoken else reply)

    async def _stream(self, reply: DemoReply) -> AsyncIterator[ChatChunk]:
        for chunk in re.findall(r"\S+\s*", reply.text):
            await asyncio.sleep(self._chunk_delay)
            yield ChatChunk(delta=chunk)
        if reply.tool is not None:
            call_id = f"demo_call_{next(self._call_ids)}"
            arguments = json.dumps(reply.arguments or {})
            yield ChatChunk(tool_calls=(ToolCallRequest(call_id, reply.tool, arguments),))
