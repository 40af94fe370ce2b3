// Bundles the package's sources into one ES module, dist/index.js (the declarations come
// from `tsc`, run before this by `npm run build`). React and @rejoinder/client are peer
// dependencies: imported, never bundled, so an app has one copy of each.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";

await build({
  absWorkingDir: fileURLToPath(new URL("..", import.meta.url)),
  entryPoints: ["src/index.ts"],
  outfile: "dist/index.js",
  bundle: true,
  format: "esm",
  platform: "neutral",
  target: "es2022",
  jsx: "automatic",
  packages: "external",
  sourcemap: true,
  legalComments: "none",
  logLevel: "warning",
});
