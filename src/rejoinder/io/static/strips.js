// The page's two strips, drawn on canvases:
// - MinuteStrip: the last minute, one lane of agent states, one of the user's, one of
//   tool calls, scrolling (from the client's agentState, userState and tool events);
// - FloorStrip: the last 20 s of the session timeline (the client's `timeline` events):
//   the agent's state, then one bar per obligation (ob_opened to ob_closed), its audible
//   part darker, its uncommitted part hatched, as `rejoinder timeline` draws them.

const MINUTE_MS = 60000;
const FLOOR_S = 20;
const OB_COLORS = {
  reply: "#3b7dd8", tool: "#e67e22", deferred_reply: "#16a085", preemptive: "#8e44ad", hold: "#27ae60",
  handoff: "#c0392b",
};

const colors = new Map();
/** A state's colour, from the page's CSS variables (`--speaking`, `--u-speaking`, ...). */
export function color(lane, state) {
  const name = lane === "user" ? "u-" + state : state;
  if (!colors.has(name)) {
    colors.set(name, getComputedStyle(document.documentElement).getPropertyValue("--" + name).trim() || "#c3c8d2");
  }
  return colors.get(name);
}

function roundRect(g, x, y, w, h, r) {
  // A canvas not laid out yet (0 px wide) gives a negative width: draw nothing, never a
  // negative radius (arcTo throws on one).
  g.beginPath();
  if (!(w > 0 && h > 0)) return;
  r = Math.max(0, Math.min(r, w / 2, h / 2));
  g.moveTo(x + r, y); g.arcTo(x + w, y, x + w, y + h, r); g.arcTo(x + w, y + h, x, y + h, r);
  g.arcTo(x, y + h, x, y, r); g.arcTo(x, y, x + w, y, r); g.closePath();
}

/** The canvas's 2D context at the screen's pixel ratio, cleared; and its CSS size. */
function surface(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) {
    canvas.width = Math.round(w * ratio); canvas.height = Math.round(h * ratio);
  }
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, w, h);
  return { g, w, h };
}

function ticks(g, left, span, right, y, window_s, step) {
  g.fillStyle = "#9aa1b0";
  g.textAlign = "center";
  for (let s = 0; s <= window_s; s += step) {
    const px = left + span * (1 - s / window_s);
    g.fillRect(px - 0.5, y, 1, 4);
    g.fillText(s === 0 ? "now" : "−" + s + " s", Math.min(px, right - 14), y + 11);
  }
  g.textAlign = "start";
}

export class MinuteStrip {
  constructor(canvas) {
    this.canvas = canvas;
    this.spans = []; // {lane, state, start, end}, page time (ms)
    this.tools = new Map(); // callId -> {name, start, end, error}
  }

  /** A lane's new state at page time `now`; the state it left. */
  state(lane, state, now) {
    const open = this.spans.findLast((s) => s.lane === lane && s.end === null);
    if (open) open.end = now;
    this.spans.push({ lane, state, start: now, end: null });
    return open ? open.state : null;
  }

  /** A tool event; the tool's record ({name, start, end, error}). */
  tool(event, now) {
    let tool = this.tools.get(event.callId);
    if (!tool) {
      tool = { name: event.name, start: now, end: null, error: false };
      this.tools.set(event.callId, tool);
    }
    if (event.status === "finished") {
      tool.end = now;
      tool.error = event.error;
    }
    return tool;
  }

  /** Disconnected: every lane stops growing. */
  end(now) {
    for (const s of this.spans) if (s.end === null) s.end = now;
    for (const tool of this.tools.values()) if (tool.end === null) tool.end = now;
  }

  draw(now) {
    const { g, w, h } = surface(this.canvas);
    const left = 56, right = w - 4, span = right - left;
    const x = (t) => left + span * (1 - (now - t) / MINUTE_MS);
    const lanes = { agent: [8, 34], user: [50, 34], tool: [92, 10] };
    const names = { agent: "agent", user: "you", tool: "tools" };
    g.font = "12px system-ui, sans-serif";
    g.textBaseline = "middle";
    for (const [lane, [top, height]] of Object.entries(lanes)) {
      g.fillStyle = "#f1f3f6";
      roundRect(g, left, top, span, height, 6); g.fill();
      g.fillStyle = "#6b7385";
      g.fillText(names[lane], 0, top + height / 2);
    }
    const spans = this.spans;
    while (spans.length > 2 && spans[0].end !== null && now - spans[0].end > MINUTE_MS) spans.shift();
    g.save();
    g.beginPath(); g.rect(left, 0, span, h); g.clip();
    for (const s of spans) {
      const end = s.end === null ? now : s.end;
      if (now - end > MINUTE_MS) continue;
      const [top, height] = lanes[s.lane];
      const x0 = Math.max(left, x(s.start)), x1 = x(end);
      if (x1 - x0 < 0.5) continue;
      g.fillStyle = color(s.lane, s.state);
      roundRect(g, x0, top, x1 - x0, height, 6); g.fill();
      if (x1 - x0 > 70 && s.state !== "listening" && s.state !== "initializing") {
        g.fillStyle = "#ffffffe6";
        g.fillText(s.state, x0 + 8, top + height / 2);
      }
    }
    for (const [id, tool] of this.tools) {
      const end = tool.end === null ? now : tool.end;
      if (now - end > MINUTE_MS) { this.tools.delete(id); continue; }
      const [top, height] = lanes.tool;
      const x0 = Math.max(left, x(tool.start)), x1 = Math.max(x(end), x0 + 3);
      g.fillStyle = tool.error ? color("", "tool-error") : color("", "tool");
      roundRect(g, x0, top, x1 - x0, height, 4); g.fill();
    }
    g.restore();
    ticks(g, left, span, right, 106, 60, span < 480 ? 20 : 10);
  }
}

