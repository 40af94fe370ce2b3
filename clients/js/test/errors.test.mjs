// Close codes and errors (src/errors.ts), checked against the protocol's own table.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { test } from "node:test";
import { CLOSE_CODES, CloseCode, ERROR_CLOSE_CODES, ErrorCode, RejoinderError, closeInfo } from "../dist/index.js";

const PROTOCOL_DOC = new URL("../../../docs/protocol.md", import.meta.url);

/** The close codes docs/protocol.md lists ("Close codes the server uses"). */
function documentedCloseCodes() {
  const doc = readFileSync(PROTOCOL_DOC, "utf8");
  const table = doc.slice(doc.indexOf("Close codes the server uses"));
  const end = table.indexOf("\n\n", table.indexOf("|"));
  return [...table.slice(0, end).matchAll(/^\| (\d{4}) \|/gm)].map((m) => Number(m[1]));
}

const outsideTheRepository = !existsSync(PROTOCOL_DOC) && "docs/protocol.md is not beside this package";

test("every close code of docs/protocol.md has a meaning and an action here", { skip: outsideTheRepository }, () => {
  const documented = documentedCloseCodes();
  assert.ok(documented.length >= 10, `${documented}`);
  for (const code of [...documented, 4004]) {
    assert.ok(CLOSE_CODES[code], `close code ${code} is not known to the client`);
  }
});

test("every close code of the server's models (the generated CloseCode) is known here", () => {
  for (const [name, code] of Object.entries(CloseCode)) assert.ok(CLOSE_CODES[code], `${name} = ${code}`);
  assert.equal(CloseCode.RESUME_FAILED, 4004);
  // the errors that close a connection are error codes the server has
  for (const code of Object.keys(ERROR_CLOSE_CODES)) assert.ok(Object.values(ErrorCode).includes(code), code);
});

test("what each close leads to", () => {
  const action = (code) => closeInfo(code).action;
  assert.equal(action(1000), "end");
  for (const code of [1003, 1007, 1008, 1009, 1011, 4003]) assert.equal(action(code), "fatal", `${code}`);
  for (const code of [1001, 1006, 1013, 4001, 4002, 4999]) assert.equal(action(code), "retry", `${code}`);
  for (const code of [1012, 4004]) assert.equal(action(code), "fresh", `${code}`);
});

test("an error carries the close code and the server's message", () => {
  const error = RejoinderError.fromClose(4003, "protocol", {
    type: "error",
    code: "protocol_mismatch",
    message: "this server speaks protocol 1, not 2",
  });
  assert.ok(error instanceof Error);
  assert.equal(error.name, "RejoinderError");
  assert.equal(error.code, "protocol_mismatch");
  assert.equal(error.closeCode, 4003);
  assert.equal(error.serverMessage, "this server speaks protocol 1, not 2");
  assert.match(error.message, /another protocol version \(close 4003\): this server speaks protocol 1, not 2/);
});

test("without an error message, the close code names the error", () => {
  const cases = {
    1013: ["server_full", /full or draining/],
    4004: ["resume_failed", /session to resume is gone/],
    1012: ["session_lost", /lost with the server process/],
    1006: ["connection_lost", /lost/],
    1011: ["internal_error", /the agent failed/],
    4321: ["closed", /code 4321/],
  };
  for (const [code, [name, meaning]] of Object.entries(cases)) {
    const error = RejoinderError.fromClose(Number(code), "");
    assert.equal(error.code, name);
    assert.equal(error.closeCode, Number(code));
    assert.equal(error.serverMessage, null);
    assert.match(error.message, meaning);
  }
  assert.match(RejoinderError.fromClose(1013, "at capacity").message, /: at capacity$/);
});

test("a server error message (a warning) has no close code", () => {
  const error = RejoinderError.fromServer({ type: "error", code: "session_error", message: "the model is down", source: "llm" });
  assert.deepEqual([error.code, error.closeCode, error.source, error.serverMessage], ["session_error", null, "llm", "the model is down"]);
  assert.equal(error.message, "session_error (llm): the model is down");
});

test("the errors that close a WebRTC session map to the WebSocket's close codes", () => {
  for (const [code, close] of Object.entries(ERROR_CLOSE_CODES)) {
    assert.equal(CLOSE_CODES[close]?.name, code, `${code} -> ${close}`);
  }
  assert.equal(ERROR_CLOSE_CODES.resume_failed, 4004);
  assert.equal(ERROR_CLOSE_CODES.protocol_mismatch, 4003);
});
