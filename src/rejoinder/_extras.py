"""Optional dependencies: one way to import them, and one message when one is missing.

The extras of ``pyproject.toml`` (``local``, ``webrtc``, ``asgi``, ...) are imported only
where they are used, so ``import rejoinder`` needs none of them. Where one is imported,
a missing package becomes an error that names the command to run::

    from rejoinder import _extras

    with _extras.needed("otel", "rejoinder.telemetry"):
        from opentelemetry import trace
    # ImportError: rejoinder.telemetry needs opentelemetry, which is not installed:
    # pip install 'rejoinder[otel]'

``needed`` keeps the import statements as they are (type checkers still read them) and
turns an ``ImportError`` inside it into the site's own error type (``error=STTError``...,
``MissingExtra`` by default), so a provider still fails the way its callers expect.
``require`` and ``import_module`` do the same for modules named by a string.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Callable, Iterator
from types import ModuleType

__all__ = [
    "EXTRAS",
    "MissingExtra",
    "available",
    "import_module",
    "install_command",
    "missing_message",
    "needed",
    "require",
]

EXTRAS: dict[str, str] = {
    "local": "the offline voice stack (Whisper, Piper, Silero, Smart Turn, eSpeak NG)",
    "webrtc": "the WebRTC transport (aiortc, PyAV)",
    "asgi": "the ASGI host (Starlette, uvicorn)",
    "ray": "rejoinder serve --ray (Ray Serve)",
    "telephony": "Telnyx webhook signatures (cryptography)",
    "otel": "OpenTelemetry traces",
    "plot": "timeline pictures (matplotlib)",
    "mcp": "MCP tool servers (the mcp SDK)",
    "simulate": "scenario files (PyYAML)",
    "audio": "the microphone and speaker of rejoinder console --audio (sounddevice)",
    "filters": "noise suppression and echo cancellation on the caller's audio (pywebrtc-audio)",
}
"""Every extra the code asks for, and what it brings (``tests/test_extras.py`` checks
each against ``pyproject.toml``)."""

ErrorFactory = Callable[[str], BaseException]


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message says what to ``pip install``."""

    def __init__(self, message: str, *, extra: str = "", module: str | None = None) -> None:
        super().__init__(message, name=module)
        self.extra = extra


def install_command(extra: str) -> str:
    """``pip install 'rejoinder[EXTRA]'`` (``ValueError`` for an extra that does not exist:
    a typo at an import site must not print a command that fails)."""
    if extra not in EXTRAS:
        raise ValueError(f"no such extra: {extra!r} (known: {', '.join(EXTRAS)})")
    return f"pip install 'rejoinder[{extra}]'"


def missing_message(
    extra: str,
    what: str,
    error: BaseException | None = None,
    *,
    packages: str | None = None,
    otherwise: str | None = None,
) -> str:
    """The sentence for a missing dependency: ``WHAT needs MODULE, which is not installed:
    pip install 'rejoinder[EXTRA]'``. ``packages``: the pinned packages alone, for those
    who want only them (``onnxruntime==1.31.1``); ``otherwise``: another way out (``pass
    model_path=``)."""
    module = error.name if isinstance(error, ModuleNotFoundError) else None
    if module:
        needs = f"{what} needs {module}, which is not installed"
    elif error is not None:  # a package that is there but does not import (a wrong version)
        needs = f"{what} needs the {extra!r} extra, which did not import ({error})"
    else:
        needs = f"{what} needs the {extra!r} extra, which is not installed"
    text = f"{needs}: {install_command(extra)}"
    if packages:
        text += f" (or only what it needs: pip install {packages})"
    if otherwise:
        text += f"; or {otherwise}"
    return text


def _missing_extra(extra: str) -> ErrorFactory:
    return lambda message: MissingExtra(message, extra=extra)


@contextlib.contextmanager
def needed(
    extra: str,
    what: str,
    *,
    error: ErrorFactory | None = None,
    packages: str | None = None,
    otherwise: str | None = None,
) -> Iterator[None]:
    """Imports inside this block that fail raise ``error(message)`` (``MissingExtra`` by
    default), the message naming the extra to install; the ``ImportError`` is its cause."""
    try:
        yield
    except ImportError as exc:
        make = error if error is not None else _missing_extra(extra)
        message = missing_message(extra, what, exc, packages=packages, otherwise=otherwise)
        raise make(message) from exc


def import_module(
    extra: str, name: str, *, what: str | None = None, error: ErrorFactory | None = None
) -> ModuleType:
    """``importlib.import_module(name)``, a missing module named as ``needed`` does."""
    with needed(extra, what or name, error=error):
        return importlib.import_module(name)


def require(
    extra: str, *modules: str, what: str | None = None, error: ErrorFactory | None = None
) -> None:
    """Import ``modules`` (all of them, in order) or raise naming ``extra``."""
    for name in modules:
        import_module(extra, name, what=what, error=error)


def available(*modules: str) -> bool:
    """Whether every one of ``modules`` can be imported, without importing them (a module
    set to ``None`` in ``sys.modules`` counts as missing, as ``import`` sees it)."""
    for name in modules:
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except (ImportError, ValueError):  # a parent package missing, or no spec
            return False
    return True
