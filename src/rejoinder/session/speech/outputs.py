"""How one speech reaches the user: the choice between text and audio delivery."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .delivery import Delivery, OnOutputError, TextDelivery

if TYPE_CHECKING:
    from ..context import SessionContext


def new_delivery(
    ctx: SessionContext,
    audible: Callable[[], None],
    spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
    on_error: OnOutputError,
    inaudible: Callable[[], None] | None = None,
) -> Delivery:
    """How one speech reaches the user: aloud when there is a TTS and an audio output,
    as text otherwise."""
    output = ctx.output
    tts = ctx.tts
    if output.audio is None or tts is None:
        return TextDelivery(audible, output.transcription, on_error)
    from .audio_delivery import AudioDelivery  # numpy and soxr, only when speaking aloud

    return AudioDelivery(
        audible,
        output.transcription,
        on_error,
        tts=tts,
        audio_output=output.audio,
        spawn=spawn,
        inaudible=inaudible,
    )