function closeOb(ob, t) {
  if (ob.end === null) ob.end = t;
  for (const spans of [ob.audible, ob.uncommitted]) {
    const last = spans.at(-1);
    if (last && last[1] === null) last[1] = t;
  }
}

export class FloorStrip {
  constructor(canvas) {
    this.canvas = canvas;
    this.boxes = []; // what was drawn where: [x0, x1, y0, y1, ob], for the hover text
    this.reset();
    canvas.addEventListener("mousemove", (event) => this.#hover(event));
  }

  reset() {
    // origin: performance.now() at the session's t = 0 (the earliest estimate seen wins)
    this.origin = null;
    this.agent = [];
    this.obs = new Map();
    this.draw();
  }

  /** The session's clock now (seconds), or null before the first entry. */
  now() {
    return this.origin === null ? null : (performance.now() - this.origin) / 1000;
  }

  /** Disconnected: nothing grows any more. */
  end() {
    const now = this.now();
    if (now === null) return;
    for (const s of this.agent) if (s.end === null) s.end = now;
    for (const ob of this.obs.values()) closeOb(ob, now);
    this.draw();
  }

  /** One timeline entry ({t, kind, ...}); false when it is not one. */
  entry(e) {
    if (!e || typeof e.t !== "number" || typeof e.kind !== "string") return false;
    const origin = performance.now() - e.t * 1000;
    if (this.origin === null || origin < this.origin) this.origin = origin;
    const ob = this.obs.get(e.id);
    switch (e.kind) {
      case "agent_state": {
        const open = this.agent.at(-1);
        if (open && open.end === null) open.end = e.t;
        this.agent.push({ state: e.state, start: e.t, end: null });
        break;
      }
      case "ob_opened":
        this.obs.set(e.id, {
          id: e.id, ob: String(e.ob), label: e.label ? String(e.label) : "", start: e.t, end: null,
          audible: [], uncommitted: e.committed === false ? [[e.t, null]] : [], expired: false, reason: "",
        });
        break;
      case "ob_flag": {
        if (!ob || ob.end !== null) break;
        const spans = e.flag === "audible" ? ob.audible : e.flag === "committed" ? ob.uncommitted : null;
        if (!spans) break;
        const last = spans.at(-1), opening = e.flag === "audible" ? !!e.value : !e.value;
        if (opening && !(last && last[1] === null)) spans.push([e.t, null]);
        if (!opening && last && last[1] === null) last[1] = e.t;
        break;
      }
      case "ob_closed":
        if (ob) { closeOb(ob, e.t); ob.reason = String(e.reason || ""); }
        break;
      case "ob_handed_over":
        for (const id of e.ids || []) { const old = this.obs.get(id); if (old) closeOb(old, e.t); }
        break;
      case "ob_expired":
        if (ob) ob.expired = true;
        break;
    }
    this.draw();
    return true;
  }

  draw() {
    const c = this.canvas;
    const { g, w, h } = surface(c);
    const left = 56, right = w - 4, span = right - left;
    const now = this.now() ?? 0;
    const x = (t) => left + span * (1 - (now - t) / FLOOR_S);
    const visible = (start, end) => (end === null ? now : end) >= now - FLOOR_S && start <= now;
    g.font = "11px system-ui, sans-serif";
    g.textBaseline = "middle";
    const laneTop = 4, laneH = 14, rowH = 16, rows = Math.max(1, Math.floor((h - laneTop - laneH - 22) / rowH));
    g.fillStyle = "#f1f3f6"; roundRect(g, left, laneTop, span, laneH, 4); g.fill();
    g.fillStyle = "#6b7385"; g.fillText("agent", 0, laneTop + laneH / 2);
    g.fillText("owes", 0, laneTop + laneH + 6 + rowH / 2);
    g.save();
    g.beginPath(); g.rect(left, 0, span, h); g.clip();
    for (const s of this.agent) {
      if (!visible(s.start, s.end)) continue;
      const x0 = Math.max(left, x(s.start)), x1 = x(s.end === null ? now : s.end);
      if (x1 - x0 < 0.5) continue;
      g.fillStyle = color("agent", s.state);
      g.fillRect(x0, laneTop, x1 - x0, laneH);
    }
    // one bar per obligation, packed into rows (a row holds bars that do not overlap)
    const obs = [...this.obs.values()].filter((ob) => visible(ob.start, ob.end)).sort((a, b) => a.start - b.start);
    const rowEnds = [];
    this.boxes = [];
    let drawn = 0;
    for (const ob of obs) {
      const end = ob.end === null ? now : ob.end;
      let row = rowEnds.findIndex((e) => e <= ob.start);
      if (row < 0) { row = rowEnds.length; rowEnds.push(end); } else rowEnds[row] = end;
      if (row >= rows) continue;
      drawn += 1;
      const top = laneTop + laneH + 6 + row * rowH, bh = rowH - 3;
      const x0 = Math.max(left, x(ob.start)), x1 = Math.max(x(end), x0 + 3);
      this.boxes.push([x0, x1, top, top + bh, ob]);
      drawBar(g, ob, x, x0, x1, end, top, bh);
    }
    g.restore();
    if (rowEnds.length > rows) { g.fillStyle = "#6b7385"; g.fillText("+" + (rowEnds.length - rows) + " rows", 0, h - 30); }
    ticks(g, left, span, right, h - 16, FLOOR_S, 5);
    const open = [...this.obs.values()].filter((ob) => ob.end === null).map((ob) => ob.ob).join(",");
    if (c.dataset.bars !== String(drawn)) c.dataset.bars = String(drawn);
    if (c.dataset.open !== open) c.dataset.open = open;
  }

  // Hovering a bar names the obligation as the timeline does (kind, label, how it closed).
  #hover(event) {
    const box = this.canvas.getBoundingClientRect();
    const px = event.clientX - box.left, py = event.clientY - box.top;
    const hit = this.boxes.find(([x0, x1, y0, y1]) => px >= x0 && px <= x1 && py >= y0 && py <= y1);
    let text = "";
    if (hit) {
      const ob = hit[4];
      text = "obligation: " + ob.ob + (ob.label ? " · " + ob.label : "")
        + (ob.end === null ? " · open" : " · closed" + (ob.reason ? ": " + ob.reason : ""))
        + (ob.expired ? " · expired" : "");
    }
    if (this.canvas.title !== text) this.canvas.title = text;
  }
}

