// <AgentStateIndicator/>: the plain word, the technical state on `title`, one render per
// change of what it shows.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";
import { RejoinderError } from "@rejoinder/client";
import { AGENT_STATE_LABELS, AgentStateIndicator, RejoinderProvider, indicatorState, useRejoinder } from "../dist/index.js";
import { FakeClient } from "./fake-client.mjs";
import { act, cleanup, h, render, warnings } from "./render.mjs";

afterEach(() => {
  cleanup();
  assert.deepEqual(warnings.splice(0), [], "React warned");
});

function mount(client, props = {}) {
  const Call = () => {
    mount.session = useRejoinder({ url: "/" });
    return h(AgentStateIndicator, props);
  };
  const view = render(h(RejoinderProvider, { client }, h(Call)));
  const shown = () => {
    const span = view.query('[role="status"]');
    return { label: span.lastChild.textContent, title: span.title, data: span.dataset.state };
  };
  return { view, shown };
}

test("the label says what the agent does, the title its technical state", async () => {
  const client = new FakeClient();
  const { shown } = mount(client);
  assert.deepEqual(shown(), { label: "Not connected", title: "idle", data: "idle" });
  act(() => void mount.session.connect());
  assert.deepEqual(shown(), { label: "Connecting", title: "connecting", data: "connecting" });
  await act(async () => client.ready());
  assert.deepEqual(shown(), { label: "Connecting", title: "initializing", data: "initializing" });
  const expected = [
    ["initializing", "Connecting"],
    ["listening", "Listening"],
    ["thinking", "Thinking"],
    ["speaking", "Speaking"],
  ];
  for (const [state, label] of expected) {
    act(() => client.emitAgentState(state));
    assert.deepEqual(shown(), { label, title: state, data: state });
  }
  act(() => client.drop(new RejoinderError("connection_lost", "the connection was lost")));
  assert.deepEqual(shown(), { label: "Reconnecting", title: "reconnecting", data: "reconnecting" });
  act(() => client.ready());
  assert.equal(shown().label, "Speaking"); // the agent's state, kept across the reconnect
  act(() => client.fail(new RejoinderError("reconnect_failed", "the attempts ran out")));
  assert.deepEqual(shown(), { label: "Not connected", title: "closed", data: "closed" });
});

test("what is shown: the connection's state until connected, then the agent's", () => {
  assert.equal(indicatorState("connecting", null), "connecting");
  assert.equal(AGENT_STATE_LABELS[indicatorState("connecting", null)], "Connecting");
  // a stale agent state says nothing while the connection is not there
  assert.equal(indicatorState("reconnecting", "speaking"), "reconnecting");
  assert.equal(indicatorState("connected", null), "initializing");
  assert.equal(indicatorState("connected", "thinking"), "thinking");
});

test("words of your own, a class name and a style", () => {
  const client = new FakeClient();
  const labels = { listening: "Je vous écoute", idle: "Hors ligne" };
  const { view, shown } = mount(client, { labels, className: "badge", style: { fontSize: 12 } });
  assert.equal(shown().label, "Hors ligne");
  act(() => {
    client.connect({ url: "/" }).catch(() => {});
    client.ready();
    client.emitAgentState("listening");
  });
  assert.deepEqual(shown(), { label: "Je vous écoute", title: "listening", data: "listening" });
  act(() => client.emitAgentState("thinking"));
  assert.equal(shown().label, "Thinking"); // the rest stay as they are
  const span = view.query('[role="status"]');
  assert.equal(span.className, "badge");
  assert.equal(span.style.cssText, "font-size: 12px;");
  assert.equal(span.childNodes.length, 2); // the dot, then the word
  const dot = span.firstChild;
  assert.equal(dot.getAttribute("aria-hidden"), "true");
  assert.equal(dot.style.borderRadius, "50%");
  assert.equal(dot.style.background, "rgb(217, 119, 6)"); // thinking's amber
  assert.equal(span.textContent, "Thinking");
});

test("it re-renders only when what it shows changes", () => {
  const client = new FakeClient();
  let renders = 0;
  const Counted = () => {
    renders += 1;
    return h(AgentStateIndicator);
  };
  render(h(RejoinderProvider, { client }, h(Counted)));
  act(() => {
    client.connect({ url: "/" }).catch(() => {});
    client.ready();
  });
  act(() => client.emitTranscript("user", "Hello", true));
  act(() => client.emitUserState("speaking"));
  assert.equal(renders, 1); // the parent never re-rendered: the indicator reads its own slices
});
