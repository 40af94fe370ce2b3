// The rejoinder page: a RejoinderClient (the SDK, @rejoinder/client) and what it shows.
// The SDK does the protocol, the audio and both transports; the page only draws its events.
// ./rejoinder-client.js is a copy of clients/js/dist/index.js that the build puts next to
// this file (`make demo`); without it the page says so instead of connecting.
//
// Everything the page is told is also kept on window.rejoinder, for tests and for curious
// people with a console (window.rejoinder.client is the client itself).
//
// WebRTC that cannot connect (no ICE path within WEBRTC_CONNECT_MS, an offer the server
// refused, a browser without WebRTC) falls back to the WebSocket, which goes wherever the
// page itself came from: the page says so, and window.rejoinder.fallback says why.
import { describe } from "./metrics.js";
import { FloorStrip, MinuteStrip, color } from "./strips.js";

const BUNDLE = "./rejoinder-client.js";
const MISSING = "the client bundle is missing: run make demo";
// How long WebRTC may take to find a path (ICE) before the page tries the WebSocket: a
// relay over TURN takes a second or two; a network that blocks UDP and has no TURN never
// connects, and the browser itself gives up only after ~30 s.
const WEBRTC_CONNECT_MS = 8000;
// The client's errors that mean WebRTC cannot connect here, where the WebSocket may.
const WEBRTC_FAILED = new Set(["connect_failed", "connect_timeout", "offer_refused", "webrtc_unavailable"]);
const $ = (id) => document.getElementById(id);

const R = (window.rejoinder = {
  transport: "webrtc", connected: false, camera: false, muted: false, client: null,
  fallback: null, // {from, to, code, reason} once WebRTC failed and the WebSocket took over
  events: [], states: [], errors: [], timeline: [], delays: [],
  // played: the last count reported on this connection; received: agent samples that came
  // on it (WebRTC: known only as they play, so the same); firstPlayed/lastPlayed: when the
  // count first and last moved; maxGap: the longest wait (ms) between two reports while
  // something was playing; energy: the agent's voice as played (WebRTC)
  audio: { played: 0, energy: 0, rate: 0, firstPlayed: null, lastPlayed: null, cleared: 0, maxGap: 0 },
  mic: { db: -Infinity },
});
let client = null; // the RejoinderClient, once the bundle has loaded
let live = null; // what one connect() opened: {context, camera, meter, tap, ...}

// Counters the client keeps: read when asked, so they are never stale.
Object.defineProperty(R.audio, "received", {
  enumerable: true,
  get: () => (R.transport === "webrtc" || !client || !live
    ? R.audio.played : client.stats.receivedSamples - live.receivedBase),
});
Object.defineProperty(R.mic, "sent", { enumerable: true, get: () => (client ? client.stats.sentSamples : 0) });

function keep(list, item) {
  list.push(item);
  if (list.length > 5000) list.splice(0, 1000);
}
// R.events: what the server said, named as on the wire (docs/protocol.md).
function note(type, fields) {
  keep(R.events, { t: performance.now(), type, ...fields });
}

// ---------- the conversation: bubbles, tool chips, errors ----------
const minute = new MinuteStrip($("timeline"));
const floor = new FloorStrip($("floor"));
const turns = new Map(); // transcript id -> its bubble, until the turn is final
const chips = new Map(); // tool call id -> its chip

function bubble(cls, text) {
  $("empty")?.remove();
  const box = $("messages");
  const stick = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  const el = document.createElement("div");
  el.className = cls;
  el.textContent = text;
  box.appendChild(el);
  if (stick) box.scrollTop = box.scrollHeight;
  return el;
}

function showError(text) {
  R.errors.push(text);
  const banner = $("banner");
  banner.textContent = text;
  banner.classList.add("show");
  bubble("sys error", text);
}

function onTranscript(turn) {
  note("transcript", { id: turn.id, role: turn.role, text: turn.text, final: turn.final,
    interrupted: turn.interrupted, lost: turn.lost });
  const role = turn.role === "user" ? "user" : "agent";
  let el = turns.get(turn.id);
  if (!el) {
    if (turn.lost && !turn.text) return;
    el = bubble("msg " + role + " interim", "");
    turns.set(turn.id, el);
  }
  el.textContent = turn.text;
  if (turn.final || turn.lost) {
    el.classList.remove("interim");
    // interrupted: the text is what was heard; lost: its end never came
    if (turn.interrupted || (turn.lost && role === "agent")) el.classList.add("cut");
    turns.delete(turn.id);
  }
  const box = $("messages");
  box.scrollTop = box.scrollHeight;
}

