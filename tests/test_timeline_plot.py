"""The timeline picture: layout() from entries, draw_timeline() to a PNG, main() end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rejoinder.timeline_plot import MAX_ROWS, Link, Span, draw_timeline, layout, main

T0 = 100.0  # loop time of the first entry; the picture counts from it


def e(t: float, kind: str, **fields: Any) -> dict[str, Any]:
    return {"t": T0 + t, "kind": kind, **fields}


def opened(t: float, id: int, ob: str, label: str = "", committed: bool = True) -> dict[str, Any]:
    return e(t, "ob_opened", id=id, ob=ob, owner="agent", label=label, committed=committed)


def closed(t: float, id: int, ob: str, label: str = "", reason: str = "done") -> dict[str, Any]:
    return e(t, "ob_closed", id=id, ob=ob, owner="agent", label=label, reason=reason)


def agent(t: float, state: str, old: str) -> dict[str, Any]:
    return e(t, "agent_state", state=state, old=old)


def turn() -> list[dict[str, Any]]:
    """The user asks for the weather; a reply hands over to a tool, the tool to a follow-up
    reply that speaks 3.2-4.5 s; a filler ("hold") talks over the tool's wait."""
    return [
        e(0.0, "session", event="started"),
        agent(0.0, "listening", "initializing"),
        e(0.0, "user_speaking", speaking=True),
        e(0.0, "user_state", state="speaking", old="listening"),
        opened(0.8, 1, "preemptive", committed=False),
        e(0.8, "speculation", event="started"),
        e(1.2, "user_speaking", speaking=False),
        e(1.2, "user_state", state="listening", old="speaking"),
        e(
            1.3,
            "transcript",
            role="user",
            text="What's the weather like in Paris tomorrow?",
            final=True,
        ),
        opened(1.5, 2, "reply"),
        closed(1.5, 1, "preemptive", reason="dropped"),
        e(1.5, "speculation", event="dropped", reason="transcript changed"),
        agent(1.5, "thinking", "listening"),
        opened(1.6, 3, "tool", "get_weather"),
        closed(1.6, 2, "reply", reason="handed_over"),
        e(1.6, "ob_handed_over", ids=[2], to=3),
        e(1.6, "tool", name="get_weather", call_id="c1", status="started"),
        opened(2.0, 4, "hold", "filler"),
        e(2.0, "ob_flag", id=4, flag="audible", value=True),
        agent(2.0, "speaking", "thinking"),
        e(2.1, "transcript", role="agent", text="One moment, let me check.", final=True),
        e(2.6, "ob_flag", id=4, flag="audible", value=False),
        closed(2.6, 4, "hold", "filler"),
        agent(2.6, "thinking", "speaking"),
        e(3.0, "tool", name="get_weather", call_id="c1", status="finished", error=False),
        opened(3.0, 5, "reply"),
        closed(3.0, 3, "tool", "get_weather", reason="handed_over"),
        e(3.0, "ob_handed_over", ids=[3], to=5),
        e(3.2, "ob_flag", id=5, flag="audible", value=True),
        agent(3.2, "speaking", "thinking"),
        e(
            3.4,
            "transcript",
            role="agent",
            final=True,
            interrupted=False,
            text="Tomorrow in Paris: sunny, 24 degrees, with a light breeze from the west.",
        ),
        e(4.5, "ob_flag", id=5, flag="audible", value=False),
        closed(4.5, 5, "reply"),
        agent(4.5, "listening", "speaking"),
        e(4.6, "session", event="closed", reason="user_left"),
    ]


def write_jsonl(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in entries), encoding="utf-8")
    return path


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    image = matplotlib.image.imread(path)
    return image.shape[1], image.shape[0]


# ------------------------------------------------------------------------ layout


