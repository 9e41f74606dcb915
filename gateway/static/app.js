// The live leaderboard page: top 10 updating in place with movement, your rank with its trend and
// the players around you, the board's player count, and a feed of top-10 entries — on any board
// of the game, each key shown by its display hint.
// Board: #board=<id> — a defined board's id (#board=tower) or one of the game's own boards
// (global, region:eu); board:<id> is read too. A board kept per region or mode has a board per
// value, #board=tower:region:eu (board:tower:region:eu). The picker offers every home board of
// the game (a `boards` request) as links of that form, and beside it the shown board's regions and
// modes the reply offers ("all" first: the home), so a board is a link; a hash change switches in
// place.
// Window: #window=<name> when the board keeps it, else the board's own first window (the game's
// boards: the gateway's default). Token: #token=... in the URL, or a demo token if the gateway
// offers one (also when a token is refused: a restarted demo fleet signs with a new secret).
// #window=t-<id> shows a tournament: it is a window like the others, offered beside them.
import { LeaderboardClient } from "/client.js";

const $ = (id) => document.getElementById(id);
const params = () => new URLSearchParams(location.hash.slice(1) || location.search.slice(1));
const boardOf = (name) => (!name ? "global" : /^(global$|region:|mode:|board:)/.test(name) ? name : `board:${name}`);
const linkName = (b) => (b.startsWith("board:") ? b.slice("board:".length) : b);
// The home a scope's board belongs to: global for the game's region:<r> and mode:<m>, board:<id>
// for board:<id>:region:<r>; a home is its own.
const homeOf = (b) => (b.startsWith("board:") ? b.split(":").slice(0, 2).join(":") : b.includes(":") ? "global" : b);
const TREND = 30; // rank pushes the sparkline shows
const IDLE_S = 10; // a snapshot older than this on a live connection: the board is idle
let token = params().get("token");
let target = boardOf(params().get("board")); // the board the URL asks for
let wanted = params().get("window") || null; // the window the URL asks for, if the board keeps it
let board = null; // the board and window shown (subscribed): null until the first is chosen
let windowName = null;
let catalog = null; // the game's boards, from the `boards` reply; null until it comes
let columns = null; // the shown board's keys and display hints; null: plain points
let boardError = null; // the URL names a board the game does not have
const isTournament = (w) => /^t-[A-Za-z0-9_-]{1,32}$/.test(w || "");
const tournament = isTournament(wanted) ? wanted : null; // stays on offer after a switch
const offered = (windows) => (tournament ? [...windows, tournament] : windows);
let shownRanks = null; // player -> rank on screen; null: nothing shown yet for this window
let countdown = null;
let lastSnapshotTs = null;
let me = null; // this page's player id, from welcome
// what the page shows as the player's standing; approx: a rounded deep-rank estimate ("≈ #412,000")
let mine = { rank: null, score: null, keys: null, pct: null, approx: false };
let boardSize = null; // one count for the whole page: the newest of stats and rank replies
let trend = []; // the player's last ranks, oldest first
let aroundSeq = 0; // only the newest "around" reply is drawn

async function demoToken() {
  try {
    const response = await fetch("/demo-token", { cache: "no-store" });
    if (response.ok) return (await response.json()).token;
  } catch {}
  return null;
}

const el = (tag, props = {}, ...children) => {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
};
const you = () => el("span", { className: "you", textContent: "you" });

