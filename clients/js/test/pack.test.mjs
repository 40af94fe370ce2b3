// What `npm pack` would publish: the ESM bundle, the worklet, the declarations, no sources.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));

test("the package holds the ESM bundle, the worklet and the .d.ts, nothing else", () => {
  const out = execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: root, encoding: "utf8" });
  const [pack] = JSON.parse(out);
  const files = pack.files.map((f) => f.path).sort();
  for (const needed of ["package.json", "README.md", "dist/index.js", "dist/worklet.js", "dist/lib/index.d.ts", "dist/lib/client.d.ts", "dist/lib/protocol.d.ts", "dist/lib/protocol.gen.d.ts"]) {
    assert.ok(files.includes(needed), `${needed} is not in the package: ${files.join(", ")}`);
  }
  const stray = files.filter((f) => !(f === "package.json" || f === "README.md" || f.startsWith("dist/")) || (f.startsWith("dist/lib/") && !f.endsWith(".d.ts")));
  assert.deepEqual(stray, []);
  assert.equal(pack.name, "@rejoinder/client");
});

test("the package's entry points resolve to what it ships", async () => {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
  assert.equal(pkg.type, "module");
  assert.equal(pkg.dependencies, undefined); // no runtime dependencies
  assert.equal(pkg.peerDependencies, undefined);
  assert.equal(pkg.exports["."].import, "./dist/index.js");
  assert.equal(pkg.exports["."].types, "./dist/lib/index.d.ts");
  const sdk = await import(new URL("../dist/index.js", import.meta.url));
  assert.equal(typeof sdk.RejoinderClient, "function");
  assert.equal(sdk.PROTOCOL_VERSION, 1);
});
