// The C# client of the gateway protocol (docs/protocol.md, docs/clients.md), on .NET Standard 2.0
// alone: one assembly for Unity, Godot .NET and server bots.
//
//   var client = new LeaderboardClient("wss://lb.example/ws", new ClientOptions { Token = token });
//   client.Subscribe("global", "weekly");
//   client.Start();
//   // each frame (Unity's Update, Godot's _Process):
//   foreach (var e in client.Poll()) { if (e.Kind == "snapshot") Render(e.Message); }
//
// The connection runs on a background task; everything it has to say goes into a queue the game
// drains from its own loop, so no application code ever runs on a foreign thread. It keeps one
// connection alive: full-jitter backoff after any drop (1012: back within a second; 1013: a cap of
// at least 5 s), hello and every subscription again on reconnect, an app-level heartbeat, the last
// snapshot and own rank of every board, deltas applied (a delta that does not fit: resync).
// A 1008 close stops it (the same token cannot help), as does a server of a newer protocol.
using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Net.WebSockets;
using System.Threading;
using System.Threading.Tasks;

namespace Leaderboard.Client
{
    public sealed partial class LeaderboardClient : IDisposable
    {
        /// <summary>The protocol version this client speaks (welcome.protocol).</summary>
        public const int Protocol = 1;

        public const string Version = "0.1.0";

        readonly Uri uri;
        readonly ClientOptions options;
        readonly Backoff backoff;
        readonly ConcurrentQueue<ClientEvent> events = new ConcurrentQueue<ClientEvent>();
        readonly AutoResetEvent eventReady = new AutoResetEvent(false);
        readonly object gate = new object();

        // under gate: shared by the connection task and the application's thread
        readonly List<string[]> subscriptions = new List<string[]>(); // [board, window or null], in order
        readonly Dictionary<string, Dictionary<string, object>> snapshots = new Dictionary<string, Dictionary<string, object>>();
        readonly Dictionary<string, Dictionary<string, object>> ranks = new Dictionary<string, Dictionary<string, object>>();
        readonly Dictionary<string, TaskCompletionSource<Dictionary<string, object>>> pending =
            new Dictionary<string, TaskCompletionSource<Dictionary<string, object>>>();
        readonly HashSet<string> resyncing = new HashSet<string>();
        Dictionary<string, object> welcome;
        ClientWebSocket socket; // the open connection, once welcomed (null otherwise)
        string status = "idle";
        int nextId;
        CancellationTokenSource stopSource;
        Task loop;

        public LeaderboardClient(string url, ClientOptions options = null)
        {
            uri = new Uri(url);
            this.options = options ?? new ClientOptions();
            backoff = this.options.Backoff ?? new Backoff();
            token = this.options.Token;
        }

        /// <summary>"idle", "connecting", "live", "reconnecting" or "stopped".</summary>
        public string Status
        {
            get { lock (gate) return status; }
        }

        /// <summary>The last welcome (gateway, player, role, heartbeat, protocol), or null.</summary>
        public Dictionary<string, object> Welcome
        {
            get { lock (gate) return welcome; }
        }

        /// <summary>Full snapshots asked for because a delta did not fit the one held.</summary>
        public int Resyncs { get; private set; }

        /// <summary>Snapshot deltas applied to the snapshot held (each handed on as a whole snapshot).</summary>
        public int DeltasApplied { get; private set; }

        /// <summary>Welcomed connections so far.</summary>
        public int Connects { get; private set; }

        /// <summary>The last snapshot of a board (kept through reconnects: a UI never blanks), or null.</summary>
        public Dictionary<string, object> Snapshot(string board, string window)
        {
            lock (gate) return snapshots.TryGetValue(Key(board, window), out var held) ? held : null;
        }

        /// <summary>The last own-rank push of a board, or null.</summary>
        public Dictionary<string, object> Rank(string board, string window)
        {
            lock (gate) return ranks.TryGetValue(Key(board, window), out var held) ? held : null;
        }

        /// <summary>Start the connection loop; while it runs, calling it again does nothing (one loop only).</summary>
        public void Start()
        {
            lock (gate)
            {
                if (loop != null && !loop.IsCompleted) return;
                stopSource = new CancellationTokenSource();
                stopReason = null;
                var stop = stopSource.Token;
                // on the thread pool: no SynchronizationContext (Unity's, Godot's) is captured inside
                loop = Task.Run(() => Run(stop));
            }
        }

