// Builds the example into example/dist/: index.html and app.js, one bundle of the app,
// React, @rejoinder/react (from this package's sources) and @rejoinder/client.
//   node example/build.mjs   (npm run build:example, after npm run build in clients/js)
import { build } from "esbuild";
import { copyFile, mkdir } from "node:fs/promises";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
await mkdir(`${here}dist`, { recursive: true });
await build({
  absWorkingDir: here,
  entryPoints: ["main.tsx"],
  outfile: "dist/app.js",
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  jsx: "automatic",
  minify: true,
  sourcemap: true,
  define: { "process.env.NODE_ENV": '"production"' },
  // The example imports the package by its name, as an app would.
  alias: { "@rejoinder/react": "../src/index.ts" },
  legalComments: "none",
  logLevel: "warning",
});
await copyFile(`${here}index.html`, `${here}dist/index.html`);
