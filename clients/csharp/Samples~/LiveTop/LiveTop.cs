// Unity: the live top 10 of a board, drained from the client's queue in Update (main thread).
// Not compiled by the project's suite (it needs UnityEngine); the client it uses is.
using System.Collections.Generic;
using Leaderboard.Client;
using UnityEngine;

public class LiveTop : MonoBehaviour
{
    public string url = "wss://lb.example/ws";
    public string board = "global";
    public string window = "weekly";

    LeaderboardClient client;

    void Start()
    {
        // a player token from your game's backend (null: a spectator, who sees the top 10 only)
        client = new LeaderboardClient(url, new ClientOptions { Token = null });
        client.Subscribe(board, window);
        client.Start();
    }

    void Update()
    {
        foreach (var e in client.Poll())
        {
            if (e.Kind == "status") Debug.Log($"leaderboard: {e.Status} {e.Reason}");
            else if (e.Kind == "error") Debug.LogWarning($"leaderboard error {e.Code}: {e.Text}");
            else if (e.Kind == "snapshot" && (string)e.Message["board"] == board && (string)e.Message["window"] == window)
                foreach (Dictionary<string, object> entry in (List<object>)e.Message["entries"])
                    Debug.Log($"#{entry["rank"]} {entry["player"]} {entry["score"]}");
        }
    }

    void OnDestroy()
    {
        client?.Dispose(); // closes the socket: a stopped play mode leaves no connection behind
    }
}