function onTool(event) {
  note("tool", { name: event.name, call_id: event.callId, status: event.status, error: event.error });
  const tool = minute.tool(event, performance.now());
  let chip = chips.get(event.callId);
  if (!chip) {
    chip = bubble("chip running", "");
    chip.title = "tool call " + event.callId;
    chips.set(event.callId, chip);
  }
  if (event.status === "finished") {
    chip.className = "chip" + (tool.error ? " error" : "");
    chips.delete(event.callId);
  }
  const took = tool.end === null ? "running" : ((tool.end - tool.start) / 1000).toFixed(1) + " s" + (tool.error ? ", failed" : "");
  chip.textContent = "⚙ " + event.name + " · " + took;
}

const latest = new Map(); // metrics kind -> how it reads, one row each
function onMetrics(metrics) {
  note("metrics", { metrics });
  const shown = describe(metrics);
  latest.set(shown.kind, shown);
  const rows = [];
  for (const { name, term, parts } of latest.values()) {
    const dt = document.createElement("dt");
    dt.textContent = name;
    dt.title = term;
    const dd = document.createElement("dd");
    if (parts.length === 0) dd.textContent = "—";
    parts.forEach((part, i) => {
      if (i > 0) dd.append(" · ");
      const span = document.createElement("span");
      span.textContent = part.label + " " + part.text;
      span.title = part.term;
      dd.append(span);
    });
    rows.push(dt, dd);
  }
  $("metrics").replaceChildren(...rows);
}

// ---------- states ----------
const since = { agent: null, user: null };
let userDone = null; // when the user's last turn ended (for the answer delay)

function setState(who, state) {
  const now = performance.now();
  const before = minute.state(who, state, now);
  if (who === "user" && before === "speaking" && state !== "speaking") userDone = now;
  if (who === "user" && state === "speaking") userDone = null;
  if (who === "agent" && state === "speaking" && userDone !== null) {
    R.delays.push((now - userDone) / 1000);
    userDone = null;
    const sorted = [...R.delays].sort((a, b) => a - b);
    const median = sorted[Math.floor(sorted.length / 2)];
    $("s-delay").textContent = R.delays.at(-1).toFixed(2) + " s" + (R.delays.length > 1 ? " (median " + median.toFixed(2) + ")" : "");
  }
  since[who] = now;
  const el = $(who + "-state");
  el.dataset.state = state;
  el.querySelector(".value").textContent = state;
  el.querySelector(".swatch").style.background = color(who, state);
  el.closest(".card").style.setProperty("--state", color(who, state));
  keep(R.states, { who, state, t: now });
  controls();
}

function clearStates() {
  for (const who of ["agent", "user"]) {
    since[who] = null;
    const el = $(who + "-state");
    el.dataset.state = "none";
    el.querySelector(".value").textContent = "—";
    el.querySelector(".swatch").style.background = "";
    el.closest(".card").style.removeProperty("--state");
  }
}

function status(text) {
  $("s-status").textContent = text;
}

// ---------- playback: the client's `played` reports ----------
function onPlayed({ samples, cleared }) {
  if (!live) return;
  const now = performance.now();
  const last = live.lastReport;
  if (last && last.playing) R.audio.maxGap = Math.max(R.audio.maxGap, now - last.t);
  // Playing until this report counts all that came (WebSocket); WebRTC's track never ends.
  const heardAll = R.transport === "websocket" && samples >= R.audio.received;
  live.lastReport = { t: now, playing: !cleared && !heardAll };
  if (samples > R.audio.played) {
    R.audio.firstPlayed ??= now;
    R.audio.lastPlayed = now;
  }
  if (cleared) R.audio.cleared += 1;
  R.audio.played = samples;
  $("s-played").textContent = (samples / (R.audio.rate || 1)).toFixed(1) + " s";
}

