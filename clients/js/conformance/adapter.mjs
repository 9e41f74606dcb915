// The JS client's conformance adapter: one LeaderboardClient driven over stdin/stdout by the
// conformance runner (clients/conformance/adapters.json names this file). stdin: one command per
// line ({"cmd": …}); stdout: one event per line ({"event": …}), flushed per line; stderr: logs.
// It wraps the client as an application uses it: no test-only knobs, the client's own backoff,
// heartbeat and reconnects.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";

import { LeaderboardClient, PROTOCOL } from "../src/client.js";

const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
// the client's events the application sees, forwarded with the message they carry
const FORWARDED = ["welcome", "snapshot", "rank", "announce", "overtaken"];

function emit(event) {
  process.stdout.write(`${JSON.stringify(event)}\n`); // a pipe: written at once, in order
}

let client = null;

function start({ url, token = null, deltas = true }) {
  if (client) client.stop();
  client = new LeaderboardClient(url, { token, deltas });
  client.addEventListener("status", ({ detail }) =>
    emit({ event: "status", status: detail.status, retry_in: detail.retryIn ?? null, reason: detail.reason ?? null }),
  );
  for (const name of FORWARDED) client.addEventListener(name, ({ detail }) => emit({ event: name, message: detail }));
  client.addEventListener("error", ({ detail }) => emit({ event: "error", code: detail.code, message: detail.message }));
  client.start();
}

function request({ ref, message }) {
  if (!client) {
    emit({ event: "reply_error", ref, code: "not_connected" });
    return;
  }
  client.request(message).then(
    (reply) => emit({ event: "reply", ref, message: reply }),
    (err) => emit({ event: "reply_error", ref, code: err.code ?? "error" }),
  );
}

function stop() {
  if (client) client.stop();
  client = null;
  process.stdout.write(`${JSON.stringify({ event: "stopped" })}\n`, () => process.exit(0));
}

const commands = {
  start,
  subscribe: ({ board, window }) => client?.subscribe(board, window),
  unsubscribe: ({ board, window }) => client?.unsubscribe(board, window),
  request,
  send: ({ message }) => client?.send(message),
  stop,
};

emit({ event: "ready", client: "js", version, protocol: PROTOCOL });
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  if (!line.trim()) return;
  let command;
  try {
    command = JSON.parse(line);
  } catch {
    console.error(`adapter: not JSON: ${line.slice(0, 200)}`);
    return;
  }
  const run = commands[command?.cmd];
  if (run) run(command);
  else console.error(`adapter: unknown command ${JSON.stringify(command?.cmd)}`);
});
lines.on("close", stop); // EOF means stop