// A player's name with their avatar and country flag, from the profile fields of a snapshot row
// (or an around/ranks row). Built with DOM properties only, never HTML: a name is shown as text
// whatever it holds. The server accepts only https avatars and ISO country codes; the page checks
// again, so a profile written to Redis by other means still cannot inject a javascript: URL.
const COUNTRY = /^[A-Z]{2}$/;
function who(e) {
  const parts = [];
  if (typeof e.avatar === "string" && e.avatar.startsWith("https://")) {
    const img = el("img", { className: "avatar", src: e.avatar, alt: "", width: 20, height: 20, loading: "lazy", referrerPolicy: "no-referrer" });
    img.addEventListener("error", () => img.remove()); // a broken image leaves no broken icon
    parts.push(img);
  }
  parts.push(el("span", { className: "name", textContent: e.name || e.player }));
  if (typeof e.country === "string" && COUNTRY.test(e.country)) {
    // the flag emoji: the two regional indicator symbols of the code
    const flag = String.fromCodePoint(...[...e.country].map((c) => 0x1f1e6 + c.charCodeAt(0) - 65));
    const span = el("span", { className: "flag", textContent: flag, title: e.country });
    span.setAttribute("role", "img"); // read as the country code, not as two letter symbols
    span.setAttribute("aria-label", e.country);
    parts.push(span);
  }
  return parts;
}
const fmt = (n) => n.toLocaleString();
// A defined board's key values (text: exact beyond 2^53) by each column's display hint.
const DISPLAY = {
  number: (v) => BigInt(v).toLocaleString(),
  duration_ms: (v) => {
    const ms = Number(v);
    const s = Math.floor(Math.abs(ms) / 1000);
    const text = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}.${String(Math.abs(ms) % 1000).padStart(3, "0")}`;
    return ms < 0 ? `-${text}` : text;
  },
  money: (v) => {
    const n = BigInt(v); // minor units (cents)
    const abs = n < 0n ? -n : n;
    return `${n < 0n ? "-" : ""}${(abs / 100n).toLocaleString()}.${String(abs % 100n).padStart(2, "0")}`;
  },
};
const shown = (column, v) => (DISPLAY[column?.display] || DISPLAY.number)(String(v));
// An entry's standing as the board ranks it: every key (a floor alone would show players ranked
// apart as equal), each by its display hint; the game's boards' points as a number.
function score(e) {
  const keys = e.keys; // a defined board's values as text, in snapshots and announcements alike
  if (keys && columns) return keys.map((v, i) => shown(columns[i], v)).join(" · ");
  if (e.score == null) return "";
  return columns && columns.length === 1 ? shown(columns[0], e.score) : fmt(e.score);
}
// The same with what each value counts, where it stands alone: "floor 12 · time 1:19.900",
// "5,000 points" (never a lap time as points).
function labelled(e) {
  if (!columns) return `${score(e)} points`;
  const values = e.keys || [e.score];
  return values.map((v, i) => `${columns[i]?.name ?? ""} ${shown(columns[i], v)}`.trim()).join(" · ");
}
const sameStanding = (a, b) => String(a.keys ?? a.score) === String(b.keys ?? b.score);
// An entry's metadata (a car, a replay id): text, never HTML, whatever it holds.
const meta = (e) => (typeof e.meta === "string" && e.meta ? [el("span", { className: "meta", textContent: e.meta })] : []);
// How the board ranks ties, in the players' words (the snapshot's mode).
const MODES = {
  ordinal: "ties: first to reach the score ranks higher",
  competition: "ties share a rank (1, 1, 3)",
  dense: "ties share a rank (1, 1, 2)",
};

function setStatus({ status, retryIn, reason }) {
  const box = $("status");
  box.dataset.state = status;
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
  $("windows").replaceChildren(
    ...windows.map((w) => {
      const b = el("button", { type: "button", textContent: w });
      b.setAttribute("aria-pressed", String(w === windowName));
      b.addEventListener("click", () => switchWindow(w));
      return b;
    }),
  );
}

// The pickers: every home board of the game as a link (#board=<id>, the page's token kept), and the
// shown home's scopes' boards (one per region or mode value on offer, after "all": the home), the
// shown one marked in each; each hidden while it has no choice to offer.
function hrefFor(b, sameWindows = false) {
  const p = params();
  p.set("board", linkName(b));
  if (!sameWindows) p.delete("window"); // a board opens in its own first window; a scope in its home's
  return `#${[...p].map(([k, v]) => `${k}=${encodeURIComponent(v).replace(/%3A/gi, ":")}`).join("&")}`;
}

function links(list, label, sameWindows) {
  return list.map((b) => {
    const a = el("a", { href: hrefFor(b, sameWindows), textContent: label(b) });
    a.dataset.board = b;
    if (b === target) a.setAttribute("aria-current", "page");
    return a;
  });
}

