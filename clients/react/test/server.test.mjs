// Rendering on a server (react-dom/server): the hooks read an idle client. In a file of
// its own: node --test runs each file in its own process, and the other files install a
// jsdom document (test/render.mjs), where this one must run with none, as a server does.
import assert from "node:assert/strict";
import { test } from "node:test";
import { renderToString } from "react-dom/server";
import { createElement as h } from "react";
import { AgentStateIndicator, RejoinderProvider, useRejoinder, useTranscript } from "../dist/index.js";
import { FakeClient } from "./fake-client.mjs";

test("on a server it renders the idle client as not connected", () => {
  const html = renderToString(h(RejoinderProvider, { client: new FakeClient() }, h(AgentStateIndicator)));
  assert.match(html, /^<span role="status" title="idle" data-state="idle">/);
  assert.match(html, /Not connected<\/span>$/);
});

test("a provider that makes its client renders on a server too (the client opens nothing until connect)", () => {
  const Call = () => {
    const { state, error } = useRejoinder({ url: "/" });
    return h("p", null, `${state} ${error === null} ${useTranscript().length}`);
  };
  assert.equal(renderToString(h(RejoinderProvider, null, h(Call))), "<p>idle true 0</p>");
});
