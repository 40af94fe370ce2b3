// The reconnect decisions (src/reconnect.ts).
import assert from "node:assert/strict";
import { test } from "node:test";
import { ReconnectPolicy } from "../dist/lib/reconnect.js";

const close = (code, serverError = null) => ({ code, reason: "", serverError, failure: null });

test("nothing is retried before the first ready: connect() says why at once", () => {
  const policy = new ReconnectPolicy();
  for (const code of [1006, 1013, 4004, 1011]) {
    const decision = policy.decide(close(code));
    assert.equal(decision.kind, "fail", `${code}`);
    assert.equal(decision.error.closeCode, code);
  }
  assert.equal(policy.decide(close(1000)).kind, "end");
});

test("a drop after ready is resumed with the last token, with backoff", () => {
  const policy = new ReconnectPolicy({ initialDelayMs: 100, maxDelayMs: 1000, jitter: 0, maxAttempts: 6 });
  policy.ready("token-1");
  const delays = [];
  for (let i = 0; i < 6; i++) {
    const decision = policy.decide(close(1006));
    assert.equal(decision.kind, "reconnect");
    assert.equal(decision.resume, "token-1");
    assert.equal(decision.restart, null);
    assert.equal(decision.attempt, i + 1);
    delays.push(decision.delayMs);
  }
  assert.deepEqual(delays, [100, 200, 400, 800, 1000, 1000]);
  const last = policy.decide(close(1006));
  assert.equal(last.kind, "fail");
  assert.equal(last.error.code, "reconnect_failed");
  assert.match(last.error.message, /after 6 attempts/);
});

test("each ready brings the token to use next and resets the attempts", () => {
  const policy = new ReconnectPolicy({ jitter: 0 });
  policy.ready("a");
  policy.decide(close(1006));
  policy.decide(close(1006));
  policy.ready("b");
  const decision = policy.decide(close(1001));
  assert.deepEqual([decision.resume, decision.attempt, decision.delayMs], ["b", 1, 250]);
});

test("resume_failed and a lost session start a new session at once", () => {
  for (const code of [4004, 1012]) {
    const policy = new ReconnectPolicy();
    policy.ready("a");
    policy.decide(close(1006));
    const decision = policy.decide(close(code, code === 4004 ? { type: "error", code: "resume_failed", message: "unknown token" } : null));
    assert.equal(decision.kind, "reconnect");
    assert.equal(decision.resume, null);
    assert.equal(decision.delayMs, 0);
    assert.equal(decision.error.code, code === 4004 ? "resume_failed" : "session_lost");
    assert.equal(decision.restart, decision.error);
    assert.equal(policy.resumeToken, null);
  }
});

test("a server that keeps no session for resuming: a drop starts a new one", () => {
  const policy = new ReconnectPolicy({ jitter: 0 });
  policy.ready(undefined);
  const decision = policy.decide(close(1006));
  assert.deepEqual([decision.kind, decision.resume, decision.delayMs], ["reconnect", null, 250]);
  assert.equal(decision.error.code, "connection_lost");
  assert.equal(decision.restart.code, "resume_unavailable");
  assert.match(decision.restart.message, /keeps no session to resume/);
});

test("mistakes a reconnect would repeat are given up on", () => {
  for (const code of [1003, 1007, 1008, 1009, 1011, 4003]) {
    const policy = new ReconnectPolicy();
    policy.ready("a");
    assert.equal(policy.decide(close(code)).kind, "fail", `${code}`);
  }
});

test("jitter spreads the delay within its bounds; reconnect: false never reconnects", () => {
  const low = new ReconnectPolicy({ jitter: 0.2 }, () => 0);
  low.ready("a");
  assert.equal(low.decide(close(1006)).delayMs, 200);
  const high = new ReconnectPolicy({ jitter: 0.2 }, () => 1);
  high.ready("a");
  assert.equal(high.decide(close(1006)).delayMs, 300);
  const never = new ReconnectPolicy(false);
  never.ready("a");
  assert.equal(never.decide(close(1006)).kind, "fail");
  assert.equal(never.decide(close(4004)).kind, "fail");
});
