// What `npm pack` would publish, and what the bundle imports: the peer dependencies only.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));

test("the package holds the ESM bundle and the .d.ts, nothing else", () => {
  const out = execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: root, encoding: "utf8" });
  const [pack] = JSON.parse(out);
  const files = pack.files.map((f) => f.path).sort();
  for (const needed of ["package.json", "README.md", "dist/index.js", "dist/lib/index.d.ts", "dist/lib/hooks.d.ts"]) {
    assert.ok(files.includes(needed), `${needed} is not in the package: ${files.join(", ")}`);
  }
  const stray = files.filter(
    (f) => !["package.json", "README.md", "dist/index.js", "dist/index.js.map"].includes(f) && !/^dist\/lib\/.*\.d\.ts$/.test(f),
  );
  assert.deepEqual(stray, []);
  assert.equal(pack.name, "@rejoinder/react");
});

test("no runtime dependencies: React and the SDK are peers, imported and never bundled", () => {
  assert.equal(pkg.type, "module");
  assert.equal(pkg.dependencies, undefined);
  assert.deepEqual(Object.keys(pkg.peerDependencies).sort(), ["@rejoinder/client", "react"]);
  assert.equal(pkg.peerDependencies.react, ">=18");
  const bundle = readFileSync(new URL("../dist/index.js", import.meta.url), "utf8");
  const imported = new Set([...bundle.matchAll(/^import .* from "([^"]+)";$/gm)].map((m) => m[1]));
  assert.deepEqual([...imported].sort(), ["@rejoinder/client", "react", "react/jsx-runtime"]);
  assert.doesNotMatch(bundle, /useSyncExternalStoreWithSelector|function createElement\(/); // no React copy
});

test("every devDependency is pinned to one version", () => {
  for (const [name, range] of Object.entries(pkg.devDependencies)) {
    if (name === "@rejoinder/client") assert.equal(range, "file:../js");
    else assert.match(range, /^\d+\.\d+\.\d+$/, `${name}: ${range}`);
  }
});

test("the entry point exports the hooks, the provider and the indicator", async () => {
  assert.equal(pkg.exports["."].import, "./dist/index.js");
  assert.equal(pkg.exports["."].types, "./dist/lib/index.d.ts");
  const react = await import(new URL("../dist/index.js", import.meta.url));
  assert.deepEqual(Object.keys(react).sort(), [
    "AGENT_STATE_LABELS",
    "AgentStateIndicator",
    "RejoinderProvider",
    "indicatorState",
    "useAgentState",
    "useMicrophone",
    "useRejoinder",
    "useRejoinderEvent",
    "useTranscript",
    "useUserState",
  ]);
});

test("the README's component is example/App.tsx, word for word", () => {
  const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
  const shown = readme.split("```tsx\n")[1]?.split("```")[0];
  assert.equal(shown, readFileSync(new URL("../example/App.tsx", import.meta.url), "utf8"));
  assert.ok(shown.split("\n").filter((line) => line.trim()).length <= 30); // still short
});