function drawBar(g, ob, x, x0, x1, end, top, bh) {
  const colour = OB_COLORS[ob.ob] || "#7f8c8d";
  g.globalAlpha = 0.4; g.fillStyle = colour; g.fillRect(x0, top, x1 - x0, bh);
  g.globalAlpha = 1;
  for (const [a, z] of ob.audible) { // darker: what the listener heard
    const ax0 = Math.max(x0, x(a)), ax1 = Math.min(x1, x(z === null ? end : z));
    if (ax1 > ax0) { g.fillStyle = colour; g.fillRect(ax0, top, ax1 - ax0, bh); }
  }
  for (const [a, z] of ob.uncommitted) { // hatched: not committed yet
    const ux0 = Math.max(x0, x(a)), ux1 = Math.min(x1, x(z === null ? end : z));
    if (ux1 <= ux0) continue;
    g.save(); g.beginPath(); g.rect(ux0, top, ux1 - ux0, bh); g.clip();
    g.fillStyle = "#ffffffb0"; g.fillRect(ux0, top, ux1 - ux0, bh);
    g.strokeStyle = colour; g.lineWidth = 1;
    g.beginPath();
    for (let px = ux0 - bh; px < ux1; px += 5) { g.moveTo(px, top + bh); g.lineTo(px + bh, top); }
    g.stroke(); g.restore();
  }
  if (ob.expired || ob.end === null) { // open ones (and expired ones) outlined
    g.strokeStyle = ob.expired ? "#e00000" : colour; g.lineWidth = ob.expired ? 2 : 1;
    g.strokeRect(x0 + 0.5, top + 0.5, x1 - x0 - 1, bh - 1);
  }
  const text = ob.ob.replaceAll("_", " ") + (ob.label ? " · " + ob.label : "");
  if (x1 - x0 > 24) {
    g.save(); g.beginPath(); g.rect(x0, top, x1 - x0 - 2, bh); g.clip();
    g.lineWidth = 3; g.lineJoin = "round"; g.strokeStyle = "#ffffffd9"; // a halo: readable on any shade
    g.strokeText(text, x0 + 4, top + bh / 2 + 0.5);
    g.fillStyle = "#1d2230"; g.fillText(text, x0 + 4, top + bh / 2 + 0.5);
    g.restore();
  }
}
