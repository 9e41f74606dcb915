// The client in Node.js 20 (no global WebSocket: the ws package), against a real fleet whose
// gateway URL and tokens tests/test_js_client.py passes in the environment, and against small
// scripted servers (ws's) for what a healthy gateway never sends: malformed frames, a newer
// protocol. Run by `node --test test/` from clients/js.
import assert from "node:assert/strict";
import { once } from "node:events";
import { test } from "node:test";

import { WebSocketServer } from "ws";

import { Backoff, LeaderboardClient, PROTOCOL } from "../src/client.js";

const URL_ = process.env.LB_TEST_WS_URL;
const SERVER_TOKEN = process.env.LB_TEST_SERVER_TOKEN;
const PLAYER = process.env.LB_TEST_PLAYER ?? "mia";
const PLAYER_TOKEN = process.env.LB_TEST_PLAYER_TOKEN;
const fleet = { skip: URL_ ? false : "LB_TEST_WS_URL is not set (tests/test_js_client.py sets it)" };

// The next event of `type` whose detail passes `check`, within `ms`.
function next(client, type, check = () => true, ms = 10_000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      client.removeEventListener(type, listener);
      reject(new Error(`no ${type} event within ${ms} ms`));
    }, ms);
    const listener = (event) => {
      if (!check(event.detail)) return;
      clearTimeout(timer);
      client.removeEventListener(type, listener);
      resolve(event.detail);
    };
    client.addEventListener(type, listener);
  });
}

// As in Node 20, whatever runs this: no global WebSocket, so every test below goes through the
// ws package the client imports itself (browsers' global one: tests/test_browser.py).
delete globalThis.WebSocket;

test("without a global WebSocket the client brings ws in itself", () => {
  assert.equal(typeof globalThis.WebSocket, "undefined");
});

test("a game server submits; a player sees the snapshot, its own rank and replies", fleet, async () => {
  const server = new LeaderboardClient(URL_, { token: SERVER_TOKEN });
  const player = new LeaderboardClient(URL_, { token: PLAYER_TOKEN });
  try {
    server.start();
    await next(server, "welcome", (w) => w.role === "server");
    const submitted = await server.request({
      type: "submit",
      submission: { id: `js-${Date.now()}`, player: PLAYER, points: 4200 },
    });
    assert.equal(submitted.type, "submitted");

    player.subscribe("global", "alltime");
    const welcome = next(player, "welcome", (w) => w.role === "player");
    const snapshot = next(player, "snapshot", (s) => s.window === "alltime" && s.entries.some((e) => e.player === PLAYER));
    player.start();
    assert.equal((await welcome).protocol, PROTOCOL);
    const board = await snapshot;
    assert.equal(board.board, "global");
    assert.equal(board.entries.find((e) => e.player === PLAYER).score, 4200);
    assert.equal(player.status, "live");

    const top = await player.request({ type: "top", window: "alltime", n: 3 });
    assert.equal(top.type, "top");
    assert.equal(top.entries[0].player, PLAYER);
    const rank = await player.request({ type: "rank", window: "alltime" });
    assert.deepEqual([rank.type, rank.player, rank.rank], ["rank", PLAYER, 1]);
    // a refused request rejects with the server's stable code, and the connection stays live
    await assert.rejects(player.request({ type: "top", board: "nowhere:x:y" }), { code: "bad_board" });
    await assert.rejects(player.request({ type: "submit", submission: { id: "x", player: PLAYER, points: 1 } }), {
      code: "forbidden",
    });
    assert.equal((await player.request({ type: "ping" })).type, "pong");
  } finally {
    server.stop();
    player.stop();
  }
});

test("a refused token stops the client: no retry with the same token", fleet, async () => {
  const client = new LeaderboardClient(URL_, { token: "not.a.token" });
  const stopped = next(client, "status", (s) => s.status === "stopped");
  client.start();
  const status = await stopped;
  assert.equal(status.reason, "invalid_token");
  assert.equal(client.status, "stopped");
});

// A scripted gateway: sends `frames` after the connection opens, then keeps it open.
async function scripted(frames) {
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  await once(wss, "listening");
  wss.on("connection", (socket) => {
    for (const frame of frames) socket.send(frame);
  });
  return { url: `ws://127.0.0.1:${wss.address().port}/ws`, close: () => new Promise((r) => wss.close(r)) };
}

function welcome(protocol) {
  return JSON.stringify({
    type: "welcome", protocol, gateway: "scripted", game: "g", player: null, role: "spectator",
    heartbeat: { interval: 15, timeout: 30 }, windows: ["weekly"], window: "weekly", top: 10, deltas: false,
  });
}

test("a malformed server message is an error event, and the loop goes on", async () => {
  const snapshot = { type: "snapshot", board: "global", window: "weekly", period: "2026-W48", version: 1, ts: 1,
    mode: "ordinal", entries: [{ rank: 1, player: "mia", score: 5 }] };
  const gateway = await scripted([welcome(PROTOCOL), "not json", "[1, 2]", '{"no": "type"}', "null",
    JSON.stringify(snapshot)]);
  const client = new LeaderboardClient(gateway.url);
  const errors = [];
  client.addEventListener("error", (e) => errors.push(e.detail.code));
  try {
    const got = next(client, "snapshot");
    client.start();
    assert.deepEqual((await got).entries, snapshot.entries);
    assert.deepEqual(errors, ["malformed_message", "malformed_message", "malformed_message", "malformed_message"]);
    assert.equal(client.status, "live");
  } finally {
    client.stop();
    await gateway.close();
  }
});

test("a gateway of a newer protocol is reported, and the client stops", async () => {
  const gateway = await scripted([welcome(PROTOCOL + 1)]);
  const client = new LeaderboardClient(gateway.url, { backoff: new Backoff({ base: 0.01 }) });
  try {
    const error = next(client, "error");
    const stopped = next(client, "status", (s) => s.status === "stopped");
    client.start();
    assert.equal((await error).code, "protocol_version");
    assert.equal((await stopped).reason, "protocol_version");
    assert.equal(client.welcome, null); // nothing of the newer protocol was taken in
  } finally {
    client.stop();
    await gateway.close();
  }
});