def test_agent_and_user_state_spans_match_the_entries() -> None:
    lay = layout(turn())
    assert lay.t0 == T0
    assert (lay.start, lay.end) == (0.0, pytest.approx(4.6))
    assert [(s.state, s.start, s.end) for s in lay.agent] == [
        ("listening", 0.0, pytest.approx(1.5)),
        ("thinking", pytest.approx(1.5), pytest.approx(2.0)),
        ("speaking", pytest.approx(2.0), pytest.approx(2.6)),
        ("thinking", pytest.approx(2.6), pytest.approx(3.2)),
        ("speaking", pytest.approx(3.2), pytest.approx(4.5)),
        ("listening", pytest.approx(4.5), pytest.approx(4.6)),
    ]
    assert [(s.state, s.start, s.end) for s in lay.user] == [
        ("speaking", 0.0, pytest.approx(1.2)),
        ("listening", pytest.approx(1.2), pytest.approx(4.6)),
    ]
    assert lay.vad == [Span(0.0, pytest.approx(1.2), "speaking")]


def test_initial_state_before_the_first_change_comes_from_old() -> None:
    lay = layout([e(0.0, "session", event="started"), agent(0.5, "listening", "initializing")])
    assert [(s.state, s.start) for s in lay.agent] == [("initializing", 0.0)]
    assert lay.agent[0].end == pytest.approx(0.5)  # the last change is at the last t


def test_obligation_bars_rows_and_handovers() -> None:
    lay = layout(turn())
    tool = lay.bar(3)
    assert tool.text == "tool get_weather"
    assert (tool.start, tool.end) == (pytest.approx(1.6), pytest.approx(3.0))
    assert tool.closed and tool.reason == "handed_over"
    follow_up = lay.bar(5)
    assert follow_up.text == "reply"
    assert follow_up.audible == [(pytest.approx(3.2), pytest.approx(4.5))]
    assert lay.links == [Link(2, 3, pytest.approx(1.6)), Link(3, 5, pytest.approx(3.0))]
    # preemptive -> reply -> tool -> follow-up share row 0 (each opens as the last closed);
    # the filler overlaps the tool, so it goes below
    assert [lay.bar(i).row for i in (1, 2, 3, 5)] == [0, 0, 0, 0]
    assert lay.bar(4).row == 1 and lay.rows == 2 and lay.hidden == 0
    assert lay.bar(1).uncommitted == [(pytest.approx(0.8), pytest.approx(1.5))]
    assert lay.bar(4).audible == [(pytest.approx(2.0), pytest.approx(2.6))]
    # "why was it thinking at 2.8 s?": the tool call was open
    assert [b.text for b in lay.open_at(2.8)] == ["tool get_weather"]


def test_rows_are_reused_and_capped() -> None:
    entries = [e(0.0, "session", event="started")]
    for i in range(3):  # three bars one after another: one row
        entries += [opened(i, i, "reply"), closed(i + 0.5, i, "reply")]
    lay = layout(entries)
    assert {b.row for b in lay.bars} == {0} and lay.rows == 1
    many = [opened(0.0, i, "tool", f"t{i}") for i in range(MAX_ROWS + 5)]
    lay = layout([*many, e(1.0, "session", event="closed")])
    assert lay.rows == MAX_ROWS and len(lay.bars) == MAX_ROWS and lay.hidden == 5


def test_open_obligation_ends_at_the_last_t_and_expiry_is_marked() -> None:
    entries = [
        opened(0.0, 1, "tool", "slow"),
        e(0.2, "ob_flag", id=1, flag="committed", value=False),
        e(0.7, "ob_flag", id=1, flag="committed", value=True),
        e(1.0, "ob_expired", id=1, ob="tool", owner="agent", label="slow"),
        e(2.5, "error", source="llm", error="TimeoutError: read", recoverable=True),
    ]
    lay = layout(entries)
    bar = lay.bar(1)
    assert not bar.closed and bar.end == pytest.approx(2.5)
    assert bar.uncommitted == [(pytest.approx(0.2), pytest.approx(0.7))]
    assert bar.expired_at == pytest.approx(1.0)
    assert [(m.kind, m.t) for m in lay.markers] == [("error", pytest.approx(2.5))]


def test_markers_notes_and_handoffs() -> None:
    lay = layout([*turn(), e(4.6, "handoff", old="triage", new="billing")])
    assert [(m.kind, m.text) for m in lay.markers if m.kind.startswith("tool")] == [
        ("tool_started", "get_weather"),
        ("tool_finished", "get_weather"),
    ]
    assert [n.kind for n in lay.notes] == ["user", "agent", "agent"]
    assert all(len(n.text) <= 40 for n in lay.notes)
    assert lay.notes[2].text.endswith("…")
    assert [(h.t, h.text) for h in lay.handoffs] == [(pytest.approx(4.6), "billing")]


