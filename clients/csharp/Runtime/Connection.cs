// The connection loop of LeaderboardClient: one task connects, reads, watches the line and
// reconnects; it reports through the event queue only.
using System;
using System.Collections.Generic;
using System.IO;
using System.Net.WebSockets;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace Leaderboard.Client
{
    public sealed partial class LeaderboardClient
    {
        const int Policy = 1008; // a bad token (or game, origin): retrying with it cannot help
        static readonly HashSet<string> TokenRefused = new HashSet<string> { "invalid_token", "token_expired" };
        // strict: a frame that is not valid UTF-8 is malformed, not silently patched
        static readonly UTF8Encoding Utf8 = new UTF8Encoding(false, true);

        readonly SemaphoreSlim sendLock = new SemaphoreSlim(1, 1); // one send at a time on a socket
        string token;
        bool stopping; // under gate: StopAsync under way, no new attempt
        string stopReason; // set when the client stops by itself (1008, a newer protocol)
        bool renewed; // a token was renewed and no welcome has accepted it yet
        long lastSeen; // Clock ticks of the last frame received (read by the heartbeat)
        int? receivedClose; // the close frame of the connection in hand, as it arrived
        string receivedReason;
        // the gateway's last `closing` message on the connection in hand: the close it announced
        // just before its close frame, which mono's ClientWebSocket cannot read when the code is
        // 1012 or 1013 (ReceiveAsync throws: its IsValidCloseStatus knows only the enum's codes)
        int? announcedClose;
        string announcedReason;

        async Task Run(CancellationToken stop)
        {
            bool everLive = false;
            while (!Stopping(stop))
            {
                SetStatus(everLive ? "reconnecting" : "connecting", null, null);
                int? closeCode = null;
                string closeReason = null;
                receivedClose = null;
                receivedReason = null;
                announcedClose = null;
                announcedReason = null;
                double openedAt = -1;
                var ws = new ClientWebSocket();
                try
                {
                    using (var opening = CancellationTokenSource.CreateLinkedTokenSource(stop))
                    {
                        opening.CancelAfter(options.OpenTimeout);
                        await ws.ConnectAsync(uri, opening.Token).ConfigureAwait(false);
                    }
                    openedAt = Now;
                    lock (gate) resyncing.Clear();
                    if (token != null || options.Deltas)
                    {
                        var hello = new Dictionary<string, object> { ["type"] = "hello", ["token"] = token };
                        if (options.Deltas) hello["deltas"] = true;
                        await SendRaw(ws, Json.Write(hello)).ConfigureAwait(false);
                    }
                    everLive |= await Session(ws, stop).ConfigureAwait(false);
                }
                catch (Exception failure) when (failure is WebSocketException || failure is IOException ||
                                                failure is OperationCanceledException || failure is ObjectDisposedException)
                {
                    // refused, reset, timed out, or a dead line the heartbeat cut: try again below
                }
                finally
                {
                    // read here, not only after a clean session: a gateway that closes at once (1013)
                    // can fail the hello's send, and its close code must still set the backoff
                    if (ws.CloseStatus.HasValue)
                    {
                        closeCode = (int)ws.CloseStatus.Value;
                        closeReason = ws.CloseStatusDescription;
                    }
                    else if (receivedClose.HasValue)
                    {
                        closeCode = receivedClose;
                        closeReason = receivedReason;
                    }
                    else if (announcedClose.HasValue)
                    {
                        closeCode = announcedClose;
                        closeReason = announcedReason;
                    }
                    lock (gate) socket = null;
                    FailPending();
                    ws.Dispose();
                }
                if (Stopping(stop) || stopReason != null) break;
                if (closeCode == Policy && !await Renewed(closeReason).ConfigureAwait(false)) break;
                if (openedAt >= 0) backoff.ConnectedFor(Now - openedAt);
                double delay = backoff.NextDelay(closeCode == Policy ? null : closeCode);
                SetStatus("reconnecting", delay, closeReason);
                try
                {
                    await Task.Delay(TimeSpan.FromSeconds(delay), stop).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    break;
                }
            }
            SetStatus("stopped", null, stopReason);
        }

        bool Stopping(CancellationToken stop)
        {
            lock (gate) return stopping || stop.IsCancellationRequested;
        }

        /// <summary>After a 1008 close: whether to go on, with a renewed token.</summary>
        async Task<bool> Renewed(string reason)
        {
            reason = string.IsNullOrEmpty(reason) ? "refused" : reason;
            if (!TokenRefused.Contains(reason) || options.RenewToken == null || renewed)
            {
                stopReason = reason;
                return false;
            }
            renewed = true;
            SetStatus("reconnecting", null, reason);
            string fresh = null;
            try
            {
                fresh = await options.RenewToken().ConfigureAwait(false);
            }
            catch (Exception)
            {
                // a callback that failed has no token to give: stop, saying why
            }
            if (string.IsNullOrEmpty(fresh))
            {
                stopReason = reason;
                return false;
            }
            token = fresh;
            return true;
        }

        /// <summary>Read one connection until it closes; whether it was welcomed.</summary>
        async Task<bool> Session(ClientWebSocket ws, CancellationToken stop)
        {
            var buffer = new byte[16 * 1024];
            var frame = new MemoryStream();
            bool live = false;
            Interlocked.Exchange(ref lastSeen, Clock.ElapsedTicks);
            using (var line = CancellationTokenSource.CreateLinkedTokenSource(stop))
            {
                try
                {
                    while (ws.State == WebSocketState.Open)
                    {
                        frame.SetLength(0);
                        bool tooBig = false;
                        WebSocketReceiveResult part;
                        do
                        {
                            // the heartbeat cancels `line` on a silent line: that aborts this receive
                            part = await ws.ReceiveAsync(new ArraySegment<byte>(buffer), line.Token).ConfigureAwait(false);
                            Interlocked.Exchange(ref lastSeen, Clock.ElapsedTicks);
                            if (part.MessageType == WebSocketMessageType.Close)
                            {
                                // the close frame's code, as received: mono sets ws.CloseStatus only
                                // once the closing handshake completes, which a gateway may not wait for
                                if (part.CloseStatus.HasValue)
                                {
                                    receivedClose = (int)part.CloseStatus.Value;
                                    receivedReason = part.CloseStatusDescription;
                                }
                                await CloseQuietly(ws, WebSocketCloseStatus.NormalClosure).ConfigureAwait(false);
                                return live;
                            }
                            if (frame.Length + part.Count > options.MaxMessageBytes) tooBig = true;
                            else frame.Write(buffer, 0, part.Count);
                        } while (!part.EndOfMessage);
                        if (part.MessageType != WebSocketMessageType.Text || tooBig)
                        {
                            Emit(ClientEvent.OfError("malformed_message", tooBig ? "a message over the size limit" : "a binary frame"));
                            continue;
                        }
                        string text;
                        try
                        {
                            text = Utf8.GetString(frame.GetBuffer(), 0, (int)frame.Length);
                        }
                        catch (ArgumentException)
                        {
                            Emit(ClientEvent.OfError("malformed_message", "a frame that is not UTF-8"));
                            continue;
                        }
                        var msg = Handle(ws, text);
                        if (msg != null && !live && (string)msg["type"] == "welcome")
                        {
                            live = true;
                            OnLive(ws, msg, line);
                        }
                        if (stopReason != null)
                        {
                            await CloseQuietly(ws, WebSocketCloseStatus.NormalClosure).ConfigureAwait(false);
                            return live;
                        }
                    }
                }
                finally
                {
                    line.Cancel(); // the heartbeat goes with the connection
                }
            }
            return live;
        }

        void OnLive(ClientWebSocket ws, Dictionary<string, object> welcomed, CancellationTokenSource line)
        {
            List<string[]> boards;
            lock (gate)
            {
                socket = ws;
                boards = new List<string[]>(subscriptions);
            }
            Connects++;
            SetStatus("live", null, null);
            foreach (var board in boards) Fire(ws, BoardMessage("subscribe", board[0], board[1]));
            double interval = 15, timeout = 30;
            if (welcomed.TryGetValue("heartbeat", out object beat) && beat is Dictionary<string, object> settings)
            {
                interval = Seconds(settings, "interval", interval);
                timeout = Seconds(settings, "timeout", 2 * interval);
            }
            Detach(Heartbeat(ws, interval, timeout, line));
        }

        static double Seconds(Dictionary<string, object> settings, string name, double fallback)
        {
            settings.TryGetValue(name, out object value);
            double seconds = value is long whole ? whole : value is double real ? real : fallback;
            return seconds > 0 ? seconds : fallback;
        }

        /// <summary>
        /// App-level ping every `interval`; a line silent for `timeout` is dead (a tablet in a tunnel
        /// never says goodbye): cancelling `line` aborts the receive, and the loop reconnects.
        /// </summary>
        async Task Heartbeat(ClientWebSocket ws, double interval, double timeout, CancellationTokenSource line)
        {
            try
            {
                while (true)
                {
                    await Task.Delay(TimeSpan.FromSeconds(Math.Min(interval, timeout / 2)), line.Token).ConfigureAwait(false);
                    double silent = (Clock.ElapsedTicks - Interlocked.Read(ref lastSeen)) / (double)System.Diagnostics.Stopwatch.Frequency;
                    if (silent > timeout)
                    {
                        line.Cancel();
                        return;
                    }
                    await SendRaw(ws, "{\"type\":\"ping\"}").ConfigureAwait(false);
                }
            }
            catch (OperationCanceledException)
            {
                // the connection ended
            }
            catch (ObjectDisposedException)
            {
                // the connection ended while a ping was under way
            }
        }

        /// <summary>One text frame: parsed, checked, applied to the state, queued; the message, or null if dropped.</summary>
        Dictionary<string, object> Handle(ClientWebSocket ws, string text)
        {
            Dictionary<string, object> msg;
            try
            {
                msg = Json.ParseObject(text);
            }
            catch (JsonError error)
            {
                Emit(ClientEvent.OfError("malformed_message", error.Message));
                return null;
            }
            if (!(msg.TryGetValue("type", out object type) && type is string kind))
            {
                Emit(ClientEvent.OfError("malformed_message", "a message without a type"));
                return null;
            }
            msg.TryGetValue("id", out object id);
            switch (kind)
            {
                case "welcome":
                    if (msg.TryGetValue("protocol", out object protocol) && !(protocol is long))
                    {
                        Emit(ClientEvent.OfError("malformed_message", "welcome.protocol is not an integer", msg));
                        return null;
                    }
                    if (protocol is long version && version > Protocol)
                    {
                        // a newer protocol may mean something this client would misread: say so, don't guess
                        Emit(ClientEvent.OfError("protocol_version", "the server speaks protocol " + version + ", this client " + Protocol, msg));
                        stopReason = "protocol_version";
                        return null;
                    }
                    lock (gate) welcome = msg;
                    // the gateway greets every socket as a spectator before it reads the hello:
                    // only a welcome that accepted the token proves a renewed one good
                    if (token == null || !Equals(Field(msg, "role"), "spectator")) renewed = false;
                    break;
                case "delta":
                    msg = Applied(ws, msg);
                    if (msg == null) return null;
                    kind = "snapshot";
                    goto case "snapshot";
                case "snapshot":
                    if (!Fresh(msg)) return null;
                    break;
                case "closing":
                    if (!(Field(msg, "code") is long code && code >= 1000 && code <= 4999))
                    {
                        Emit(ClientEvent.OfError("malformed_message", "a closing message without a close code", msg));
                        return null;
                    }
                    announcedClose = (int)code;
                    announcedReason = Field(msg, "reason") as string ?? "";
                    break;
                case "rank":
                    if (id == null && Field(msg, "board") is string board && Field(msg, "window") is string window)
                    {
                        lock (gate) ranks[Key(board, window)] = msg;
                    }
                    break;
            }
            if (id != null)
            {
                TaskCompletionSource<Dictionary<string, object>> waiting = null;
                lock (gate)
                {
                    if (id is string key && pending.TryGetValue(key, out waiting)) pending.Remove(key);
                }
                if (waiting != null)
                {
                    if (kind == "error") waiting.TrySetException(new RequestError(Field(msg, "code") as string ?? "error", Field(msg, "message") as string ?? ""));
                    else waiting.TrySetResult(msg);
                }
                if (kind != "welcome") kind = "reply";
            }
            if (kind == "error") Emit(ClientEvent.OfError(Field(msg, "code") as string ?? "error", Field(msg, "message") as string ?? "", msg));
            else Emit(ClientEvent.OfMessage(kind, msg));
            return msg;
        }

        /// <summary>
        /// Keep a snapshot unless it is older than the one held of its board in the same period
        /// (a board's versions never go down; earlier releases restarted them with a new period);
        /// a malformed one is reported and dropped.
        /// </summary>
        bool Fresh(Dictionary<string, object> msg)
        {
            if (!(Field(msg, "board") is string board && Field(msg, "window") is string window &&
                  Field(msg, "version") is long version && Field(msg, "entries") is List<object>))
            {
                Emit(ClientEvent.OfError("malformed_message", "a snapshot without board, window, version or entries", msg));
                return false;
            }
            string key = Key(board, window);
            lock (gate)
            {
                if (snapshots.TryGetValue(key, out var held) && Equals(Field(held, "period"), Field(msg, "period")) &&
                    Field(held, "version") is long heldVersion && version < heldVersion)
                    return false;
                snapshots[key] = msg;
                resyncing.Remove(key);
            }
            return true;
        }

        /// <summary>The snapshot a delta makes of the one held, or null: a duplicate (its version held
        /// already), or one that does not fit (the full snapshot is asked for, once).</summary>
        Dictionary<string, object> Applied(ClientWebSocket ws, Dictionary<string, object> delta)
        {
            if (!(Field(delta, "board") is string board && Field(delta, "window") is string window))
            {
                Emit(ClientEvent.OfError("malformed_message", "a delta without board or window", delta));
                return null;
            }
            string key = Key(board, window);
            Dictionary<string, object> held;
            lock (gate) snapshots.TryGetValue(key, out held);
            if (held != null && Field(delta, "base") is long baseVersion && Field(held, "version") is long version && baseVersion < version)
                return null;
            try
            {
                var snapshot = Delta.Apply(held, delta);
                DeltasApplied++;
                return snapshot;
            }
            catch (DeltaMismatch)
            {
                bool ask;
                lock (gate) ask = resyncing.Add(key);
                if (ask)
                {
                    Resyncs++;
                    Fire(ws, BoardMessage("resync", board, window));
                }
                return null;
            }
        }

        static object Field(Dictionary<string, object> message, string name)
        {
            return message.TryGetValue(name, out object value) ? value : null;
        }

        void FailPending()
        {
            List<TaskCompletionSource<Dictionary<string, object>>> waiting;
            lock (gate)
            {
                waiting = new List<TaskCompletionSource<Dictionary<string, object>>>(pending.Values);
                pending.Clear();
            }
            foreach (var reply in waiting) reply.TrySetException(new RequestError("not_connected", "the connection was lost"));
        }

        /// <summary>Send without waiting; a send on a line going down is lost with it (the loop reconnects).</summary>
        void Fire(ClientWebSocket ws, Dictionary<string, object> message)
        {
            Detach(SendRaw(ws, Json.Write(message)));
        }

        /// <summary>Let a task run on alone; a failure it did not handle is observed here, never rethrown
        /// on the finalizer thread (where it would reach the engine's log as an unobserved exception).</summary>
        static void Detach(Task task)
        {
            task.ContinueWith(t => t.Exception, TaskContinuationOptions.OnlyOnFaulted);
        }

        async Task SendRaw(ClientWebSocket ws, string text)
        {
            var bytes = new ArraySegment<byte>(Utf8.GetBytes(text));
            await sendLock.WaitAsync().ConfigureAwait(false);
            try
            {
                if (ws.State == WebSocketState.Open)
                    await ws.SendAsync(bytes, WebSocketMessageType.Text, true, CancellationToken.None).ConfigureAwait(false);
            }
            catch (Exception failure) when (failure is WebSocketException || failure is IOException ||
                                            failure is ObjectDisposedException || failure is InvalidOperationException)
            {
                // the line is going down: the receive loop sees it and reconnects
            }
            finally
            {
                sendLock.Release();
            }
        }

        async Task CloseQuietly(ClientWebSocket ws, WebSocketCloseStatus code)
        {
            await sendLock.WaitAsync().ConfigureAwait(false);
            try
            {
                if (ws.State == WebSocketState.Open || ws.State == WebSocketState.CloseReceived)
                {
                    using (var bound = new CancellationTokenSource(TimeSpan.FromSeconds(1)))
                        await ws.CloseOutputAsync(code, "", bound.Token).ConfigureAwait(false);
                }
            }
            catch (Exception failure) when (failure is WebSocketException || failure is IOException ||
                                            failure is ObjectDisposedException || failure is OperationCanceledException ||
                                            failure is InvalidOperationException)
            {
                // closing a line that is already gone
            }
            finally
            {
                sendLock.Release();
            }
        }
    }
}
