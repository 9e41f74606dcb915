// A game server in Node.js (no npm packages, no Python): it signs its own server token (HS256,
// node:crypto), submits a match result over the HTTP API and reads the player's rank.
//
//   source var/fleet.env    # written by ./dev run: LB_API_URL, and LB_JWT_SECRETS to sign with
//   node examples/game_server.mjs mia 1200
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

export async function reportMatch(api, secret, player, points) {
  const token = sign({ sub: "game-server-1", role: "server", exp: Math.floor(Date.now() / 1000) + 300 }, secret);
  // The match id makes a retry safe: the same id is applied once, however often it is sent.
  const match = `match-${randomUUID()}`;
  const slip = { player_id: player, score: points, match_id: match };
  const outcome = await call(api, token, "POST", "boards/global/scores?wait=applied", slip);
  console.log(`${match}: ${outcome.status}`);
  const me = await call(api, token, "GET", `boards/global/players/${encodeURIComponent(player)}`);
  console.log(`${player}: rank ${me.rank} of ${me.size} with ${me.score} points`);
}

const [player, points] = process.argv.slice(2);
const api = process.env.LB_API_URL;
const secret = (process.env.LB_JWT_SECRETS || "").split(",")[0];
if (!api || !secret) {
  console.error("LB_API_URL or LB_JWT_SECRETS is not set: `source var/fleet.env` (./dev run writes them there)");
  process.exit(1);
}
if (!player || !Number.isSafeInteger(Number(points))) {
  console.error("usage: node examples/game_server.mjs PLAYER POINTS");
  process.exit(2);
}
await reportMatch(api, secret, player, Number(points));
