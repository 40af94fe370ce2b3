// Rendering hooks in node: react-dom into a jsdom document, under React's `act`, and a
// probe component that records each value a hook returned, one entry per render.
import { JSDOM } from "jsdom";
import { act, createElement } from "react";
import { createRoot } from "react-dom/client";

// The one document of this test file (node --test runs each file in its own process). Only
// `window` and `document` are made global: what react-dom reads; `location` is left out, so
// a client made without a platform still takes no page address for relative URLs.
const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
globalThis.IS_REACT_ACT_ENVIRONMENT = true;
export { act };

// React's warnings (an update outside act, a snapshot that is not cached, ...) fail the
// test that caused them.
export const warnings = [];
const consoleError = console.error;
console.error = (...args) => {
  warnings.push(args.map(String).join(" "));
  consoleError(...args);
};

const mounted = new Set();

/**
 * Mounts `element` in a fresh container; returns the view: `container` (the DOM),
 * `query(selector)`, `update(element)` and `unmount()` (call those two inside `act`).
 */
export function render(element) {
  const container = document.createElement("div");
  document.body.append(container);
  const root = createRoot(container);
  let unmounted = false;
  const view = {
    container,
    query: (selector) => container.querySelector(selector),
    update: (next) => root.render(next),
    unmount() {
      if (unmounted) return;
      unmounted = true;
      mounted.delete(view);
      root.unmount();
      container.remove();
    },
  };
  mounted.add(view);
  act(() => root.render(element));
  return view;
}

/** Unmounts what the test left mounted (for afterEach). */
export function cleanup() {
  for (const view of [...mounted]) act(() => view.unmount());
}

/** A component that calls `hook()` on each render and pushes what it returned to `seen`. */
export function probe(hook, seen) {
  return function Probe() {
    seen.push(hook());
    return null;
  };
}

/** `createElement`, shorter. */
export const h = createElement;