function renderBoards() {
  const list = (catalog || []).map((b) => b.board);
  const home = homeOf(target);
  const homes = list.filter((b) => homeOf(b) === b);
  $("boards").hidden = homes.length < 2;
  $("boards").replaceChildren(...links(homes, linkName, false));
  for (const a of $("boards").children) if (a.dataset.board === home) a.setAttribute("aria-current", "page");
  const scopes = list.filter((b) => b !== home && homeOf(b) === home);
  // a value alone ("eu") while the board offers one kind; "region eu", "mode duo" when both
  const kinds = new Set(scopes.map((b) => b.split(":").at(-2)));
  const label = (b) => (b === home ? `all ${kinds.size === 1 ? `${[...kinds][0]}s` : ""}`.trim() : b.split(":").slice(kinds.size === 1 ? -1 : -2).join(" "));
  $("scopes").hidden = !scopes.length;
  $("scopes").replaceChildren(...links(scopes.length ? [home, ...scopes] : [], label, true));
}

// What the page knows of a board: the catalog's entry, or for the game's own boards the welcome's
// windows until the catalog comes (a defined board waits for it: only it knows its windows).
function boardInfo(b) {
  const listed = catalog && catalog.find((x) => x.board === b);
  if (listed) return listed;
  if (!b.startsWith("board:") && client.welcome) return { board: b, windows: client.welcome.windows, window: client.welcome.window };
  return null;
}

// Show the board the URL asks for, in the window it asks for if the board keeps it, else in the
// board's own default window. True when what is shown changed (its panels then start afresh).
function settle() {
  renderBoards();
  const info = boardInfo(target);
  boardError = !info && catalog ? `no board ${linkName(target)} in this game` : null;
  if (!info) {
    renderFresh();
    return false;
  }
  const windows = offered(info.windows);
  const w = wanted && windows.includes(wanted) ? wanted : info.window;
  const changed = target !== board || w !== windowName;
  if (changed) {
    if (windowName) client.unsubscribe(board, windowName);
    [board, windowName] = [target, w];
    columns = info.columns || null;
    resetStanding();
    resetFeed();
    client.subscribe(board, windowName);
  }
  renderColumns();
  renderWindows(windows);
  return changed;
}

function renderColumns() {
  $("score-col").textContent = columns ? columns.map((c) => c.name).join(" · ") : "Score";
  $("top").dataset.keys = String(columns ? columns.length : 1);
}

function resetStanding() {
  shownRanks = null; // the next window's first snapshot is a first look, not a movement
  lastSnapshotTs = null;
  mine = { rank: null, score: null, keys: null, pct: null, approx: false };
  boardSize = null;
  trend = [];
  $("top").tBodies[0].replaceChildren();
  $("around").replaceChildren();
  renderStanding();
  renderFresh();
}

function switchWindow(w) {
  if (w === windowName) return;
  wanted = w;
  history.replaceState(null, "", `${hrefFor(board)}&window=${encodeURIComponent(w)}`); // the address names it too
  if (settle()) refresh();
}

function renderSnapshot(snap) {
  if (snap.board !== board || snap.window !== windowName) return;
  if (snap.columns) {
    columns = snap.columns; // the snapshot's own: a definition updated since the catalog came
    renderColumns();
  }
  $("period").textContent = `· ${snap.window} ${snap.period}`;
  $("mode").textContent = MODES[snap.mode] || "";
  $("mode").dataset.mode = snap.mode || "";
  $("top").dataset.window = snap.window;
  lastSnapshotTs = snap.ts;
  renderFresh();
  const tbody = $("top").tBodies[0];
  const before = shownRanks;
  const rows = snap.entries.map((e) => {
    const old = tbody.querySelector(`tr[data-player="${CSS.escape(e.player)}"]`);
    const tr = el("tr");
    tr.dataset.player = e.player;
    tr.dataset.score = String(e.keys ?? e.score);
    const move = el("td", { className: "move" });
    const was = before ? before.get(e.player) : undefined;
    if (before && was === undefined) {
      Object.assign(move, { textContent: "★", title: "new in the top 10" });
      move.classList.add("new");
    } else if (was !== undefined && was > e.rank) {
      Object.assign(move, { textContent: `▲${was - e.rank}`, title: `up from #${was}` });
      move.classList.add("up");
    } else if (was !== undefined && was < e.rank) {
      Object.assign(move, { textContent: `▼${e.rank - was}`, title: `down from #${was}` });
      move.classList.add("down");
    }
    // A brief highlight for the rows that moved by their own score: new in the top 10, or up.
    // Rows pushed down a place by someone passing them keep their ▼ but do not flash: one entry
    // at #3 would otherwise light up every row below it.
    if (before && (was === undefined || was > e.rank)) tr.classList.add("moved");
    else if (old && old.dataset.score !== tr.dataset.score) tr.classList.add("scored");
    const name = el("td", { className: "player" }, ...who(e));
    if (e.player === me) {
      tr.classList.add("me");
      name.append(you());
    }
    name.append(...meta(e));
    tr.append(el("td", { className: "rank", textContent: e.rank }), move, name, el("td", { className: "num", textContent: score(e) }));
    return tr;
  });
  tbody.replaceChildren(...rows);
  shownRanks = new Map(snap.entries.map((e) => [e.player, e.rank]));
}

