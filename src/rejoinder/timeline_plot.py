"""The picture of a session timeline: ``rejoinder timeline FILE.jsonl -o turn.png``.

One time axis (seconds from the first entry); lanes top to bottom: agent state, user state,
user speaking (VAD), events (tools, errors, speculation), what was said (agent above the
line, user below), then one bar per obligation, ``ob_opened`` to ``ob_closed``: hatched
while not committed, darker while audible, ``▶`` or an arrow where handed over, ``x`` where
it expired, dashed if still open. Why was it thinking at 12.3 s? The bars open at 12.3 s.
``layout(entries)`` is what is drawn; ``draw_timeline`` draws it (extra ``plot``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _extras
from .session.timeline import read_timeline

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["MAX_ROWS", "Bar", "Layout", "Link", "Marker", "Span", "draw_timeline", "layout", "main"]

MAX_ROWS = 30  # obligation rows drawn; bars packed below them are counted as "+N more"
NOTE_CHARS, FLAGS = 40, ("committed", "audible", "yielded")
PROG, INSTALL_HINT = "rejoinder timeline", _extras.install_command("plot")

Interval = tuple[float, float]
AGENT_COLORS = {"initializing": "#b0b0b0", "listening": "#8fd18f", "thinking": "#f5a623"}
AGENT_COLORS["speaking"] = "#3b7dd8"
USER_COLORS = {"listening": "#d8ecd8", "speaking": "#9b59b6", "away": "#7f7f7f"}
VAD_COLOR, RED, GREY = "#5b2c6f", "#e00000", "#7f8c8d"
OB_COLORS = {"reply": "#3b7dd8", "tool": "#e67e22", "deferred_reply": "#16a085"}
OB_COLORS |= {"preemptive": "#8e44ad", "hold": "#27ae60", "handoff": "#c0392b"}
MARKER_STYLE = {"tool_started": (">", "#e67e22", 7), "tool_finished": ("s", "#e67e22", 6)}
MARKER_STYLE |= {"tool_error": ("X", "#c0392b", 8), "background_tool": ("D", GREY, 6)}
MARKER_STYLE |= {"speculation": ("o", "#8e44ad", 5), "turn_discarded": ("v", "#555555", 7)}
MARKER_STYLE |= {"error": ("X", RED, 9)}  # kind: (marker, colour, size)


@dataclass(frozen=True)
class Span:
    start: float
    end: float
    state: str


@dataclass
class Bar:  # one obligation, ob_opened to ob_closed (or the last entry while open)
    id: Any
    kind: str
    label: str
    start: float
    end: float
    row: int = 0
    closed: bool = False
    reason: str = ""
    expired_at: float | None = None
    uncommitted: list[Interval] = field(default_factory=list)
    audible: list[Interval] = field(default_factory=list)
    yielded: list[Interval] = field(default_factory=list)

    @property
    def text(self) -> str:
        return f"{self.kind} {self.label}".strip()


@dataclass(frozen=True)
class Link:  # a hand-over: src closed as dst opened, at t
    src: Any
    dst: Any
    t: float


@dataclass(frozen=True)
class Marker:  # an event: a MARKER_STYLE kind, or "handoff" (text: the new agent)
    t: float
    kind: str
    text: str


@dataclass
class Layout:
    t0: float  # the first entry's loop time; every other time is seconds from it
    start: float
    end: float
    agent: list[Span]
    user: list[Span]
    vad: list[Span]
    bars: list[Bar]
    links: list[Link]
    markers: list[Marker]
    notes: list[Marker]  # final transcripts, shortened; kind: the role
    handoffs: list[Marker]
    rows: int = 0
    hidden: int = 0  # bars packed below MAX_ROWS, not drawn

    def bar(self, id: Any) -> Bar:
        return next(b for b in self.bars if b.id == id)

    def open_at(self, t: float) -> list[Bar]:
        """The bars open at ``t`` seconds: why the agent was in its state then."""
        return [b for b in self.bars if b.start <= t < b.end]


def _short(value: Any, limit: int = NOTE_CHARS) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _state_spans(entries: Sequence[Mapping[str, Any]], t0: float, last: float) -> list[Span]:
    spans = [Span(0.0, entries[0]["t"] - t0, str(entries[0].get("old")))] if entries else []
    for i, e in enumerate(entries):
        end = entries[i + 1]["t"] - t0 if i + 1 < len(entries) else last
        spans.append(Span(e["t"] - t0, end, str(e.get("state"))))
    return [s for s in spans if s.end > s.start and s.state != "None"]


def _clip(spans: list[Interval], lo: float, hi: float) -> list[Interval]:
    return [(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi]


def _marker(t: float, kind: str, e: Mapping[str, Any]) -> Marker | None:
    name = str(e.get("name", "tool"))
    if kind == "tool":
        return Marker(t, "tool_error" if e.get("error") else f"tool_{e.get('status')}", name)
    texts = {"background_tool": f"{name} (late)", "speculation": f"spec {e.get('event', '')}"}
    texts["turn_discarded"] = f"discarded {_short(e.get('text', ''), 20)}"
    texts["error"] = _short(f"{e.get('source', '')}: {e.get('error', '')}")
    texts["handoff"] = str(e.get("new", ""))
    return Marker(t, kind, texts[kind]) if kind in texts else None


def _t(entry: Mapping[str, Any]) -> float:
    return float(entry["t"])


def layout(
    entries: Iterable[Mapping[str, Any]], *, start: float | None = None, end: float | None = None
) -> Layout:
    """What ``draw_timeline`` draws: seconds from the first entry, cropped to start..end."""
    items = sorted((e for e in entries if isinstance(e.get("t"), int | float)), key=_t)
    t0 = items[0]["t"] if items else 0.0
    last = items[-1]["t"] - t0 if items else 0.0
    agent = _state_spans([e for e in items if e["kind"] == "agent_state"], t0, last)
    user = _state_spans([e for e in items if e["kind"] == "user_state"], t0, last)
    said = [e for e in items if e["kind"] == "user_speaking"]  # the VAD: speaking or not
    said = [{"t": e["t"], "state": "speaking" if e.get("speaking") else "-"} for e in said]
    vad = [s for s in _state_spans(said, t0, last) if s.state == "speaking"]
    bars: dict[Any, Bar] = {}
    flags: dict[tuple[Any, str], list[float]] = {}  # (id, flag): on, off, on, ...
    links, markers, notes = list[Link](), list[Marker](), list[Marker]()

    def flag(id: Any, name: str, value: bool, t: float) -> None:
        times = flags.setdefault((id, name), [])
        if value != (len(times) % 2 == 1):  # a change: on when off, off when on
            times.append(t)

    for e in items:
        t, kind, id = e["t"] - t0, e["kind"], e.get("id")
        if kind == "ob_opened":
            bars[id] = Bar(id, str(e.get("ob", "?")), str(e.get("label") or ""), t, last)
            flag(id, "uncommitted", not e.get("committed", True), t)
        elif kind == "ob_closed" and id in bars:
            bars[id].end, bars[id].closed, bars[id].reason = t, True, str(e.get("reason") or "")
        elif kind == "ob_flag" and id in bars and e.get("flag") in FLAGS:
            name = "uncommitted" if e["flag"] == "committed" else str(e["flag"])
            flag(id, name, bool(e.get("value")) != (name == "uncommitted"), t)
        elif kind == "ob_expired" and id in bars:
            bars[id].expired_at = t
        elif kind == "ob_handed_over":
            links += [Link(src, e.get("to"), t) for src in e.get("ids") or ()]
        elif kind == "transcript" and e.get("final", True) and str(e.get("text", "")).strip():
            text = _short(e["text"]) + (" [cut]" if e.get("interrupted") else "")
            notes.append(Marker(t, str(e.get("role", "user")), text))
        elif (marker := _marker(t, kind, e)) is not None:
            markers.append(marker)
    for (id, name), times in flags.items():
        times = [*times, bars[id].end] if len(times) % 2 else times
        pairs = zip(times[::2], times[1::2], strict=True)
        getattr(bars[id], name).extend((a, b) for a, b in pairs if b > a)

    lo = 0.0 if start is None else max(0.0, start)
    hi = max(lo, last if end is None else min(last, end))

    def crop(spans: list[Span]) -> list[Span]:
        inside = [s for s in spans if s.end > lo and s.start < hi]
        return [Span(max(s.start, lo), min(s.end, hi), s.state) for s in inside]

    shown = [b for b in bars.values() if b.start <= hi and (lo < b.end or b.start == b.end == lo)]
    for b in shown:
        b.start, b.end = max(b.start, lo), min(b.end, hi)
        b.uncommitted, b.audible = _clip(b.uncommitted, lo, hi), _clip(b.audible, lo, hi)
        b.yielded = _clip(b.yielded, lo, hi)
    row_ends: list[float] = []  # interval packing: the first row whose last bar has closed
    for b in sorted(shown, key=lambda b: (b.start, b.end)):
        b.row = next((r for r, e in enumerate(row_ends) if e <= b.start), len(row_ends))
        row_ends[b.row : b.row + 1] = [b.end if b.closed else float("inf")]
    visible = sorted((b for b in shown if b.row < MAX_ROWS), key=lambda b: (b.start, b.row))
    ids = {b.id for b in visible}
    links = [k for k in links if k.src in ids and k.dst in ids]
    markers, notes = [m for m in markers if lo <= m.t <= hi], [n for n in notes if lo <= n.t <= hi]
    events = [m for m in markers if m.kind != "handoff"]
    handoffs = [m for m in markers if m.kind == "handoff"]
    lanes, hidden = (crop(agent), crop(user), crop(vad)), len(shown) - len(visible)
    rows = min(len(row_ends), MAX_ROWS)
    return Layout(t0, lo, hi, *lanes, visible, links, events, notes, handoffs, rows, hidden)


Y_AGENT, Y_USER, Y_VAD, Y_EVENTS, Y_SAID = 0.0, 1.0, 2.0, 3.0, 4.35
Y_ROWS, ROW_STEP, LANE_H, BAR_H = 5.8, 0.75, 0.7, 0.58
TEXT: dict[str, Any] = {"fontsize": 7, "va": "center", "ha": "left", "clip_on": True}
LEGEND: dict[str, Any] = {"fontsize": 7, "frameon": False}


def _row_y(row: int) -> float:
    return Y_ROWS + row * ROW_STEP


def _darker(color: str, factor: float = 0.6) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return (r * factor, g * factor, b * factor)


def _lane(ax: Axes, spans: list[Span], y: float, colors: Mapping[str, str]) -> None:
    for s in spans:
        color = colors.get(s.state, GREY)
        ax.broken_barh([(s.start, s.end - s.start)], (y - LANE_H / 2, LANE_H), fc=color, ec="white")


def _draw_bars(ax: Axes, lay: Layout, char: float) -> None:
    arriving = {k.dst for k in lay.links}
    for b in lay.bars:
        y, color = _row_y(b.row), OB_COLORS.get(b.kind, GREY)
        box, whole = (y - BAR_H / 2, BAR_H), [(b.start, max(b.end - b.start, 1e-9))]
        ax.broken_barh(whole, box, facecolors=color, alpha=0.45)
        hatched = [(a, z - a) for a, z in b.uncommitted]  # white under: not committed
        ax.broken_barh(hatched, box, facecolors="white", edgecolor=color, hatch="////", lw=0)
        ax.broken_barh([(a, z - a) for a, z in b.audible], box, facecolors=_darker(color))
        for a, z in b.yielded:
            ax.plot([a, z], [y + BAR_H / 2] * 2, color="black", lw=2, ls=":")
        style = "-" if b.closed else "--"
        ax.broken_barh(whole, box, facecolors="none", edgecolor=_darker(color, 0.8), ls=style)
        after = [o.start for o in lay.bars if o.row == b.row and o.start >= b.end and o is not b]
        room = (min(after) if after else lay.end + 1e9) - b.start
        text = b.text + ("" if b.closed else " (open)")
        if len(text) + 7 < room / char:
            text += f" {b.end - b.start:.2f}s"
        indent = 2.0 if b.id in arriving else 0.5
        fits = int(room / char - indent) - 1
        if fits >= 3:
            text = text if len(text) <= fits else text[: fits - 1] + "…"
            box_style = {"facecolor": "white", "alpha": 0.7, "lw": 0, "pad": 0.8}
            ax.text(b.start + char * indent, y, text, bbox=box_style, **TEXT)
        if b.expired_at is not None:
            ax.plot(b.expired_at, y, marker="x", color=RED, ms=9, mew=2)
    for k in lay.links:
        src, dst = lay.bar(k.src), lay.bar(k.dst)
        if src.row == dst.row:
            ax.plot(k.t, _row_y(dst.row), marker=">", color="black", ms=6)
        else:
            arrow = {"arrowstyle": "-|>", "color": "black", "lw": 0.9, "shrinkA": 0, "shrinkB": 0}
            xy, xytext = (dst.start, _row_y(dst.row)), (src.end, _row_y(src.row))
            ax.annotate("", xy=xy, xytext=xytext, arrowprops=arrow)


def _draw_events(ax: Axes, lay: Layout, char: float) -> None:
    ends: dict[float, float] = {}
    for m in lay.markers:  # labels on two levels, so close ones do not overlap
        shape, color, size = MARKER_STYLE.get(m.kind, ("o", "#555555", 5))
        ax.plot(m.t, Y_EVENTS, marker=shape, color=color, ms=size, ls="none")
        text = _short(m.text, 24)
        y = min((Y_EVENTS - 0.25, Y_EVENTS + 0.27), key=lambda y: max(ends.get(y, -1e9), m.t))
        ends[y] = m.t + (len(text) + 2) * char * 0.85
        ax.text(m.t + char, y, text, **{**TEXT, "fontsize": 6, "color": color})
    ax.axhline(Y_SAID, color="#cccccc", lw=0.8, zorder=0)
    levels = {"agent": [Y_SAID - 0.28, Y_SAID - 0.6], "user": [Y_SAID + 0.28, Y_SAID + 0.6]}
    for n in lay.notes:
        ys, text = levels.get(n.kind, levels["user"]), f"{n.kind}: {n.text}"
        x = max(lay.start, min(n.t, lay.end - (len(text) + 1) * char))  # inside the axes
        y = min(ys, key=lambda y: max(ends.get(y, -1e9), x))
        ends[y] = x + (len(text) + 3) * char
        color = "#1f4e8c" if n.kind == "agent" else VAD_COLOR
        ax.plot([n.t, x], [Y_SAID, y], color=color, lw=0.6)
        ax.text(x, y, text, color=color, **TEXT)
    for h in lay.handoffs:
        ax.axvline(h.t, color="#c0392b", lw=1.2, ls="--")
        ax.text(h.t, Y_AGENT - 0.45, f" → {h.text}", color="#c0392b", fontsize=7, va="center")


def draw_timeline(
    entries: Iterable[Mapping[str, Any]],
    path: str | Path,
    *,
    title: str | None = None,
    start: float | None = None,
    end: float | None = None,
) -> Path:
    """Render the timeline ``entries`` as a PNG at ``path`` (see the module docstring);
    ``start``/``end`` crop it (seconds from the first entry)."""
    with _extras.needed("plot", "drawing a timeline"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    entries = list(entries)
    lay = layout(entries, start=start, end=end)
    duration = max(lay.end - lay.start, 0.5)
    width = min(max(2.0 * duration / 5.0 + 2.0, 10.0), 60.0)  # 2 in per 5 s, clamped
    y_bottom = _row_y(max(lay.rows, 1) - 1) + ROW_STEP / 2 + (0.5 if lay.hidden else 0)
    height = min(max(1.3 + 0.4 * (y_bottom + 0.6), 4.0), 24.0)
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)  # Agg, without pyplot's global state
    ax = fig.add_axes((1.0 / width, 0.5 / height, 1 - 1.3 / width, 1 - 1.45 / height))
    char = duration / (width - 1.3) * (7 * 0.58 / 72)  # seconds a 7 pt character takes
    ax.set_xlim(lay.start - duration * 0.01, lay.end + duration * 0.01)
    ax.set_ylim(y_bottom, Y_AGENT - 0.6)
    _lane(ax, lay.agent, Y_AGENT, AGENT_COLORS)
    _lane(ax, lay.user, Y_USER, USER_COLORS)
    _lane(ax, lay.vad, Y_VAD, {"speaking": VAD_COLOR})
    _draw_events(ax, lay, char)
    _draw_bars(ax, lay, char)
    if lay.hidden:
        more = f"+{lay.hidden} more obligations not drawn"
        ax.text(lay.start, y_bottom - 0.25, more, **{**TEXT, "color": RED})
    ticks = [Y_AGENT, Y_USER, Y_VAD, Y_EVENTS, Y_SAID, Y_ROWS]
    ax.set_yticks(ticks, ["agent", "user", "user VAD", "events", "said", "obligations"])
    ax.tick_params(axis="y", length=0, labelsize=8)
    ax.tick_params(axis="x", labelsize=8, top=True, labeltop=True)
    ax.xaxis.minorticks_on()
    ax.grid(axis="x", which="major", color="#999999", lw=0.5, alpha=0.6)
    ax.grid(axis="x", which="minor", color="#cccccc", lw=0.3, alpha=0.5)
    ax.set_axisbelow(True)
    for y in (Y_EVENTS + 0.5, Y_SAID + 0.85):
        ax.axhline(y, color="#888888", lw=0.6)
    ax.set_xlabel("seconds from the first entry", fontsize=8)
    handles: list[Any] = [Patch(color=c, label=f"agent {s}") for s, c in AGENT_COLORS.items()]
    handles += [Patch(color=c, label=f"user {s}") for s, c in USER_COLORS.items()]
    handles += [Patch(color=VAD_COLOR, label="user VAD speaking")]
    handles += [Patch(fc="white", ec="#555555", hatch="////", label="not committed")]
    handles += [Patch(color=_darker(OB_COLORS["reply"]), label="audible")]
    for m, c, what in ((">", "black", "handed over"), ("x", RED, "expired"), ("X", RED, "error")):
        handles.append(Line2D([], [], marker=m, color=c, ls="none", mew=2, label=what))
    ncol, anchor = max(4, min(len(handles), int(width / 1.3))), (0.5, 1 - 0.3 / height)
    fig.legend(handles=handles, loc="upper center", ncol=ncol, bbox_to_anchor=anchor, **LEGEND)
    shown = title or f"session timeline ({len(entries)} entries)"
    if start is not None or end is not None:
        shown += f"  [{lay.start:.2f} s – {lay.end:.2f} s]"
    fig.suptitle(shown, fontsize=10, y=1 - 0.05 / height, va="top")
    fig.savefig(Path(path), dpi=100, format="png")
    return Path(path)


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """``rejoinder timeline FILE.jsonl -o turn.png [--from S] [--to S] [--title T]``: 0 drawn,
    1 nothing to draw (no entries, past the end, no matplotlib), 2 a usage or file error."""
    p = argparse.ArgumentParser(prog=PROG, description="Draw a session timeline as a PNG.")
    p.add_argument("file", type=Path, help="the timeline, JSON lines (timeline.write_to)")
    p.add_argument("-o", "--output", type=Path, help="the PNG to write (default: FILE.png)")
    p.add_argument("--from", dest="start", type=float, metavar="S", help="start at S seconds")
    p.add_argument("--to", dest="end", type=float, metavar="S", help="end at S seconds")
    p.add_argument("--title", help="the picture's title")
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:  # argparse printed why (or the help)
        return exc.code if isinstance(exc.code, int) else 2
    if args.start is not None and args.end is not None and args.start >= args.end:
        return _fail("--from must be before --to", 2)
    try:
        with open(args.file, encoding="utf-8", errors="replace") as f:
            entries = read_timeline(f)
    except OSError as exc:
        return _fail(f"cannot read {args.file}: {exc.strerror or exc}", 2)
    if not entries:
        expected = '(expected JSON lines like {"t": 12.5, "kind": "agent_state", ...})'
        return _fail(f"{args.file} has no timeline entries {expected}", 1)
    last = max(map(_t, entries)) - min(map(_t, entries))
    if args.start is not None and args.start > last:
        return _fail(f"--from {args.start} is after the end ({last:.2f} s)", 1)
    output = args.output or args.file.with_suffix(".png")
    try:
        out = draw_timeline(entries, output, title=args.title, start=args.start, end=args.end)
    except ImportError as exc:
        return _fail(str(exc), 1)
    except OSError as exc:
        return _fail(f"cannot write {output}: {exc.strerror or exc}", 2)
    print(f"wrote {out} ({len(entries)} entries, {last:.2f} s)")
    return 0
