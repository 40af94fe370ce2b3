"""What a muted microphone sounds like: silence of the same shape as each frame."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...models.audio import AudioFrame


def silence_like(frame: AudioFrame) -> AudioFrame:
    """Silence of ``frame``'s length, rate and channels (a new frame: the caller's is
    not touched)."""
    from ...models.audio import AudioFrame

    return AudioFrame(frame.data * 0, frame.sample_rate, frame.num_channels)
