// Reading server messages (src/messages.ts): known types checked, unknown ones skipped.
import assert from "node:assert/strict";
import { test } from "node:test";
import { decodeServerMessage } from "../dist/lib/messages.js";

test("known messages decode as they are, extra fields kept", () => {
  const ready = { type: "ready", sample_rate: 22050, protocol: 1, resume_token: "t1", resumed: false, future: 1 };
  assert.deepEqual(decodeServerMessage(JSON.stringify(ready)), { ok: true, message: ready });
  for (const message of [
    { type: "clear" },
    { type: "agent_state", state: "speaking" },
    { type: "user_state", state: "away" },
    { type: "transcript", role: "agent", text: "", final: true, interrupted: true },
    { type: "tool", name: "f", call_id: "c1", status: "finished", error: false },
    { type: "metrics", metrics: { type: "llm", ttft: 0.2 } },
    { type: "timeline", entry: { t: 0.5, kind: "ob_opened", id: 1 } },
    { type: "error", code: "session_error", message: "down", source: "llm" },
    { type: "pong", id: 7 },
    { type: "pong" },
  ]) {
    assert.deepEqual(decodeServerMessage(JSON.stringify(message)), { ok: true, message });
  }
});

test("a type this client does not know is skipped, not an error (protocol compatibility)", () => {
  assert.equal(decodeServerMessage('{"type": "hologram", "x": 1}'), null);
});

test("what cannot be read says why", () => {
  const cases = [
    ["not json", "not JSON"],
    ["[1, 2]", "string \"type\""],
    ['{"type": 3}', "string \"type\""],
    ['{"type": "ready", "sample_rate": 0}', "sample_rate"],
    ['{"type": "ready", "sample_rate": 16000, "resume_token": 5}', "resume_token"],
    ['{"type": "agent_state", "state": "dancing"}', "agent state"],
    ['{"type": "transcript", "role": "narrator", "text": "x", "final": true}', "transcript"],
    ['{"type": "tool", "name": "f", "status": "done"}', "tool"],
    ['{"type": "metrics", "metrics": [1]}', "metrics"],
    ['{"type": "timeline", "entry": {"kind": "x"}}', "entry"],
    ['{"type": "error", "code": "x"}', "error"],
    ['{"type": "pong", "id": "7"}', "pong: id"],
    ['{"type": "pong", "id": 1.5}', "pong: id"],
  ];
  for (const [text, why] of cases) {
    const decoded = decodeServerMessage(text);
    assert.equal(decoded.ok, false, text);
    assert.match(decoded.why, new RegExp(why), text);
  }
});
