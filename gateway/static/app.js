// The live leaderboard page: top 10 updating in place, your rank, players this period, and a
// feed of top-10 entries. Token: #token=... in the URL, or a demo token if the gateway offers one.
import { LeaderboardClient } from "/client.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.hash.slice(1) || location.search.slice(1));
const board = params.get("board") || "global";
let token = params.get("token");
let windowName = params.get("window") || null;
let previousRanks = new Map(); // player -> rank in the last rendered snapshot
let countdown = null;

async function demoToken() {
  try {
    const response = await fetch("/demo-token", { cache: "no-store" });
    if (response.ok) return (await response.json()).token;
  } catch {}
  return null;
}

function setStatus({ status, retryIn, reason }) {
  const el = $("status");
  el.dataset.state = status;
  clearInterval(countdown);
  const text = $("status-text");
  if (status === "live") text.textContent = "Live";
  else if (status === "connecting") text.textContent = "Connecting…";
  else if (status === "stopped") text.textContent = `Disconnected${reason ? `: ${reason}` : ""}`;
  else if (retryIn != null) {
    const until = performance.now() + retryIn * 1000;
    const tick = () => {
      const left = Math.max(0, Math.ceil((until - performance.now()) / 1000));
      text.textContent = left > 0 ? `Reconnecting in ${left} s…` : "Reconnecting…";
    };
    tick();
    countdown = setInterval(tick, 250);
  } else text.textContent = "Reconnecting…";
}

function renderWindows(windows) {
  const nav = $("windows");
  nav.replaceChildren(
    ...windows.map((w) => {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = w;
      b.setAttribute("aria-pressed", String(w === windowName));
      b.addEventListener("click", () => switchWindow(w));
      return b;
    }),
  );
}

function switchWindow(w) {
  if (w === windowName) return;
  client.unsubscribe(board, windowName);
  windowName = w;
  previousRanks = new Map();
  renderWindows(client.welcome.windows);
  client.subscribe(board, windowName);
  refreshStats();
}

function renderSnapshot(snap) {
  if (snap.board !== board || snap.window !== windowName) return;
  $("period").textContent = `· ${snap.window} ${snap.period}`;
  const me = client.welcome && client.welcome.player;
  const tbody = $("top").tBodies[0];
  const rows = snap.entries.map((e) => {
    const tr = document.createElement("tr");
    tr.dataset.player = e.player;
    const before = previousRanks.get(e.player);
    const old = tbody.querySelector(`tr[data-player="${CSS.escape(e.player)}"]`);
    if (!old || old.dataset.score !== String(e.score) || before !== e.rank) tr.classList.add("changed");
    if (e.player === me) tr.classList.add("me");
    tr.dataset.score = String(e.score);
    const move = document.createElement("td");
    move.className = "move";
    if (before === undefined) [move.textContent, move.title] = ["●", "new"];
    else if (e.rank < before) [move.textContent, move.className, move.title] = ["▲", "move up", `up from #${before}`];
    else if (e.rank > before) [move.textContent, move.className, move.title] = ["▼", "move down", `down from #${before}`];
    const cells = [e.rank, null, e.name || e.player, e.score.toLocaleString()].map((v, i) => {
      if (i === 1) return move;
      const td = document.createElement("td");
      td.textContent = v;
      if (i === 3) td.className = "num";
      return td;
    });
    tr.append(...cells);
    return tr;
  });
  tbody.replaceChildren(...rows);
  previousRanks = new Map(snap.entries.map((e) => [e.player, e.rank]));
}

function renderRank(msg) {
  if (msg.board !== board || msg.window !== windowName) return;
  $("my-rank").textContent = msg.rank == null ? "Not ranked yet" : `#${msg.rank.toLocaleString()}`;
  $("my-score").textContent = msg.score == null ? "" : `${msg.score.toLocaleString()} points of ${msg.size.toLocaleString()} players`;
}

function addFeed(msg) {
  const li = document.createElement("li");
  li.textContent = `${msg.name || msg.player} is now #${msg.rank} (${msg.window})`;
  $("feed").prepend(li);
  while ($("feed").children.length > 8) $("feed").lastElementChild.remove();
}

async function refreshStats() {
  try {
    const stats = await client.request({ type: "stats", board, window: windowName });
    $("players").textContent = stats.players.toLocaleString();
  } catch {}
}

async function showAround() {
  try {
    const reply = await client.request({ type: "around", board, window: windowName, k: 2 });
    $("around").replaceChildren(
      ...reply.entries.map((e) => {
        const li = document.createElement("li");
        li.value = e.rank;
        li.textContent = `${e.name || e.player} — ${e.score.toLocaleString()}`;
        if (e.player === reply.player) li.className = "me";
        return li;
      }),
    );
  } catch (err) {
    $("around").replaceChildren(Object.assign(document.createElement("li"), { textContent: String(err.message) }));
  }
}

if (!token) token = await demoToken();
const scheme = location.protocol === "https:" ? "wss" : "ws";
const client = new LeaderboardClient(`${scheme}://${location.host}/ws`, { token });
window.leaderboard = client; // for the console and for tests

client.addEventListener("status", (e) => setStatus(e.detail));
client.addEventListener("welcome", (e) => {
  const w = e.detail;
  if (!windowName || !w.windows.includes(windowName)) {
    client.unsubscribe(board, windowName);
    windowName = w.window;
    client.subscribe(board, windowName);
  }
  renderWindows(w.windows);
  $("me").hidden = !w.player;
  if (w.player) client.request({ type: "rank", board, window: windowName }).then(renderRank, () => {});
  refreshStats();
});
client.addEventListener("snapshot", (e) => renderSnapshot(e.detail));
client.addEventListener("rank", (e) => renderRank(e.detail));
client.addEventListener("reply", (e) => e.detail.type === "rank" && renderRank(e.detail));
client.addEventListener("announce", (e) => addFeed(e.detail));
$("around-button").addEventListener("click", showAround);
setInterval(refreshStats, 10000);

if (windowName) client.subscribe(board, windowName);
client.start();
