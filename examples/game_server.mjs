// A game server in Node.js (no npm packages, no Python): it signs its own server token (HS256,
// node:crypto), submits a match's results over the HTTP API in one batch (one slip per player)
// and reads each player's rank.
//
//   source var/fleet.env    # written by ./dev run: LB_API_URL, and LB_JWT_SECRETS to sign with
//   node examples/game_server.mjs mia 1200 ben 900
import { createHmac, randomUUID } from "node:crypto";

// A JWT as the gateways and the HTTP API check it: HS256, with sub, role and exp.
export function sign(claims, secret) {
  const part = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const unsigned = `${part({ alg: "HS256", typ: "JWT" })}.${part(claims)}`;
  return `${unsigned}.${createHmac("sha256", secret).update(unsigned).digest("base64url")}`;
}

async function call(api, token, method, path, body) {
  const headers = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(new URL(path, api), { method, headers, body: body && JSON.stringify(body) });
  const answer = await response.json();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${answer.code}: ${answer.detail}`);
  return answer;
}

export async function reportMatch(api, secret, results) {
  const token = sign({ sub: "game-server-1", role: "server", exp: Math.floor(Date.now() / 1000) + 300 }, secret);
  // Each slip's id makes a retry safe: the same id is applied once, however often it is sent,
  // alone or in a batch. One bad slip refuses the whole batch (invalid_slips): nothing is queued.
  const match = `match-${randomUUID()}`;
  const slips = results.map(([player, points]) => ({ player_id: player, score: points, match_id: `${match}:${player}` }));
  const answer = await call(api, token, "POST", "boards/global/scores:batch?wait=applied", { slips });
  for (const slip of answer.slips) console.log(`${slip.submission}: ${slip.status}`);
  for (const [player] of results) {
    const me = await call(api, token, "GET", `boards/global/players/${encodeURIComponent(player)}`);
    console.log(`${player}: rank ${me.rank} of ${me.size} with ${me.score} points`);
  }
}

const args = process.argv.slice(2);
const results = [];
for (let i = 0; i + 1 < args.length; i += 2) results.push([args[i], Number(args[i + 1])]);
const api = process.env.LB_API_URL;
const secret = (process.env.LB_JWT_SECRETS || "").split(",")[0];
if (!api || !secret) {
  console.error("LB_API_URL or LB_JWT_SECRETS is not set: `source var/fleet.env` (./dev run writes them there)");
  process.exit(1);
}
if (!results.length || args.length % 2 || !results.every(([, points]) => Number.isSafeInteger(points))) {
  console.error("usage: node examples/game_server.mjs PLAYER POINTS [PLAYER POINTS ...]  (a match's results)");
  process.exit(2);
}
await reportMatch(api, secret, results);
