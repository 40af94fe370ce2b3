// ICE servers on the WebRTC path: asked of the server (GET /api/ice) before each offer, the
// caller's own instead when given, the last ready's when the server cannot say; the policy
// the server asks for (relay); and iceTimeoutMs, which fails an attempt ICE cannot connect.
import assert from "node:assert/strict";
import { test } from "node:test";
import { RejoinderClient } from "../dist/index.js";
import { ICE_FETCH_TIMEOUT_MS, readIce } from "../dist/lib/ice.js";
import { endpoints } from "../dist/lib/url.js";
import { FakePlatform, record, settle } from "./fakes.mjs";

const TURN = { urls: ["turn:turn.example:3478?transport=udp"], username: "1700003600:client_1", credential: "c1" };
const STUN = { urls: ["stun:stun.example:3478"] };
const ICE = { ice_servers: [STUN, TURN], ice_transport_policy: "relay", ttl: 3600 };
const READY = { type: "ready", sample_rate: 48000, protocol: 1, session_id: "s1", resume_token: "t1", resume_grace: 30 };

/** A platform that answers GET too: `iceAnswers` in order ([status, body], "network",
 * "never"), else the ICE above. */
class IcePlatform extends FakePlatform {
  gets = [];
  iceAnswers = [];
  /** The order of the requests: "get" and "post". */
  requests = [];

  async get(url) {
    this.gets.push(new URL(url));
    this.requests.push("get");
    const answer = this.iceAnswers.shift() ?? [200, JSON.stringify(ICE)];
    if (answer === "network") throw new TypeError("Failed to fetch");
    if (answer === "never") return new Promise(() => {});
    const [status, text] = answer;
    return { ok: status >= 200 && status < 300, status, text: async () => text };
  }

  async post(url, body) {
    this.requests.push("post");
    return super.post(url, body);
  }
}

function start(options = {}, platform = new IcePlatform()) {
  const client = new RejoinderClient({ platform });
  const log = record(client);
  const connecting = client.connect({ url: "http://h:8/app/?voice=b", transport: "webrtc", reconnect: { jitter: 0 }, ...options });
  connecting.catch(() => {}); // (a test that expects a rejection awaits it itself)
  return { platform, client, log, connecting };
}

test("the server's ICE servers are asked for first, and the peer is made with them and its policy", async () => {
  const { platform, connecting } = start();
  await settle();
  assert.deepEqual(platform.requests, ["get", "post"]);
  assert.equal(platform.gets[0].href, "http://h:8/app/api/ice?voice=b");
  assert.equal(platform.posts[0].url.pathname, "/app/api/offer");
  const peer = platform.peer;
  assert.deepEqual(peer.options.iceServers, [STUN, TURN]);
  assert.equal(peer.options.iceTransportPolicy, "relay");
  peer.open();
  peer.receive(READY);
  await connecting;
});

test("the caller's iceServers are used as they are, and the server is not asked", async () => {
  const mine = [{ urls: "stun:mine.example" }];
  const { platform } = start({ iceServers: mine });
  await settle();
  assert.deepEqual(platform.requests, ["post"]);
  assert.equal(platform.peer.options.iceServers, mine);
  assert.equal(platform.peer.options.iceTransportPolicy, undefined);
});

test("the caller's iceTransportPolicy wins over the server's", async () => {
  const { platform } = start({ iceTransportPolicy: "all" });
  await settle();
  assert.deepEqual(platform.peer.options.iceServers, [STUN, TURN]);
  assert.equal(platform.peer.options.iceTransportPolicy, "all");
  const other = start({ iceServers: [], iceTransportPolicy: "relay" });
  await settle();
  assert.equal(other.platform.peer.options.iceTransportPolicy, "relay");
});

for (const [what, answer] of [
  ["a server from before /api/ice (404)", [404, "not found"]],
  ["a network error", "network"],
  ["an answer that is not JSON", [200, "<html>"]],
  ["an answer of the wrong shape", [200, JSON.stringify({ ice_servers: [{ urls: 3 }] })]],
]) {
  test(`${what}: the offer goes out without ICE servers`, async () => {
    const platform = new IcePlatform();
    platform.iceAnswers.push(answer);
    const { connecting } = start({}, platform);
    await settle();
    assert.deepEqual(platform.requests, ["get", "post"]);
    assert.deepEqual(platform.peer.options.iceServers, []);
    assert.equal(platform.peer.options.iceTransportPolicy, undefined);
    platform.peer.open();
    platform.peer.receive(READY);
    await connecting;
  });
}

test("no answer in time: the offer goes out without it after ICE_FETCH_TIMEOUT_MS", async () => {
  const platform = new IcePlatform();
  platform.iceAnswers.push("never");
  start({}, platform);
  await settle();
  assert.deepEqual([platform.peers.length, platform.posts.length], [0, 0]);
  platform.timers.advance(ICE_FETCH_TIMEOUT_MS - 1);
  await settle();
  assert.equal(platform.peers.length, 0);
  platform.timers.advance(1);
  await settle();
  assert.deepEqual(platform.requests, ["get", "post"]);
  assert.deepEqual(platform.peer.options.iceServers, []);
});