// How current the top 10 is. A snapshot comes only when the top changes, so on a live connection
// (its heartbeat proves the line) an old one means an idle board, shown calmly; only a lost
// connection turns it red.
function renderFresh() {
  const fresh = $("fresh");
  const live = client.status === "live";
  let text, state;
  if (boardError) [text, state] = [boardError, "error"];
  else if (lastSnapshotTs == null) [text, state] = [live && boardSize === 0 ? "no entries yet" : "waiting for data…", "waiting"];
  else {
    const age = Math.max(0, Math.round((Date.now() - lastSnapshotTs) / 1000));
    const ago = age < 60 ? `${age} s` : age < 3600 ? `${Math.floor(age / 60)} min` : `${Math.floor(age / 3600)} h`;
    if (!live) [text, state] = [`offline · updated ${ago} ago`, "offline"];
    else if (age < IDLE_S) [text, state] = [`updated ${ago} ago`, "fresh"];
    else [text, state] = [`idle · no change for ${ago}`, "idle"];
  }
  fresh.textContent = text;
  fresh.dataset.state = state;
}

function setSize(size) {
  if (typeof size === "number") boardSize = size;
}
// Counts read with a rank message or an around reply: a stats reply asked for before the latest
// one read an older board.
let ranksSeen = 0;

// Rank pushes and rank replies: the player's standing, then the neighbours read after it.
function onRank(msg) {
  if (msg.board !== board || msg.window !== windowName || msg.player !== me) return;
  ranksSeen += 1;
  setSize(msg.size);
  setMine(msg, msg.top_percent ?? null, msg.approx === true);
  refreshAround();
}

// The player's standing from a rank message or their own around row (rank, score, a defined
// board's keys).
function setMine({ rank, score, keys = null }, pct = mine.pct, approx = false) {
  if (rank !== mine.rank && rank != null) {
    trend.push(rank);
    if (trend.length > TREND) trend.shift();
  }
  mine = { rank, score, keys, pct: rank == null ? null : pct, approx };
  renderStanding();
}

function renderStanding() {
  $("players").textContent = boardSize == null ? "–" : fmt(boardSize);
  $("my-rank").textContent = mine.rank == null ? "Not ranked yet" : `${mine.approx ? "≈ " : ""}#${fmt(mine.rank)}`;
  $("my-rank").title = mine.approx ? "approximate: far down a large board, the rank is estimated" : "";
  $("my-pct").textContent = share(mine.pct);
  $("my-score").textContent =
    mine.score == null ? "Play a match to get on this board." : `${labelled(mine)} · of ${boardSize == null ? "–" : fmt(boardSize)} players`;
  renderTrend();
}

// Where the player stands, in words that read right: "top 0.4 %" in the upper half; in the lower
// half the share at or below them ("bottom 1 %" for #3,774 of 3,798, not "top 99.4 %", which
// reads as praise). `top_percent` is the share at or above the player, rounded up to 0.1; the
// share at or below is the rest plus the player's own place, shown rounded up to a whole percent.
function share(topPercent) {
  if (topPercent == null) return "";
  if (topPercent <= 50) return `top ${topPercent} %`;
  const own = boardSize ? 100 / boardSize : 0;
  return `bottom ${Math.max(1, Math.ceil(100 - topPercent + own - 1e-9))} %`;
}

