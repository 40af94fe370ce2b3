// One URL, two endpoints (src/url.ts).
import assert from "node:assert/strict";
import { test } from "node:test";
import { endpoints } from "../dist/lib/url.js";

const both = (url, base) => {
  const e = endpoints(url, base);
  return [e.websocket.href, e.offer.href];
};

test("the app's address gives its WebSocket and its offer route", () => {
  assert.deepEqual(both("http://127.0.0.1:8080/"), ["ws://127.0.0.1:8080/ws", "http://127.0.0.1:8080/api/offer"]);
  assert.deepEqual(both("https://a.example/agent/"), ["wss://a.example/agent/ws", "https://a.example/agent/api/offer"]);
  assert.deepEqual(both("https://a.example/agent"), ["wss://a.example/agent/ws", "https://a.example/agent/api/offer"]);
  assert.deepEqual(both("https://a.example/agent/index.html"), ["wss://a.example/agent/ws", "https://a.example/agent/api/offer"]);
});

test("a WebSocket URL is used as it is", () => {
  assert.deepEqual(both("wss://a.example/x/ws"), ["wss://a.example/x/ws", "https://a.example/x/api/offer"]);
  assert.deepEqual(both("ws://h:1/socket"), ["ws://h:1/socket", "http://h:1/api/offer"]);
});

test("the query goes to both (the entry point's conn.query); relative URLs take the page's", () => {
  assert.deepEqual(both("/?voice=b#x", "http://h:9/page/index.html"), ["ws://h:9/ws?voice=b", "http://h:9/api/offer?voice=b"]);
  assert.deepEqual(both("./", "https://h/page/index.html"), ["wss://h/page/ws", "https://h/page/api/offer"]);
});

test("a URL that is not one says so", () => {
  assert.throws(() => endpoints("not a url"), /not a URL/);
  assert.throws(() => endpoints("ftp://h/"), /http\(s\) or ws\(s\)/);
});
