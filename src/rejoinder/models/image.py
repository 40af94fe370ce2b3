"""An image the user shows the agent: bytes, a ``data:`` URL, or an ``https`` URL.

The same value goes to every chat provider; each writes it in its own format (an
``image_url`` part for OpenAI-compatible servers, an ``image`` block for Anthropic, an
``inlineData``/``fileData`` part for Gemini). Images are checked once, here, when they
are made, so a provider never sends a request the API will refuse for the image:

* the format must be one every provider takes: PNG, JPEG, WebP or GIF. For bytes it is
  read from the file's own signature (a caller's ``mime_type`` that contradicts the
  bytes is an error: the APIs refuse a mislabelled image with an unhelpful 400);
* inline images are at most ``MAX_IMAGE_BYTES`` (5 MiB, Anthropic's limit per image, the
  smallest of the three); a camera frame is scaled down well below it
  (``rejoinder.io.video_sampler``);
* a URL is ``https://`` or ``http://`` (the provider fetches it) or ``data:`` (decoded
  here into bytes, so the size and format checks apply to it too).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import field
from typing import Literal, TypeAlias

from .._dataclass import dataclass

__all__ = ["MAX_IMAGE_BYTES", "ImageContent", "ImageDetail", "ImageError"]

MAX_IMAGE_BYTES = 5 * 1024 * 1024

ImageDetail: TypeAlias = Literal["auto", "low", "high"]

_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
SUPPORTED_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})


class ImageError(ValueError):
    """An image no provider would take (unknown format, too large, a bad URL)."""


def sniff_image_type(data: bytes) -> str | None:
    """The image's MIME type from its first bytes, or ``None`` if it is none we take."""
    for signature, mime_type in _SIGNATURES:
        if data.startswith(signature):
            return mime_type
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(frozen=True, slots=True)
class ImageContent:
    """An image in a chat message. Make one with ``from_bytes``, ``from_url`` (an
    ``https``/``http`` or ``data:`` URL) or ``from_file``.

    ``detail`` is a hint for OpenAI-compatible models (how finely to look: ``low`` costs
    fewer tokens); the other providers ignore it.
    """

    data: bytes | None = field(default=None, repr=False)
    url: str | None = None
    mime_type: str | None = None
    detail: ImageDetail = "auto"

    def __post_init__(self) -> None:
        if (self.data is None) == (self.url is None):
            raise ImageError("an image has either data or a URL (exactly one)")
        if self.detail not in ("auto", "low", "high"):
            raise ImageError(f"unknown image detail {self.detail!r}: auto, low or high")
        if self.data is not None:
            _check_data(self.data, self.mime_type)
            if self.mime_type is None:
                object.__setattr__(self, "mime_type", sniff_image_type(self.data))
        else:
            assert self.url is not None
            if not self.url.startswith(("https://", "http://")):
                raise ImageError(
                    f"an image URL must be https://, http:// or data: (got {self.url[:40]!r})"
                )
            if self.mime_type is not None and self.mime_type not in SUPPORTED_TYPES:
                raise ImageError(_unsupported(self.mime_type))

    @classmethod
    def from_bytes(
        cls, data: bytes, mime_type: str | None = None, *, detail: ImageDetail = "auto"
    ) -> ImageContent:
        return cls(data=bytes(data), mime_type=mime_type, detail=detail)

    @classmethod
    def from_url(cls, url: str, *, detail: ImageDetail = "auto") -> ImageContent:
        """An ``https``/``http`` URL the provider fetches, or a ``data:`` URL (decoded)."""
        if url.startswith("data:"):
            data, mime_type = _decode_data_url(url)
            return cls(data=data, mime_type=mime_type, detail=detail)
        return cls(url=url, detail=detail)

    @classmethod
    def from_file(cls, path: str, *, detail: ImageDetail = "auto") -> ImageContent:
        with open(path, "rb") as file:
            return cls(data=file.read(), detail=detail)

    def base64(self) -> str:
        """The bytes in base64 (only for an image that has them)."""
        if self.data is None:
            raise ImageError("this image is a URL; it has no bytes to encode")
        return base64.b64encode(self.data).decode("ascii")

    def data_url(self) -> str:
        """``data:<type>;base64,...`` for an image with bytes; the URL itself otherwise."""
        if self.data is None:
            assert self.url is not None
            return self.url
        return f"data:{self.mime_type};base64,{self.base64()}"

    def describe(self) -> dict[str, object]:
        """What a log or a recording keeps of the image (not its bytes)."""
        if self.data is None:
            return {"type": "image", "url": self.url}
        return {"type": "image", "mime_type": self.mime_type, "bytes": len(self.data)}


def _check_data(data: bytes, mime_type: str | None) -> None:
    if not data:
        raise ImageError("the image is empty")
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageError(
            f"the image is {len(data) / 1048576:.1f} MiB; at most "
            f"{MAX_IMAGE_BYTES // 1048576} MiB is sent inline (scale it down, or pass a URL)"
        )
    sniffed = sniff_image_type(data)
    if sniffed is None:
        if mime_type is not None and mime_type not in SUPPORTED_TYPES:
            raise ImageError(_unsupported(mime_type))
        raise ImageError("the bytes are not a PNG, JPEG, WebP or GIF image")
    if mime_type is not None and mime_type != sniffed:
        raise ImageError(f"the image is labelled {mime_type} but its bytes are {sniffed}")


def _decode_data_url(url: str) -> tuple[bytes, str | None]:
    header, comma, payload = url.partition(",")
    if not comma or not header.endswith(";base64"):
        raise ImageError("a data: URL for an image must be base64 (data:image/png;base64,...)")
    mime_type = header[len("data:") : -len(";base64")] or None
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageError(f"the data: URL's base64 is malformed: {exc}") from None
    return data, mime_type


def _unsupported(mime_type: str) -> str:
    return f"unsupported image type {mime_type!r}: PNG, JPEG, WebP or GIF"
