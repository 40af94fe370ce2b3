// Rendering hooks in node: react-test-renderer under `act`, and a probe component that
// records each value a hook returned, one entry per render.
import { createElement } from "react";
import TestRenderer from "react-test-renderer";

globalThis.IS_REACT_ACT_ENVIRONMENT = true;
export const { act } = TestRenderer;

// React's warnings (an update outside act, a snapshot that is not cached, ...) fail the
// test that caused them. react-test-renderer's own deprecation notice (React 19) is not
// about the code under test.
export const warnings = [];
const consoleError = console.error;
console.error = (...args) => {
  const text = args.map(String).join(" ");
  if (text.includes("react-test-renderer is deprecated")) return;
  warnings.push(text);
  consoleError(...args);
};

const mounted = new Set();

/** Mounts `element`; returns the renderer. */
export function render(element) {
  let renderer;
  act(() => {
    renderer = TestRenderer.create(element);
  });
  mounted.add(renderer);
  return renderer;
}

/** Unmounts what the test left mounted (for afterEach). */
export function cleanup() {
  for (const renderer of mounted) act(() => renderer.unmount());
  mounted.clear();
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