        /// <summary>Close the connection and stop reconnecting (idempotent); status "stopped".</summary>
        public async Task StopAsync()
        {
            Task running;
            ClientWebSocket open;
            lock (gate)
            {
                if (stopSource == null) return;
                stopping = true;
                running = loop;
                open = socket;
            }
            if (open != null) await CloseQuietly(open, WebSocketCloseStatus.NormalClosure).ConfigureAwait(false);
            lock (gate) stopSource.Cancel(); // ends a wait for the next attempt, or a receive the close did not end
            try
            {
                await running.ConfigureAwait(false);
            }
            catch (Exception)
            {
                // the loop reports its own failures; a stop must not throw
            }
            lock (gate) stopping = false;
        }

        /// <summary>StopAsync, waited for (a few seconds at most).</summary>
        public void Stop()
        {
            StopAsync().Wait(TimeSpan.FromSeconds(5));
        }

        public void Dispose()
        {
            Stop();
        }

        public void Subscribe(string board = "global", string window = null)
        {
            ClientWebSocket open;
            lock (gate)
            {
                string key = Key(board, window);
                if (!subscriptions.Exists(s => Key(s[0], s[1]) == key)) subscriptions.Add(new[] { board, window });
                open = socket;
            }
            if (open != null) Fire(open, BoardMessage("subscribe", board, window));
        }

        public void Unsubscribe(string board = "global", string window = null)
        {
            ClientWebSocket open;
            lock (gate)
            {
                string key = Key(board, window);
                subscriptions.RemoveAll(s => Key(s[0], s[1]) == key);
                open = socket;
            }
            if (open != null) Fire(open, BoardMessage("unsubscribe", board, window));
        }

        /// <summary>Send a message without waiting for an answer (e.g. a friends list); dropped while not live.</summary>
        public bool Send(Dictionary<string, object> message)
        {
            ClientWebSocket open;
            lock (gate) open = socket;
            if (open == null) return false;
            Fire(open, message);
            return true;
        }

        /// <summary>
        /// Send a request and wait for the reply carrying its id. Throws RequestError: the server's
        /// error code on an error reply, "timeout", or "not_connected" (not live, or the line dropped).
        /// </summary>
        public async Task<Dictionary<string, object>> RequestAsync(Dictionary<string, object> message, TimeSpan? timeout = null)
        {
            ClientWebSocket open;
            string id;
            // continuations off the connection task: the receive loop never runs application code
            var reply = new TaskCompletionSource<Dictionary<string, object>>(TaskCreationOptions.RunContinuationsAsynchronously);
            lock (gate)
            {
                open = socket;
                if (open == null) throw new RequestError("not_connected", "the client is not connected");
                id = "r" + (++nextId);
                pending[id] = reply;
            }
            var framed = new Dictionary<string, object>(message) { ["id"] = id };
            Fire(open, framed);
            var done = await Task.WhenAny(reply.Task, Task.Delay(timeout ?? options.RequestTimeout)).ConfigureAwait(false);
            if (done != reply.Task)
            {
                lock (gate) pending.Remove(id);
                throw new RequestError("timeout", "no reply within the timeout");
            }
            return await reply.Task.ConfigureAwait(false);
        }

        /// <summary>Every event since the last call, oldest first (call it from the game's main loop).</summary>
        public List<ClientEvent> Poll()
        {
            var drained = new List<ClientEvent>();
            while (events.TryDequeue(out var e)) drained.Add(e);
            return drained;
        }

        public bool TryDequeue(out ClientEvent e) => events.TryDequeue(out e);

        /// <summary>For a program without a frame loop (a bot): block until an event may be queued, or the timeout.</summary>
        public bool WaitForEvent(int millisecondsTimeout)
        {
            return !events.IsEmpty || eventReady.WaitOne(millisecondsTimeout);
        }

        // --- helpers shared with the connection loop (Connection.cs)

        static string Key(string board, string window) => board + "|" + (window ?? "");

        static Dictionary<string, object> BoardMessage(string type, string board, string window)
        {
            var msg = new Dictionary<string, object> { ["type"] = type, ["board"] = board };
            if (window != null) msg["window"] = window;
            return msg;
        }

        void Emit(ClientEvent e)
        {
            events.Enqueue(e);
            eventReady.Set();
        }

        void SetStatus(string next, double? retryIn, string reason)
        {
            lock (gate)
            {
                if (next == status && next != "reconnecting") return;
                status = next;
            }
            Emit(ClientEvent.OfStatus(next, retryIn, reason));
        }

        static readonly Stopwatch Clock = Stopwatch.StartNew();

        static double Now => Clock.Elapsed.TotalSeconds;
    }
}
