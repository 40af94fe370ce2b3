"""container/image_layout.py on small Dockerfiles: it builds what it knows into its folder
and nowhere else, and refuses by name what it does not know (a RUN it cannot run here, a
shell-form CMD, a file .dockerignore keeps out), so the real Dockerfile cannot outgrow
the check unnoticed."""

from __future__ import annotations

import pwd
import sys
from pathlib import Path

import pytest
from image_layout import BuiltImage, LayoutError, Toolbox, build_layout

pytestmark = pytest.mark.skipif(
    sys.version_info[:2] != (3, 11), reason="the python:3.11 stage needs a Python 3.11 here"
)


def build(tmp_path: Path, dockerfile: str, ignore: str = "") -> BuiltImage:
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(dockerfile)
    (context / ".dockerignore").write_text(ignore)
    (context / "a.txt").write_text("hello")
    (context / "secret.env").write_text("TOKEN=1")
    (context / "lib").mkdir()
    (context / "lib" / "one.py").write_text("x = 1")
    work = tmp_path / "work"
    work.mkdir()
    bin_dir = work / "base-bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    return build_layout(context / "Dockerfile", context, work, Toolbox(sys.executable, bin_dir))


def test_a_small_image_is_laid_out_under_its_root(tmp_path: Path) -> None:
    image = build(
        tmp_path,
        "FROM python:3.11-slim AS only\n"
        "RUN useradd --uid 10001 --home-dir /home/someone-not-here someone-not-here\n"
        "WORKDIR /app\n"
        "COPY a.txt ./\n"
        "COPY lib/ /app/lib/\n"
        "RUN mkdir -p /app/data && chmod -R a+rX /app\n"
        "ENV GREETING=hi \\\n"
        "    WHERE=/app/data\n"
        "USER 10001:10001\n"
        'ENTRYPOINT ["python", "-c"]\n'
        'CMD ["print(1)"]\n',
    )
    assert (image.root / "app/a.txt").read_text() == "hello"
    assert (image.root / "app/lib/one.py").read_text() == "x = 1"
    assert (image.root / "app/data").is_dir()
    assert image.workdir == "/app" and image.uid_gid() == (10001, 10001)
    assert image.entrypoint == ["python", "-c"] and image.cmd == ["print(1)"]
    assert image.runtime_env()["WHERE"] == f"{image.root}/app/data"  # the image's path, mapped
    assert image.home() == "/home/someone-not-here"
    with pytest.raises(KeyError):  # recorded, never run: this machine has no such user
        pwd.getpwnam("someone-not-here")


@pytest.mark.parametrize(
    ("dockerfile", "refusal"),
    [
        ("FROM python:3.11-slim\nRUN curl -o /x https://example.com/x\n", "does not know how"),
        ("FROM python:3.11-slim\nCMD rejoinder serve app.py\n", "JSON array"),
        ("FROM python:3.11-slim\nRUN chmod -R a+rX /etc\n", "outside the image"),
        ("FROM python:3.11-slim\nCOPY secret.env /app/\n", "not in the build context"),
        ("FROM python:3.11-slim\nRUN pip install x | tee log\n", "only `a && b`"),
        ("FROM debian:bookworm-slim\nRUN true\n", "no stand-in"),
    ],
)
def test_what_it_cannot_do_faithfully_is_refused(
    tmp_path: Path, dockerfile: str, refusal: str
) -> None:
    with pytest.raises((LayoutError, ValueError), match=refusal):
        build(tmp_path, dockerfile, ignore="*.env\n")
