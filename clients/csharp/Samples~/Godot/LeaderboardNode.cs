// Godot 4 (.NET): the live top 10 of a board, drained from the client's queue in _Process.
// Not compiled by the project's suite (it needs GodotSharp); the client it uses is.
using System.Collections.Generic;
using Godot;
using Leaderboard.Client;

public partial class LeaderboardNode : Node
{
    [Export] public string Url = "wss://lb.example/ws";
    [Export] public string Board = "global";
    [Export] public string Window = "weekly";

    LeaderboardClient client;

    public override void _Ready()
    {
        // a player token from your game's backend (null: a spectator, who sees the top 10 only)
        client = new LeaderboardClient(Url, new ClientOptions { Token = null });
        client.Subscribe(Board, Window);
        client.Start();
    }

    public override void _Process(double delta)
    {
        foreach (var e in client.Poll())
        {
            if (e.Kind == "status") GD.Print($"leaderboard: {e.Status} {e.Reason}");
            else if (e.Kind == "error") GD.PushWarning($"leaderboard error {e.Code}: {e.Text}");
            else if (e.Kind == "snapshot" && (string)e.Message["board"] == Board && (string)e.Message["window"] == Window)
                foreach (Dictionary<string, object> entry in (List<object>)e.Message["entries"])
                    GD.Print($"#{entry["rank"]} {entry["player"]} {entry["score"]}");
        }
    }

    public override void _ExitTree()
    {
        client?.Dispose();
    }
}