test("a reconnect asks again (fresh credentials), and uses the ready's when the server cannot say", async () => {
  const { platform, client, connecting } = start();
  await settle();
  const first = platform.peer;
  first.open();
  const minted = { urls: ["turn:turn.example:3478?transport=udp"], username: "1700007200:s1", credential: "r1" };
  first.receive({ ...READY, ice_servers: [minted], ice_transport_policy: "relay" });
  await connecting;
  first.state("failed"); // a drop: resume
  platform.iceAnswers.push("network");
  platform.timers.advance(250);
  await settle();
  assert.equal(client.state, "reconnecting");
  assert.equal(platform.gets.length, 2);
  const second = platform.peer;
  assert.notEqual(second, first);
  assert.deepEqual(second.options.iceServers, [minted]);
  assert.equal(second.options.iceTransportPolicy, "relay");
  assert.equal(platform.posts[1].url.searchParams.get("resume"), "t1");
  // and the next one gets the server's fresh ones again
  second.state("failed");
  platform.timers.advance(500);
  await settle();
  assert.equal(platform.gets.length, 3);
  assert.deepEqual(platform.peer.options.iceServers, [STUN, TURN]);
  await client.close();
});

test("iceTimeoutMs: an attempt ICE cannot connect fails with connect_failed before connectTimeoutMs", async () => {
  const { platform, client, log, connecting } = start({ iceTimeoutMs: 8000 });
  await settle();
  const peer = platform.peer;
  peer.state("checking");
  platform.timers.advance(7999);
  assert.equal(client.state, "connecting");
  platform.timers.advance(1);
  await assert.rejects(connecting, (error) => {
    assert.equal(error.code, "connect_failed");
    assert.match(error.message, /no connection within 8 s \(ICE found no path to the server\)/);
    return true;
  });
  assert.equal(peer.closed, true);
  assert.equal(log.of("close")[0].error.code, "connect_failed");
  assert.deepEqual(platform.timers.pending, []);
});

test("iceTimeoutMs: a peer that connects in time clears the bound", async () => {
  const { platform, client, connecting } = start({ iceTimeoutMs: 8000, pingIntervalMs: 0 });
  await settle();
  assert.deepEqual(platform.timers.pending, [8000, 15000]);
  platform.peer.open(); // connected
  assert.deepEqual(platform.timers.pending, [15000]); // the ready's bound only
  platform.peer.receive(READY);
  await connecting;
  platform.timers.advance(60_000);
  assert.equal(client.state, "connected");
});

test("closed while the ICE servers are being asked for: no peer is made, nothing is left", async () => {
  const platform = new IcePlatform();
  let answer;
  platform.get = (url) => {
    platform.gets.push(new URL(url));
    return new Promise((resolve) => (answer = resolve));
  };
  const { client } = start({}, platform);
  await settle();
  await client.close();
  answer({ ok: true, status: 200, text: async () => JSON.stringify(ICE) });
  await settle();
  assert.deepEqual([platform.peers.length, platform.posts.length], [0, 0]);
  assert.deepEqual(platform.timers.pending, []);
});

test("bad ICE options are refused at connect()", async () => {
  const client = new RejoinderClient({ platform: new IcePlatform() });
  await assert.rejects(client.connect({ url: "http://h/", transport: "webrtc", iceTransportPolicy: "nohost" }), TypeError);
  await assert.rejects(client.connect({ url: "http://h/", transport: "webrtc", iceTimeoutMs: -1 }), RangeError);
});

test("readIce takes the server's answer, and nothing else", () => {
  assert.deepEqual(readIce(ICE), { servers: [STUN, TURN], policy: "relay" });
  assert.deepEqual(readIce({ ice_servers: [{ urls: "stun:a", username: null }] }), {
    servers: [{ urls: ["stun:a"] }],
    policy: undefined,
  });
  assert.deepEqual(readIce({ ice_servers: [], ice_transport_policy: null }), { servers: [], policy: undefined });
  for (const bad of [
    null,
    [],
    { ice_servers: "stun:a" },
    { ice_servers: [{ urls: [] }] },
    { ice_servers: [{ urls: ["stun:a", 1] }] },
    { ice_servers: [null] },
    { ice_servers: [], ice_transport_policy: "public" },
  ]) {
    assert.equal(readIce(bad), null, JSON.stringify(bad));
  }
});

test("the ICE route sits beside the offer's", () => {
  assert.equal(endpoints("https://a.example/agent/").ice.href, "https://a.example/agent/api/ice");
  assert.equal(endpoints("wss://a.example/x/ws?k=v").ice.href, "https://a.example/x/api/ice?k=v");
});
