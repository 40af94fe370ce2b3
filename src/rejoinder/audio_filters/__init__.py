"""Filters on the caller's audio, before the session hears it: noise suppression and
acoustic echo cancellation.

    import rejoinder as rj
    from rejoinder.audio_filters import RNNoiseSuppressor, WebRTCEchoCanceller

    session = rj.AgentSession(...)
    rj.filter_audio(session, [WebRTCEchoCanceller(), RNNoiseSuppressor()])

- ``base.py``: ``AudioFilter``, what a filter is (write your own by subclassing it);
- ``attach.py``: ``filter_audio``, which wraps the session's microphone (and, for an echo
  canceller, its speaker) when the session starts, for every transport;
- ``chain.py``: the filters in order, rates bridged, a failing filter left out;
- ``reference.py``: the agent's audio on the microphone's clock (the far end);
- ``blocks.py``: fixed-size blocks for the engines, exact-length frames for the session;
- ``rnnoise.py``: ``RNNoiseSuppressor`` (RNNoise, from the ``pyrnnoise`` wheel);
- ``webrtc.py``: ``WebRTCEchoCanceller`` (AEC3) and ``WebRTCNoiseSuppressor``, from the
  ``pywebrtc-audio`` wheel (the ``filters`` extra).

docs/audio-filters.md says when each helps (browsers cancel echo themselves) and what
they cost; bench/audio_filters.py measures them. Every name loads on first use: numpy
and the engines only when a program touches them.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .attach import EchoTap, FilteredAudioInput, filter_audio
    from .base import AudioFilter
    from .chain import FilterChain
    from .reference import EchoReference
    from .rnnoise import RNNoiseSuppressor
    from .webrtc import WebRTCEchoCanceller, WebRTCNoiseSuppressor

_LAZY = {
    "AudioFilter": ".base",
    "EchoReference": ".reference",
    "EchoTap": ".attach",
    "FilterChain": ".chain",
    "FilteredAudioInput": ".attach",
    "RNNoiseSuppressor": ".rnnoise",
    "WebRTCEchoCanceller": ".webrtc",
    "WebRTCNoiseSuppressor": ".webrtc",
    "filter_audio": ".attach",
}

__getattr__ = lazy_names(__name__, globals(), _LAZY)

__all__ = [
    "AudioFilter",
    "EchoReference",
    "EchoTap",
    "FilterChain",
    "FilteredAudioInput",
    "RNNoiseSuppressor",
    "WebRTCEchoCanceller",
    "WebRTCNoiseSuppressor",
    "filter_audio",
]
