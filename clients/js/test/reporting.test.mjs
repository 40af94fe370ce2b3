// The `played` reporting rules (src/reporting.ts): what goes out after a clear, and when.
import assert from "node:assert/strict";
import { test } from "node:test";
import { PlayedReporter } from "../dist/lib/reporting.js";

test("plain reports go out, and the count never decreases", () => {
  let now = 0;
  const reporter = new PlayedReporter(() => now);
  assert.deepEqual(reporter.report(100, false), { type: "played", samples: 100 });
  assert.deepEqual(reporter.report(90, false), { type: "played", samples: 100 });
  assert.deepEqual(reporter.report(250.7, false), { type: "played", samples: 250 });
  assert.equal(reporter.report(-1, false), null);
  assert.equal(reporter.report(Number.NaN, false), null);
});

test("after a clear, only the cleared report answers it: a plain one in flight is held back", () => {
  let now = 0;
  const reporter = new PlayedReporter(() => now);
  reporter.report(1000, false);
  reporter.clearReceived();
  // measured before the player saw the clear, arriving after: it must not go out
  assert.equal(reporter.report(1200, false), null);
  assert.deepEqual(reporter.report(1210, true), { type: "played", samples: 1210, cleared: true });
  assert.deepEqual(reporter.report(1300, false), { type: "played", samples: 1300 });
});

test("several clears are answered each, in order", () => {
  const reporter = new PlayedReporter(() => 0);
  reporter.clearReceived();
  reporter.clearReceived();
  assert.equal(reporter.pendingClears, 2);
  assert.equal(reporter.report(10, true).cleared, true);
  assert.equal(reporter.report(11, false), null); // the second clear is not answered yet
  assert.equal(reporter.report(12, true).cleared, true);
  assert.equal(reporter.report(13, false).cleared, undefined);
});

test("an answer that never comes holds reports back for a second at most", () => {
  let now = 0;
  const reporter = new PlayedReporter(() => now);
  reporter.clearReceived();
  now = 999;
  assert.equal(reporter.report(5, false), null);
  now = 1000;
  assert.deepEqual(reporter.report(5, false), { type: "played", samples: 5 });
  assert.equal(reporter.pendingClears, 0);
});
