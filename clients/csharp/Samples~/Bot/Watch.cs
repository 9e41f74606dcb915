// A bot that prints the leader of the weekly board and its own rank, then exits:
//   mono Watch.exe ws://127.0.0.1:8000/ws <player token>
using System;
using System.Collections.Generic;
using Leaderboard.Client;

public static class Watch
{
    public static int Main(string[] args)
    {
        if (args.Length != 2)
        {
            Console.Error.WriteLine("usage: mono Watch.exe <ws url> <player token>");
            return 2;
        }
        var client = new LeaderboardClient(args[0], new ClientOptions { Token = args[1] });
        client.Subscribe("global", "weekly");
        client.Start();
        while (client.WaitForEvent(30000)) // a game drains client.Poll() in its frame loop instead
            foreach (var e in client.Poll())
            {
                if (e.Kind == "status" && e.Status == "stopped") return 1; // e.g. a refused token: e.Reason
                if (e.Kind != "snapshot" || (string)e.Message["window"] != "weekly") continue;
                var entries = (List<object>)e.Message["entries"];
                if (entries.Count == 0) continue; // nobody on the board yet
                var leader = (Dictionary<string, object>)entries[0];
                var me = client.RequestAsync(new Dictionary<string, object> { ["type"] = "rank", ["window"] = "weekly" }).Result;
                Console.WriteLine($"v{e.Message["version"]}: leader {leader["player"]}, I am #{me["rank"]} with {me["score"]}");
                client.Stop();
                return 0;
            }
        return 1;
    }
}