// ---------- the microphone level, and the agent's voice as played (WebRTC) ----------
function meanSquare(analyser, data) {
  analyser.getFloatTimeDomainData(data);
  let sum = 0;
  for (const v of data) sum += v * v;
  return sum / data.length;
}

function listen(context, stream, size, every, tick) {
  const source = context.createMediaStreamSource(stream);
  const analyser = context.createAnalyser();
  analyser.fftSize = size;
  source.connect(analyser); // an analyser is run even when nothing follows it
  const data = new Float32Array(size);
  const timer = setInterval(() => tick(meanSquare(analyser, data)), every);
  return { stop() { clearInterval(timer); source.disconnect(); } };
}

function micMeter(context, stream) {
  let peak = 0;
  $("mic-meta").title = stream.getAudioTracks()[0]?.label || "";
  return listen(context, stream, 1024, 50, (power) => {
    const db = 20 * Math.log10(Math.sqrt(power) + 1e-9);
    R.mic.db = db;
    const level = R.muted ? 0 : Math.max(0, Math.min(1, (db + 60) / 55));
    peak = Math.max(level, peak - 0.05);
    $("mic-level").style.width = (peak * 100).toFixed(1) + "%";
    $("mic-meta").textContent = R.muted ? "muted: the agent hears silence" : peak > 0 ? (peak * 55 - 60).toFixed(0) + " dBFS" : "silent";
  });
}

// The agent's track plays in this element (the client's `audioElement`); the page taps it
// to know that what played carried sound (energy: mean square times seconds).
function agentElement(mine) {
  const element = new Audio();
  element.addEventListener("playing", () => {
    if (mine.tap || !(element.srcObject instanceof MediaStream) || mine !== live) return;
    mine.tap = listen(mine.context, element.srcObject, 2048, 50, (power) => (R.audio.energy += power * 0.05));
  });
  return element;
}

// ---------- connect / disconnect ----------
// Nothing under way: no client running, and no connect() getting ready (the camera).
const idle = () => !client || ((client.state === "idle" || client.state === "closed") && !live);

async function connect() {
  // Made here, in the click: browsers start audio only on a user gesture, and asking for
  // the camera first may take longer than a click's permission lasts.
  const context = new AudioContext({ latencyHint: "interactive" });
  const mine = (live = { context, camera: null, meter: null, tap: null, receivedBase: 0, lastReport: null,
    readies: 0, ended: false, failedOver: null });
  Object.assign(R.audio, { played: 0, energy: 0, rate: 0, firstPlayed: null, lastPlayed: null, cleared: 0, maxGap: 0 });
  R.timeline = [];
  R.fallback = null;
  floor.reset();
  $("banner").classList.remove("show");
  $("s-transport").textContent = R.transport === "webrtc" ? "WebRTC" : "WebSocket";
  status("connecting");
  controls();
  try {
    if (R.camera && R.transport === "webrtc") {
      mine.camera = await navigator.mediaDevices.getUserMedia({
        // a few frames a second are plenty for one still per turn
        video: { width: { ideal: 640 }, height: { ideal: 480 }, frameRate: { ideal: 5, max: 10 } },
      });
      if (mine.ended) return release(mine); // cancelled meanwhile
      Object.assign($("camera-preview"), { srcObject: mine.camera, hidden: false });
    }
    const webrtc = R.transport === "webrtc";
    await client.connect({
      url: location.href, // its query reaches the agent's entry point (conn.query)
      transport: R.transport,
      timeline: true,
      audioContext: context,
      camera: mine.camera ?? undefined,
      audioElement: webrtc ? agentElement(mine) : undefined,
      iceTimeoutMs: webrtc ? WEBRTC_CONNECT_MS : undefined,
    });
  } catch (error) {
    if (mine.failedOver) return fallBack(mine, mine.failedOver);
    if (mine.ended) return; // the close event said why
    showError(String(error?.message || error));
    release(mine);
    ended("idle");
  }
}

