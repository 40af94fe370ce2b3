// Bundles the SDK with esbuild (types come from `tsc`, run before this by `npm run build`):
//   dist/worklet.js  the AudioWorklet processors, one classic script (for `workletUrl`);
//   dist/index.js    the ESM bundle, with that worklet's source embedded (loaded from a
//                    blob: URL, so a page needs no second file).
import { build } from "esbuild";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const common = { absWorkingDir: root, bundle: true, target: "es2022", logLevel: "warning", legalComments: "none" };

await build({
  ...common,
  entryPoints: ["src/worklet/processors.ts"],
  outfile: "dist/worklet.js",
  format: "iife",
});
const worklet = await readFile(new URL("../dist/worklet.js", import.meta.url), "utf8");

await build({
  ...common,
  entryPoints: ["src/index.ts"],
  outfile: "dist/index.js",
  format: "esm",
  platform: "browser",
  sourcemap: true,
  define: { __REJOINDER_WORKLET__: JSON.stringify(worklet) },
});
