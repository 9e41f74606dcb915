// What the conformance adapter cannot show, driven by tests/test_csharp.py:
//   mono Checks.exe backoff               the delays Backoff draws, as JSON lines per case
//   mono Checks.exe renew URL BAD GOOD    a refused token renewed once by RenewToken; prints the events
using System;
using System.Collections.Generic;
using System.Threading.Tasks;
using Leaderboard.Client;

public static class Checks
{
    public static int Main(string[] args)
    {
        if (args.Length == 1 && args[0] == "backoff") return Backoffs();
        if (args.Length == 4 && args[0] == "renew") return Renew(args[1], args[2], args[3]);
        Console.Error.WriteLine("usage: mono Checks.exe backoff | renew URL BAD GOOD");
        return 2;
    }

    static void Print(string name, List<object> values)
    {
        Console.WriteLine(Json.Write(new Dictionary<string, object> { ["case"] = name, ["values"] = values }));
    }

    static int Backoffs()
    {
        const int n = 1000;
        var first = new List<object>();
        var drained = new List<object>();
        var overloaded = new List<object>();
        for (int i = 0; i < n; i++)
        {
            first.Add(new Backoff(new Random(i)).NextDelay(null));
            drained.Add(new Backoff(new Random(i)).NextDelay(Backoff.Draining));
            overloaded.Add(new Backoff(new Random(i)).NextDelay(Backoff.Overloaded));
        }
        Print("first", first);
        Print("1012", drained);
        Print("1013", overloaded);
        var caps = new List<object>();
        var growing = new Backoff(new Random(1));
        for (int i = 0; i < 8; i++)
        {
            caps.Add(growing.Cap);
            growing.NextDelay(null);
        }
        growing.ConnectedFor(9.9);
        caps.Add(growing.Cap); // not yet stable: kept
        growing.ConnectedFor(10);
        caps.Add(growing.Cap); // stable: reset
        Print("caps", caps);
        return 0;
    }

    static int Renew(string url, string bad, string good)
    {
        int asked = 0;
        var options = new ClientOptions
        {
            Token = bad,
            RenewToken = () =>
            {
                asked++;
                return Task.FromResult(good);
            },
        };
        var client = new LeaderboardClient(url, options);
        client.Start();
        while (client.WaitForEvent(10000))
        {
            foreach (var e in client.Poll())
            {
                var line = new Dictionary<string, object> { ["kind"] = e.Kind, ["status"] = e.Status, ["reason"] = e.Reason, ["code"] = e.Code };
                if (e.Kind == "welcome") line["role"] = e.Message["role"];
                Console.WriteLine(Json.Write(line));
                if (e.Kind == "welcome" && (string)e.Message["role"] == "player")
                {
                    client.Stop();
                    Console.WriteLine(Json.Write(new Dictionary<string, object> { ["asked"] = (long)asked }));
                    return 0;
                }
            }
        }
        return 1;
    }
}