def test_cropping_clips_spans_and_bars() -> None:
    lay = layout(turn(), start=2.0, end=3.5)
    assert (lay.start, lay.end) == (2.0, 3.5)
    assert all(2.0 <= s.start <= s.end <= 3.5 for s in lay.agent + lay.user)
    assert lay.vad == [] and {b.id for b in lay.bars} == {3, 4, 5}
    assert (lay.bar(3).start, lay.bar(5).end) == (2.0, 3.5)
    assert lay.bar(5).audible == [(pytest.approx(3.2), 3.5)]


# ------------------------------------------------------------------------ drawing


def test_draw_timeline_writes_a_png(tmp_path: Path) -> None:
    out = draw_timeline(turn(), tmp_path / "turn.png", title="weather turn")
    assert out == tmp_path / "turn.png"
    width, height = png_size(out)
    assert width >= 1000 and 400 <= height <= 2400  # 10 in at dpi 100, at least


def test_draw_timeline_long_session_is_wider_and_clamped(tmp_path: Path) -> None:
    entries = [agent(float(i), "thinking" if i % 2 else "listening", "x") for i in range(60)]
    width, _ = png_size(draw_timeline(entries, tmp_path / "a.png"))
    assert width > 2000  # 59 s: about 2 inches per 5 s
    entries = [agent(float(i), "listening", "x") for i in range(0, 3600, 60)]
    width, _ = png_size(draw_timeline(entries, tmp_path / "b.png"))
    assert width <= 6000


def test_draw_timeline_with_nothing_but_one_entry(tmp_path: Path) -> None:
    png_size(draw_timeline([e(0.0, "session", event="started")], tmp_path / "one.png"))


# ---------------------------------------------------------------------------- cli


def test_main_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "turn.jsonl", turn())
    with path.open("a", encoding="utf-8") as f:
        f.write('\nnot json\n{"kind": "future_kind_without_t"}\n')
    out = tmp_path / "turn.png"
    assert main([str(path), "-o", str(out), "--title", "weather"]) == 0
    assert "wrote" in capsys.readouterr().out
    png_size(out)


def test_main_default_output_next_to_the_file(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "turn.jsonl", turn())
    assert main([str(path)]) == 0
    png_size(tmp_path / "turn.png")


def test_main_crops_with_from_and_to(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "turn.jsonl", turn())
    full, crop = tmp_path / "full.png", tmp_path / "crop.png"
    assert main([str(path), "-o", str(full)]) == 0
    assert main([str(path), "-o", str(crop), "--from", "1.5", "--to", "3.5"]) == 0
    assert png_size(crop)[1] == png_size(full)[1]  # the same two rows of obligations


def test_main_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "x.png")]) == 2
    assert "No such file" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("content", ["", "\n\n", 'hello\n[1, 2]\n{"t": "soon"}\n'])
def test_main_file_without_entries_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    assert main([str(path), "-o", str(tmp_path / "x.png")]) == 1
    assert "no timeline entries" in capsys.readouterr().err


def test_main_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "turn.jsonl", turn())
    assert main([]) == 2
    assert main([str(path), "--from", "soon"]) == 2
    assert main([str(path), "--from", "3", "--to", "2"]) == 2
    assert "--from must be before --to" in capsys.readouterr().err
    assert main([str(path), "--from", "60"]) == 1
    assert "after the end" in capsys.readouterr().err


def test_missing_matplotlib_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    # Hide it whether or not an earlier test in this worker imported it.
    loaded = [m for m in sys.modules if m.split(".")[0] == "matplotlib"]
    for name in {*loaded, "matplotlib", "matplotlib.pyplot"}:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"rejoinder\[plot\]"):
        draw_timeline(turn(), tmp_path / "x.png")
    path = write_jsonl(tmp_path / "turn.jsonl", turn())
    assert main([str(path), "-o", str(tmp_path / "x.png")]) == 1
    assert "pip install 'rejoinder[plot]'" in capsys.readouterr().err
