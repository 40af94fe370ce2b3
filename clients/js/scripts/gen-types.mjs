#!/usr/bin/env node
// Generates src/protocol.gen.ts, the TypeScript types of the client protocol, from
// ../protocol.schema.json (itself generated from the server's pydantic models by
// `python -m rejoinder.io.protocol_schema`), with json-schema-to-typescript.
//
//   node scripts/gen-types.mjs            write src/protocol.gen.ts
//   node scripts/gen-types.mjs --check    write nothing; exit 1 if the file is stale
//   node scripts/gen-types.mjs --stdout   print what would be written
//
// The generator is found through Node's ordinary resolution from this file (the
// devDependency of clients/js, after `npm install` there), or through NODE_PATH.
// The output depends on no formatter: json-schema-to-typescript's printer is
// deterministic for its pinned version, where prettier (its optional formatter) is a
// caret dependency that may differ between two installs; this script indents instead.

import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const schemaPath = path.resolve(here, "../../protocol.schema.json");
const outputPath = path.resolve(here, "../src/protocol.gen.ts");
const GENERATOR = "json-schema-to-typescript";

function loadGenerator() {
  // createRequire, not import: CommonJS resolution also honours NODE_PATH, so a
  // generator installed elsewhere (npm install --prefix DIR) can be used as is.
  const require = createRequire(import.meta.url);
  try {
    const entry = require.resolve(GENERATOR);
    const { compile } = require(entry);
    const version = readPackageVersion(require, entry);
    return { compile, version };
  } catch (error) {
    if (error && error.code === "MODULE_NOT_FOUND") {
      console.error(
        `${GENERATOR} is not installed: run npm install in clients/js ` +
          `(or set NODE_PATH to a node_modules folder that has it)`,
      );
      process.exit(2);
    }
    throw error;
  }
}

function readPackageVersion(require, entry) {
  // The package's own package.json, found by walking up from its entry point (its
  // "exports" may not list package.json).
  let dir = path.dirname(entry);
  while (dir !== path.dirname(dir)) {
    const candidate = path.join(dir, "package.json");
    if (existsSync(candidate)) {
      const pkg = JSON.parse(readFileSync(candidate, "utf8"));
      if (pkg.name === GENERATOR) return pkg.version;
    }
    dir = path.dirname(dir);
  }
  return "unknown";
}

/** JSDoc text: never closes the comment early. */
function doc(text, indent = "") {
  if (!text) return "";
  const lines = text.replaceAll("*/", "*\\/").split("\n");
  if (lines.length === 1) return `${indent}/** ${lines[0]} */\n`;
  return `${indent}/**\n${lines.map((l) => `${indent} * ${l}`.trimEnd()).join("\n")}\n${indent} */\n`;
}

/** Two spaces per open brace; comment lines go with the code they describe. */
function indent(ts) {
  let depth = 0;
  let inComment = false;
  const lines = ts.split("\n").map((raw) => {
    const line = raw.trim();
    if (!line) return "";
    const pad = (d) => "  ".repeat(Math.max(d, 0));
    if (inComment || line.startsWith("/*")) {
      inComment = !line.endsWith("*/");
      return pad(depth) + (line.startsWith("*") ? ` ${line}` : line);
    }
    if (line.startsWith("//")) return pad(depth) + line;
    const code = line.replace(/"(?:[^"\\]|\\.)*"/g, '""'); // braces in literals don't count
    const opens = (code.match(/[{(]/g) ?? []).length;
    const closes = (code.match(/[})]/g) ?? []).length;
    const leading = code.match(/^[})]+/)?.[0].length ?? 0;
    const out = pad(depth - leading) + line;
    depth += opens - closes;
    return out;
  });
  return lines.join("\n");
}

/** An enum of the schema (`x-enum-varnames`, `x-enum-descriptions`) as a const object
 * and the union of its values under the same name: `CloseCode.NORMAL` is `1000`, and
 * `CloseCode` is also the type `1000 | 1003 | ...`. */
function constObject(name, schema) {
  const names = schema["x-enum-varnames"];
  const descriptions = schema["x-enum-descriptions"] ?? [];
  if (!Array.isArray(names) || names.length !== schema.enum.length) {
    throw new Error(`${name}: x-enum-varnames must name every enum value`);
  }
  const members = schema.enum
    .map((value, i) => `${doc(descriptions[i], "  ")}  ${names[i]}: ${JSON.stringify(value)},`)
    .join("\n");
  return (
    `${doc(schema.description)}export const ${name} = {\n${members}\n} as const;\n` +
    `export type ${name} = (typeof ${name})[keyof typeof ${name}];\n`
  );
}

async function generate() {
  const { compile, version } = loadGenerator();
  const schema = JSON.parse(readFileSync(schemaPath, "utf8"));
  const banner = [
    "/* eslint-disable */",
    "// Generated: do not edit. The client protocol's types, from clients/protocol.schema.json",
    "// (generated in turn from the server's models, src/rejoinder/io/protocol.py), by",
    `// clients/js/scripts/gen-types.mjs with ${GENERATOR} ${version}.`,
    "// Regenerate: python -m rejoinder.io.protocol_schema, then npm run gen:types in clients/js.",
  ].join("\n");
  const types = await compile(schema, "ProtocolMessage", {
    bannerComment: banner,
    // The server ignores unknown fields and a client must too, so the schema allows
    // them; a type with an index signature on every message would hide typos instead.
    additionalProperties: false,
    // CloseCode, ErrorCode and PROTOCOL_VERSION are written below, as values.
    format: false,
  });
  const version_ = schema.$defs.PROTOCOL_VERSION;
  const constants = [
    "",
    "// ---- values (the types above are erased at run time) ----",
    "",
    `${doc(version_.description)}export const PROTOCOL_VERSION = ${JSON.stringify(version_.const)};`,
    "export type PROTOCOL_VERSION = typeof PROTOCOL_VERSION;",
    "",
    constObject("CloseCode", schema.$defs.CloseCode),
    constObject("ErrorCode", schema.$defs.ErrorCode),
  ].join("\n");
  return `${indent(types).trimEnd()}\n${constants}`;
}

const args = new Set(process.argv.slice(2));
const text = await generate();
if (args.has("--stdout")) {
  process.stdout.write(text);
} else if (args.has("--check")) {
  const current = existsSync(outputPath) ? readFileSync(outputPath, "utf8") : null;
  if (current !== text) {
    console.error(
      `${path.relative(process.cwd(), outputPath)} is stale: run npm run gen:types in clients/js`,
    );
    process.exit(1);
  }
} else {
  writeFileSync(outputPath, text);
  console.log(`wrote ${path.relative(process.cwd(), outputPath)}`);
}