// WebRTC could not connect: the same conversation over the WebSocket, on the audio
// context the click started (a new one would not be allowed to play).
async function fallBack(mine, error) {
  mine.failedOver = null;
  if (mine.ended || live !== mine) return; // hung up meanwhile
  const reason = String(error?.message || error);
  R.fallback = { from: "webrtc", to: "websocket", code: error?.code ?? null, reason };
  bubble("sys notice", "WebRTC could not connect (" + reason + "): talking over WebSocket instead");
  chooseTransport("websocket");
  $("s-transport").textContent = "WebSocket (WebRTC failed)";
  status("connecting over WebSocket");
  if (mine.camera) { // the camera goes over WebRTC only
    for (const track of mine.camera.getTracks()) track.stop();
    Object.assign($("camera-preview"), { srcObject: null, hidden: true });
    mine.camera = null;
    bubble("sys", "the camera is shared over WebRTC only: it is off");
  }
  try {
    await client.connect({ url: location.href, transport: "websocket", timeline: true, audioContext: mine.context });
  } catch (failure) {
    if (mine.ended) return;
    showError(String(failure?.message || failure));
    release(mine);
    ended("idle");
  }
}

function onReady(ready) {
  note("ready", { sample_rate: ready.sampleRate, protocol: ready.protocol, session_id: ready.sessionId,
    resumed: ready.resumed, transport: ready.transport });
  const mine = live;
  if (!mine) return;
  mine.receivedBase = client.stats.receivedSamples; // counts start again on each connection
  mine.lastReport = null;
  R.audio.played = 0;
  R.audio.rate = ready.sampleRate;
  R.connected = true;
  $("s-rate").textContent = ready.sampleRate + " Hz";
  status("connected");
  if (mine.readies === 0) bubble("sys", "connected over " + $("s-transport").textContent);
  else bubble("sys", ready.resumed ? "reconnected: the conversation goes on" : "reconnected to a new session");
  mine.readies += 1;
  const microphone = client.media.microphone;
  if (!mine.meter && microphone) mine.meter = micMeter(mine.context, microphone);
  controls();
}

function onClose({ error, byUser }) {
  const mine = live;
  if (mine && !byUser && mine.readies === 0 && R.transport === "webrtc" && WEBRTC_FAILED.has(error?.code)) {
    mine.failedOver = error; // connect() goes on over the WebSocket: nothing is released
    return;
  }
  if (mine) mine.ended = true;
  if (error) showError(error.message);
  if (mine?.readies) bubble("sys", byUser ? "disconnected" : "the session ended");
  release(mine);
  ended(error ? "failed" : byUser ? "idle" : "ended");
}

function release(mine) {
  if (!mine) return;
  mine.meter?.stop();
  mine.tap?.stop();
  for (const track of mine.camera?.getTracks() ?? []) track.stop();
  const preview = $("camera-preview");
  if (!preview.hidden && preview.srcObject === mine.camera) Object.assign(preview, { srcObject: null, hidden: true });
  if (mine.context.state !== "closed") void mine.context.close().catch(() => {});
  if (live === mine) live = null;
}

function ended(why) {
  R.connected = false;
  clearStates();
  const now = performance.now();
  minute.end(now);
  floor.end();
  for (const el of turns.values()) el.classList.remove("interim");
  turns.clear();
  if (R.muted) { // the next conversation starts unmuted
    R.muted = false;
    client.mute(false);
  }
  $("mic-level").style.width = "0";
  $("mic-meta").textContent = "off";
  status(why);
  controls();
}

// Which controls work now.
function controls() {
  const state = client ? client.state : "none";
  const free = idle();
  const connected = state === "connected";
  const button = $("connect");
  button.disabled = !client;
  button.textContent = free ? "Connect" : "Disconnect";
  button.classList.toggle("live", !free);
  $("dot").classList.toggle("on", connected);
  for (const el of document.querySelectorAll(".switch button")) el.disabled = !client || !free;
  const camera = $("camera");
  camera.disabled = !client || !free || R.transport !== "webrtc";
  camera.title = R.transport === "webrtc"
    ? "Share your camera over WebRTC: the agent sees a still of it each time you finish speaking"
    : "The camera is shared over WebRTC only";
  for (const el of document.querySelectorAll("#say input, #say button")) el.disabled = !connected;
  // Mute is for the conversation under way, once its agent has entered: the server takes
  // controls from then on (docs/protocol.md: `not_ready` before), and a new one starts unmuted.
  const agent = $("agent-state").dataset.state;
  const mute = $("mute");
  mute.disabled = !connected || agent === "none" || agent === "initializing";
  mute.setAttribute("aria-pressed", String(R.muted));
  mute.textContent = R.muted ? "Unmute" : "Mute";
  $("stop").disabled = !connected || (agent !== "speaking" && agent !== "thinking");
}

