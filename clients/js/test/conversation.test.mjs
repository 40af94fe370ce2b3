// States and transcripts (src/conversation.ts): interim turns replaced, final ones closed.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Conversation } from "../dist/lib/conversation.js";

const t = (role, text, final, interrupted) => ({ type: "transcript", role, text, final, interrupted });

test("interim text is replaced by the next, and the final one closes the turn", () => {
  const c = new Conversation();
  const a = c.transcript(t("user", "Hello", false));
  const b = c.transcript(t("user", "Hello can", false));
  const agent = c.transcript(t("agent", "Yes", false)); // both roles may be open at once
  const done = c.transcript(t("user", "Hello, can you hear me?", true));
  assert.equal(a.id, b.id);
  assert.equal(b.id, done.id);
  assert.notEqual(agent.id, done.id);
  assert.deepEqual(
    c.transcripts.map((x) => [x.role, x.text, x.final]),
    [
      ["user", "Hello, can you hear me?", true],
      ["agent", "Yes", false],
    ],
  );
  const next = c.transcript(t("user", "Again", false)); // a new turn after a final one
  assert.equal(next.id, 2);
});

test("a final agent turn cut short says so; its text is what was heard", () => {
  const c = new Conversation();
  c.transcript(t("agent", "Once upon", false));
  const cut = c.transcript(t("agent", "Once upon a time", true, true));
  assert.equal(cut.interrupted, true);
  const cutEarly = c.transcript(t("agent", "", true, true)); // cut in its first word
  assert.deepEqual([cutEarly.text, cutEarly.final, cutEarly.interrupted], ["", true, true]);
  assert.equal(c.transcript(t("user", "typed", true, true)).interrupted, true);
  assert.equal(c.transcript(t("user", "x", false, true)).interrupted, false); // only final ones
});

test("states change once each; a snapshot repeating the known state is no change", () => {
  const c = new Conversation();
  assert.deepEqual(c.agent("initializing"), { state: "initializing", previous: null });
  assert.deepEqual(c.agent("listening"), { state: "listening", previous: "initializing" });
  assert.equal(c.agent("listening"), null);
  assert.deepEqual(c.user("speaking"), { state: "speaking", previous: null });
});

test("a session that ends leaves no turn open: open ones are closed as lost", () => {
  const c = new Conversation();
  c.transcript(t("user", "Hi", true));
  c.transcript(t("agent", "Hello the", false));
  c.agent("speaking");
  const closed = c.endSession();
  assert.deepEqual(closed.map((x) => [x.text, x.final, x.lost]), [["Hello the", true, true]]);
  assert.equal(c.agentState, null);
  assert.equal(c.transcripts.filter((x) => !x.final).length, 0);
  assert.equal(c.transcript(t("agent", "New", false)).id, 2); // the next turn is a new one
});
