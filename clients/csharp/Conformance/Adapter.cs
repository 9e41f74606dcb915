// The conformance adapter of the C# client: one client instance driven over stdin/stdout by the
// conformance runner (one JSON object per line each way; stderr is for logs). It forwards what
// the client's application would see, drained from the client's event queue as a game would.
//
//   stdin:  {"cmd":"start","url":…,"token":…,"deltas":…} | subscribe | unsubscribe | request | send | stop
//   stdout: {"event":"ready",…} first, then status, welcome, snapshot, rank, announce, error, reply, …
using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.IO;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Leaderboard.Client;

public static class Adapter
{
    // the client's own answers to requests and heartbeats, and the gateway's close announcements
    // (the client acts on them: its status says so): the runner sees replies as "reply" events
    static readonly HashSet<string> NotForwarded = new HashSet<string> { "reply", "pong", "subscribed", "unsubscribed", "closing" };

    static readonly BlockingCollection<string> Commands = new BlockingCollection<string>();
    static readonly ConcurrentQueue<Dictionary<string, object>> Replies = new ConcurrentQueue<Dictionary<string, object>>();
    static TextWriter output;

    public static int Main()
    {
        output = new StreamWriter(Console.OpenStandardOutput(), new UTF8Encoding(false)) { AutoFlush = true, NewLine = "\n" };
        var input = new StreamReader(Console.OpenStandardInput(), new UTF8Encoding(false));
        var reader = new Thread(() =>
        {
            string line;
            while ((line = input.ReadLine()) != null) Commands.Add(line);
            Commands.CompleteAdding(); // EOF: as a stop
        }) { IsBackground = true };
        reader.Start();
        Write(new Dictionary<string, object>
        {
            ["event"] = "ready",
            ["client"] = "csharp",
            ["version"] = LeaderboardClient.Version,
            ["protocol"] = (long)LeaderboardClient.Protocol,
        });

        LeaderboardClient client = null;
        while (true)
        {
            if (client != null) client.WaitForEvent(5);
            string line = null;
            bool ended = client == null ? !TakeBlocking(out line) : Commands.IsCompleted;
            if (!ended && line == null) Commands.TryTake(out line);
            if (line != null)
            {
                var command = Parse(line);
                string cmd = command != null && command.TryGetValue("cmd", out object c) ? c as string : null;
                if (cmd == "stop") ended = true;
                else if (cmd != null) client = Run(cmd, command, client);
            }
            if (client != null) Forward(client);
            while (Replies.TryDequeue(out var reply)) Write(reply);
            if (ended) break;
        }
        if (client != null)
        {
            client.Stop();
            Forward(client);
            var counts = new Dictionary<string, object> { ["deltas_applied"] = (long)client.DeltasApplied, ["resyncs"] = (long)client.Resyncs };
            Console.Error.WriteLine("adapter: " + Json.Write(counts)); // a log, for whoever drives it by hand
        }
        while (Replies.TryDequeue(out var late)) Write(late);
        Write(new Dictionary<string, object> { ["event"] = "stopped" });
        // Exit now, not by returning: mono's shutdown after Main now and then waits forever for a
        // thread-pool thread the client used (a reconnecting client stopped mid-connect; about one
        // exit in twenty in a loop of stops), and the runner counts an adapter that never exits
        // as a failure. Everything the adapter owes is written and flushed by now.
        output.Flush();
        Environment.Exit(0);
        return 0;
    }

    static bool TakeBlocking(out string line)
    {
        line = null;
        try
        {
            line = Commands.Take();
            return true;
        }
        catch (InvalidOperationException)
        {
            return false; // EOF before a start
        }
    }

    static Dictionary<string, object> Parse(string line)
    {
        try
        {
            return Json.ParseObject(line);
        }
        catch (JsonError error)
        {
            Console.Error.WriteLine("adapter: a command that is not a JSON object: " + error.Message);
            return null;
        }
    }

    static LeaderboardClient Run(string cmd, Dictionary<string, object> command, LeaderboardClient client)
    {
        switch (cmd)
        {
            case "start":
                if (client != null) return client;
                var options = new ClientOptions
                {
                    Token = Field(command, "token") as string,
                    Deltas = !(Field(command, "deltas") is bool deltas) || deltas,
                };
                client = new LeaderboardClient((string)Field(command, "url"), options);
                client.Start();
                return client;
            case "subscribe":
                client?.Subscribe(Field(command, "board") as string ?? "global", Field(command, "window") as string);
                return client;
            case "unsubscribe":
                client?.Unsubscribe(Field(command, "board") as string ?? "global", Field(command, "window") as string);
                return client;
            case "send":
                if (Field(command, "message") is Dictionary<string, object> message) client?.Send(message);
                return client;
            case "request":
                Request(client, Field(command, "ref"), Field(command, "message") as Dictionary<string, object>);
                return client;
            default:
                Console.Error.WriteLine("adapter: unknown command " + cmd);
                return client;
        }
    }

    static void Request(LeaderboardClient client, object reference, Dictionary<string, object> message)
    {
        if (client == null || message == null)
        {
            Replies.Enqueue(new Dictionary<string, object> { ["event"] = "reply_error", ["ref"] = reference, ["code"] = "not_connected" });
            return;
        }
        Task<Dictionary<string, object>> asked;
        try
        {
            asked = client.RequestAsync(message);
        }
        catch (RequestError error)
        {
            Replies.Enqueue(new Dictionary<string, object> { ["event"] = "reply_error", ["ref"] = reference, ["code"] = error.Code });
            return;
        }
        asked.ContinueWith(done =>
        {
            if (done.Status == TaskStatus.RanToCompletion)
                Replies.Enqueue(new Dictionary<string, object> { ["event"] = "reply", ["ref"] = reference, ["message"] = done.Result });
            else
            {
                var error = done.Exception?.InnerException as RequestError;
                Replies.Enqueue(new Dictionary<string, object> { ["event"] = "reply_error", ["ref"] = reference, ["code"] = error?.Code ?? "error" });
            }
        });
    }

    static void Forward(LeaderboardClient client)
    {
        foreach (var e in client.Poll())
        {
            if (e.Kind == "status")
            {
                Write(new Dictionary<string, object>
                {
                    ["event"] = "status",
                    ["status"] = e.Status,
                    ["retry_in"] = e.RetryIn,
                    ["reason"] = e.Reason,
                });
            }
            else if (e.Kind == "error")
            {
                Write(new Dictionary<string, object> { ["event"] = "error", ["code"] = e.Code, ["message"] = e.Text });
            }
            else if (!NotForwarded.Contains(e.Kind))
            {
                Write(new Dictionary<string, object> { ["event"] = e.Kind, ["message"] = e.Message });
            }
        }
    }

    static object Field(Dictionary<string, object> message, string name)
    {
        return message.TryGetValue(name, out object value) ? value : null;
    }

    static void Write(Dictionary<string, object> line)
    {
        output.WriteLine(Json.Write(line));
    }
}