// The sparkline: rank 1 at the top, so climbing draws a rising line.
function renderTrend() {
  const svg = $("spark");
  const [line, dot] = [svg.querySelector("polyline"), svg.querySelector("circle")];
  svg.dataset.points = String(trend.length);
  if (!trend.length) {
    line.setAttribute("points", "");
    dot.setAttribute("cx", "-10");
    return;
  }
  const lo = Math.min(...trend), hi = Math.max(...trend);
  const x = (i) => (trend.length === 1 ? 116 : 4 + (112 * i) / (trend.length - 1));
  const y = (r) => (hi === lo ? 16 : 4 + (24 * (r - lo)) / (hi - lo));
  line.setAttribute("points", trend.map((r, i) => `${x(i).toFixed(1)},${y(r).toFixed(1)}`).join(" "));
  dot.setAttribute("cx", x(trend.length - 1).toFixed(1));
  dot.setAttribute("cy", y(trend[trend.length - 1]).toFixed(1));
  svg.setAttribute("aria-label", `Your rank over the last ${trend.length} updates: ${trend.join(", ")}`);
}

async function refreshAround() {
  if (!me) return;
  const seq = ++aroundSeq;
  const win = windowName;
  try {
    const reply = await client.request({ type: "around", board, window: win, k: 2 });
    if (seq !== aroundSeq || win !== windowName) return;
    // the count read with the neighbours: an around read can show a new rank before the rank
    // push does, and the page shows one count with it
    if (typeof reply.size === "number") {
      ranksSeen += 1;
      setSize(reply.size);
      renderStanding();
    }
    const mineRow = reply.entries.find((e) => e.player === me);
    // The around read is newer than the rank it followed: where they differ the player moved in
    // between, and the page must not show two different ranks. An approximate rank is kept while
    // the score stands: it is marked as such, and the list shows the exact neighbours.
    const moved = mineRow && !sameStanding(mineRow, mine);
    if (mineRow && (moved || (!mine.approx && mineRow.rank !== mine.rank))) setMine(mineRow, mineRow.top_percent ?? null);
    $("around").replaceChildren(
      ...reply.entries.map((e) => {
        const mark = e.player === me ? [you()] : [];
        // the value first: it floats right, on the name's line
        const li = el("li", { value: e.rank }, el("span", { className: "num", textContent: score(e) }), ...who(e), ...mark, ...meta(e));
        if (e.player === me) li.className = "me";
        return li;
      }),
    );
  } catch (err) {
    if (seq === aroundSeq) $("around").replaceChildren(el("li", { className: "muted", textContent: String(err.message) }));
  }
}

// The feed: the board's top-10 entries, newest first, eight kept. Filled at once from the
// gateway's recent announcements (a `recent` request at connect and on a window switch), then
// from each `announce`; a reconnect merges, so what is on screen stays until newer replaces it.
const FEED = 8;
let feedItems = []; // {player, name, rank, score, period, ts}, newest first

function resetFeed() {
  feedItems = [];
  renderFeed();
}

function mergeFeed(messages) {
  const key = (m) => `${m.period}|${m.player}|${m.rank}|${m.score}`;
  const known = new Set(feedItems.map(key));
  const fresh = messages.filter((m) => m.board === board && m.window === windowName && !known.has(key(m)));
  if (!fresh.length) return;
  feedItems = [...feedItems, ...fresh].sort((a, b) => b.ts - a.ts).slice(0, FEED);
  renderFeed();
}

function renderFeed() {
  const feed = $("feed");
  if (!feedItems.length) {
    feed.replaceChildren(el("li", { className: "placeholder muted", textContent: "No one has entered the top 10 lately — watch this space." }));
    return;
  }
  const shown = new Set([...feed.children].map((li) => li.dataset.key));
  feed.replaceChildren(
    ...feedItems.map((m) => {
      const time = new Date(m.ts).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
      const li = el(
        "li",
        {},
        el("time", { className: "muted", textContent: time }), // floats right, on the first line
        el("span", { className: "name", textContent: m.name || m.player }),
        ` entered at #${m.rank}`,
        el("span", { className: "num", textContent: ` · ${score(m)}` }),
      );
      li.dataset.key = `${m.period}|${m.player}|${m.rank}|${m.score}|${m.ts}`;
      if (shown.has(li.dataset.key)) li.classList.add("shown"); // already on screen: no slide-in again
      if (m.player === me) li.classList.add("me");
      return li;
    }),
  );
}