function wire() {
  client.on("ready", onReady);
  client.on("agentState", ({ state }) => { note("agent_state", { state }); setState("agent", state); });
  client.on("userState", ({ state }) => { note("user_state", { state }); setState("user", state); });
  client.on("transcript", onTranscript);
  client.on("tool", onTool);
  client.on("metrics", onMetrics);
  client.on("timeline", (entry) => {
    note("timeline", { entry });
    if (floor.entry(entry)) keep(R.timeline, entry);
  });
  client.on("clear", () => note("clear", {}));
  client.on("played", onPlayed);
  client.on("error", (error) => {
    note("error", { code: error.code, message: error.serverMessage ?? error.message, source: error.source });
    showError(error.message);
  });
  client.on("reconnecting", ({ attempt, error }) => {
    status("reconnecting (attempt " + attempt + ")");
    if (attempt === 1) bubble("sys", "connection lost (" + error.message + "): reconnecting…");
    controls();
  });
  client.on("sessionRestarted", () => bubble("sys", "the session could not go on: starting a new one"));
  client.on("close", onClose);
}

$("banner").onclick = () => $("banner").classList.remove("show");
$("connect").onclick = () => {
  if (idle()) void connect();
  else if (client.state === "idle" || client.state === "closed") { // still asking for the camera
    live.ended = true;
    release(live);
    ended("idle");
  } else void client.close();
};
function chooseTransport(transport) {
  R.transport = transport;
  for (const b of document.querySelectorAll(".switch button")) {
    b.setAttribute("aria-pressed", String(b.dataset.transport === transport));
  }
  controls();
}
for (const button of document.querySelectorAll(".switch button")) {
  button.onclick = () => chooseTransport(button.dataset.transport);
}
$("camera").onclick = () => {
  R.camera = !R.camera;
  $("camera").setAttribute("aria-pressed", String(R.camera));
};
$("mute").onclick = () => {
  R.muted = !R.muted;
  client.mute(R.muted); // the client keeps it across reconnects
  controls();
};
$("stop").onclick = () => {
  try {
    client.interrupt();
  } catch (error) {
    showError(String(error?.message || error));
  }
};
$("say").onsubmit = (event) => {
  event.preventDefault();
  const text = $("text").value.trim();
  if (!text || client?.state !== "connected") return;
  try {
    client.sendText(text);
    $("text").value = "";
  } catch (error) {
    showError(String(error?.message || error));
  }
};
const wanted = new URLSearchParams(location.search).get("transport");
if (wanted === "websocket" || wanted === "webrtc") $("t-" + wanted).click();

// ---------- drawing ----------
// The minute strip moves about 12 px a second: 20 frames a second look as smooth as 60 and
// cost the machine a third (requestAnimationFrame still pauses it in a hidden tab).
const FRAME_MS = 50;
function frame() {
  const now = performance.now();
  minute.draw(now);
  for (const who of ["agent", "user"]) {
    const text = since[who] === null ? (live ? "waiting…" : "not connected") : "for " + ((now - since[who]) / 1000).toFixed(1) + " s";
    const el = $(who + "-since");
    if (el.textContent !== text) el.textContent = text;
  }
  setTimeout(() => requestAnimationFrame(frame), FRAME_MS);
}
requestAnimationFrame(frame);
setInterval(() => floor.draw(), 200);

// ---------- the client ----------
async function load() {
  let sdk;
  try {
    sdk = await import(BUNDLE);
  } catch (error) {
    // Missing (404), or there but unreadable by this browser: say which.
    const missing = await fetch(BUNDLE, { method: "HEAD", cache: "no-store" }).then((r) => r.status === 404, () => false);
    showError(missing ? MISSING : "the client bundle could not be loaded: " + String(error?.message || error));
    status("no client");
    return;
  }
  client = R.client = new sdk.RejoinderClient();
  wire();
  controls();
}
controls();
void load();
