// A typed use of the package: `tsc --noEmit` checks it against client.d.ts and the generated
// messages.d.ts (tests/test_js_client.py). It is type-checked, not run.
import { LeaderboardClient, PROTOCOL, type Replies, type ServerMessage, type Snapshot } from "leaderboard-fleet-client";

const client = new LeaderboardClient("ws://127.0.0.1:8000/ws", { token: null, deltas: true });

client.addEventListener("snapshot", (event) => {
  const snapshot: Snapshot = event.detail;
  for (const entry of snapshot.entries) {
    const shown: string = entry.name ?? entry.player;
    const keys: string[] | undefined = entry.keys; // a defined board's key values, as text
    console.log(entry.rank, shown, entry.score, keys);
  }
});
client.addEventListener("rank", (event) => console.log(event.detail.rank ?? "unranked", event.detail.top_percent));
client.addEventListener("error", (event) => {
  if (event.detail.code === "protocol_version") console.log(`this client speaks protocol ${PROTOCOL}`);
});
client.addEventListener("status", (event) => console.log(event.detail.status, event.detail.retryIn));
client.subscribe("global", "weekly");
client.start();

async function friends(): Promise<number> {
  // the reply's type follows from the request's: a `ranks` request resolves with a `Ranks`
  const reply: Replies["ranks"] = await client.request({ type: "ranks", players: ["mia", "leo"] });
  const top = await client.request({ type: "top", n: 3 });
  const first: string | undefined = top.entries[0]?.player;
  console.log(first);
  return reply.players.filter((p) => p.rank !== null).length;
}

function describe(message: ServerMessage): string {
  switch (message.type) {
    case "welcome":
      return `protocol ${message.protocol} on ${message.gateway}`;
    case "error":
      return message.code;
    default:
      return message.type;
  }
}

void friends;
void describe;
