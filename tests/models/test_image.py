"""rj.ImageContent: every way of making one, and every image no provider would take
refused when it is made, with a message that says why."""

from __future__ import annotations

import base64
import dataclasses
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.models.image import MAX_IMAGE_BYTES, sniff_image_type

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 24
GIF = b"GIF89a" + b"\x00" * 24
WEBP = b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 16


@pytest.mark.parametrize(
    ("data", "mime_type"),
    [(PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp")],
)
def test_the_type_is_read_from_the_bytes(data: bytes, mime_type: str) -> None:
    image = rj.ImageContent.from_bytes(data)
    assert image.mime_type == mime_type
    assert image.data_url() == f"data:{mime_type};base64,{base64.b64encode(data).decode()}"
    assert image.describe() == {"type": "image", "mime_type": mime_type, "bytes": len(data)}


def test_a_label_that_contradicts_the_bytes_is_refused() -> None:
    with pytest.raises(rj.ImageError, match="labelled image/jpeg but its bytes are image/png"):
        rj.ImageContent.from_bytes(PNG, "image/jpeg")
    assert rj.ImageContent.from_bytes(PNG, "image/png").mime_type == "image/png"


@pytest.mark.parametrize(
    ("data", "mime_type", "message"),
    [
        (b"", None, "empty"),
        (b"%PDF-1.7 not an image", None, "not a PNG, JPEG, WebP or GIF"),
        (b"BM\x00\x00 a bitmap", "image/bmp", "unsupported image type 'image/bmp'"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * MAX_IMAGE_BYTES, None, "at most 5 MiB"),
    ],
)
def test_images_no_provider_takes_are_refused(
    data: bytes, mime_type: str | None, message: str
) -> None:
    with pytest.raises(rj.ImageError, match=message):
        rj.ImageContent.from_bytes(data, mime_type)


def test_a_data_url_is_decoded_and_checked_like_bytes() -> None:
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    image = rj.ImageContent.from_url(url, detail="low")
    assert (image.data, image.mime_type, image.url, image.detail) == (PNG, "image/png", None, "low")
    assert image.data_url() == url
    with pytest.raises(rj.ImageError, match="must be base64"):
        rj.ImageContent.from_url("data:image/png,rawbytes")
    with pytest.raises(rj.ImageError, match="base64 is malformed"):
        rj.ImageContent.from_url("data:image/png;base64,@@not base64@@")
    with pytest.raises(rj.ImageError, match="labelled image/gif"):
        rj.ImageContent.from_url("data:image/gif;base64," + base64.b64encode(PNG).decode())


def test_a_link_is_kept_for_the_provider_to_fetch() -> None:
    image = rj.ImageContent.from_url("https://example.test/cat.jpg")
    assert (image.data, image.url, image.mime_type) == (None, "https://example.test/cat.jpg", None)
    assert image.data_url() == "https://example.test/cat.jpg"
    assert image.describe() == {"type": "image", "url": "https://example.test/cat.jpg"}
    with pytest.raises(rj.ImageError, match="no bytes"):
        image.base64()
    for bad in ("ftp://example.test/cat.jpg", "/tmp/cat.jpg", "cat.jpg"):
        with pytest.raises(rj.ImageError, match="https://, http:// or data:"):
            rj.ImageContent.from_url(bad)


def test_exactly_one_source_and_a_known_detail() -> None:
    with pytest.raises(rj.ImageError, match="exactly one"):
        rj.ImageContent()
    with pytest.raises(rj.ImageError, match="exactly one"):
        rj.ImageContent(data=PNG, url="https://example.test/a.png")
    with pytest.raises(rj.ImageError, match="unknown image detail"):
        rj.ImageContent.from_bytes(PNG, detail="medium")  # type: ignore[arg-type]


def test_from_file_and_the_repr_without_the_bytes(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "frame.jpg"
    path.write_bytes(JPEG)
    image = rj.ImageContent.from_file(str(path))
    assert image.mime_type == "image/jpeg" and image.data == JPEG
    assert "\\x" not in repr(image) and "image/jpeg" in repr(image)
    with pytest.raises(dataclasses.FrozenInstanceError):
        image.detail = "high"  # type: ignore[misc]


def test_a_real_encoded_png_is_accepted() -> None:
    pil = pytest.importorskip("PIL.Image")
    buffer = io.BytesIO()
    pil.new("RGB", (8, 8), (200, 30, 30)).save(buffer, format="PNG")
    assert rj.ImageContent.from_bytes(buffer.getvalue()).mime_type == "image/png"


@given(st.binary(max_size=64))
def test_arbitrary_bytes_are_an_image_or_a_clear_error(data: bytes) -> None:
    try:
        image = rj.ImageContent.from_bytes(data)
    except rj.ImageError:
        assert sniff_image_type(data) is None or not data
    else:
        assert image.mime_type == sniff_image_type(data) is not None
