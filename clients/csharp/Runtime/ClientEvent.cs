using System;
using System.Collections.Generic;
using System.Threading.Tasks;

namespace Leaderboard.Client
{
    /// <summary>
    /// What the client tells the application, drained from its queue on the game's main loop
    /// (LeaderboardClient.Poll). Kind is "status", "error", or the server message's type:
    /// "welcome", "snapshot" (always whole: deltas are applied before), "rank", "announce",
    /// "reply" (an answer to a request), and any type this version does not know by name
    /// (e.g. "overtaken"), so a new push needs no new client.
    /// </summary>
    public sealed class ClientEvent
    {
        public string Kind { get; }

        /// <summary>The server's message (null for a status event and the client's own errors).</summary>
        public Dictionary<string, object> Message { get; }

        /// <summary>status: "connecting", "live", "reconnecting" or "stopped".</summary>
        public string Status { get; }

        /// <summary>status "reconnecting": the seconds until the next attempt (null while connecting).</summary>
        public double? RetryIn { get; }

        /// <summary>status: the close reason or error code behind it (e.g. "invalid_token"), if any.</summary>
        public string Reason { get; }

        /// <summary>error: the stable code ("malformed_message", "protocol_version", or the server's).</summary>
        public string Code { get; }

        /// <summary>error: a human-readable explanation (not to be matched on).</summary>
        public string Text { get; }

        ClientEvent(string kind, Dictionary<string, object> message, string status, double? retryIn, string reason, string code, string text)
        {
            Kind = kind;
            Message = message;
            Status = status;
            RetryIn = retryIn;
            Reason = reason;
            Code = code;
            Text = text;
        }

        public static ClientEvent OfMessage(string kind, Dictionary<string, object> message) =>
            new ClientEvent(kind, message, null, null, null, null, null);

        public static ClientEvent OfStatus(string status, double? retryIn, string reason) =>
            new ClientEvent("status", null, status, retryIn, reason, null, null);

        public static ClientEvent OfError(string code, string text, Dictionary<string, object> message = null) =>
            new ClientEvent("error", message, null, null, null, code, text);
    }

    /// <summary>A request failed: Code is the server's error code, "timeout" or "not_connected".</summary>
    public sealed class RequestError : Exception
    {
        public string Code { get; }

        public RequestError(string code, string message) : base(code + ": " + message)
        {
            Code = code;
        }
    }

    public sealed class ClientOptions
    {
        /// <summary>A player (or server) token signed by the game's backend; null: a spectator.</summary>
        public string Token { get; set; }

        /// <summary>Ask for snapshot deltas (applied here: the application sees whole snapshots either way).</summary>
        public bool Deltas { get; set; } = true;

        public Backoff Backoff { get; set; }

        /// <summary>
        /// Asked once for a new token when the gateway refuses this one (close 1008 invalid_token or
        /// token_expired); null or an exception: the client stops. Called on a background thread.
        /// </summary>
        public Func<Task<string>> RenewToken { get; set; }

        public TimeSpan OpenTimeout { get; set; } = TimeSpan.FromSeconds(5);

        public TimeSpan RequestTimeout { get; set; } = TimeSpan.FromSeconds(5);

        /// <summary>A server message larger than this is dropped and reported (malformed_message).</summary>
        public int MaxMessageBytes { get; set; } = 1 << 20;
    }
}