function addFeed(msg) {
  mergeFeed([{ ...msg, ts: Date.now() }]);
}

async function refreshFeed() {
  const win = windowName;
  try {
    const reply = await client.request({ type: "recent", board, window: win });
    if (win === windowName) mergeFeed(reply.entries);
  } catch {}
}

async function refreshStats() {
  const win = windowName;
  const asked = ranksSeen;
  try {
    const stats = await client.request({ type: "stats", board, window: win });
    if (win !== windowName || ranksSeen !== asked) return;
    setSize(stats.size);
    renderStanding();
    renderFresh(); // an empty board says so instead of waiting
  } catch {}
}

// "Your rank last week": the window's previous period, read once per window switch and welcome
// (it no longer changes). The all-time board and tournaments have no previous period.
const PREVIOUS = { daily: "Yesterday", weekly: "Last week", monthly: "Last month" };

async function refreshPast() {
  const win = windowName;
  const past = $("my-past");
  past.hidden = true;
  if (!me || !PREVIOUS[win]) return;
  try {
    const r = await client.request({ type: "rank", board, window: win, period: "previous" });
    if (win !== windowName) return;
    past.textContent = r.rank == null
      ? `${PREVIOUS[win]} (${r.period}): not ranked`
      : `${PREVIOUS[win]} (${r.period}): #${fmt(r.rank)} of ${fmt(r.size)} · ${labelled(r)}`;
    past.hidden = false;
  } catch {}
}

function refresh() {
  if (!windowName) return; // no board chosen yet
  refreshStats();
  refreshPast();
  refreshFeed();
  if (me) client.request({ type: "rank", board, window: windowName }).then(onRank, () => {});
}

// The player's own display name (a `profile` request: players may set their name and country).
$("name-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const status = $("name-status");
  status.textContent = "Saving…";
  try {
    const reply = await client.request({ type: "profile", profile: { name: $("name-input").value } });
    $("name-input").value = reply.profile.name || "";
    status.textContent = "Saved";
  } catch (err) {
    status.textContent = String(err.message);
  }
});

if (!token) token = await demoToken();
const scheme = location.protocol === "https:" ? "wss" : "ws";
const client = new LeaderboardClient(`${scheme}://${location.host}/ws`, { token, renewToken: demoToken });
window.leaderboard = client; // for the console and for tests

client.addEventListener("status", (e) => {
  setStatus(e.detail);
  renderFresh();
});
// The game's boards: asked at each welcome (a board defined meanwhile joins the picker).
async function refreshCatalog() {
  try {
    catalog = (await client.request({ type: "boards" })).boards;
  } catch {
    catalog = catalog || [];
  }
  if (settle()) refresh();
}
client.addEventListener("welcome", (e) => {
  const w = e.detail;
  // Every connection is greeted as a spectator before the gateway reads the hello: with a token,
  // that first welcome says nothing about who this page is, and the player's standing stays on
  // screen until new data replaces it. Only another player (a renewed demo token) starts afresh.
  const greeting = client.token && w.role === "spectator";
  if (!greeting && w.player !== me) {
    if (me) resetStanding(); // the first player of the page has nothing shown to reset
    me = w.player;
  }
  settle();
  $("me").hidden = !me;
  refresh();
  refreshCatalog();
});
addEventListener("hashchange", () => {
  const p = params();
  [target, wanted] = [boardOf(p.get("board")), p.get("window") || null];
  if (settle()) refresh();
});
client.addEventListener("snapshot", (e) => renderSnapshot(e.detail));
client.addEventListener("rank", (e) => onRank(e.detail));
client.addEventListener("announce", (e) => addFeed(e.detail));
// The neighbours move without the player's rank moving; the count moves with every newcomer.
setInterval(() => client.status === "live" && (refreshStats(), refreshAround()), 10000);
setInterval(renderFresh, 1000);

client.start();
