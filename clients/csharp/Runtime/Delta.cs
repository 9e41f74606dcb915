// Snapshot deltas (docs/protocol.md, "Snapshot deltas"): the next snapshot of a board as a change
// to the one held. Each entry of a delta is an index k into the base's entries (unchanged but for
// its rank, its place in the list), [k, score], {"@": k, fields..., "-": [names removed]}, or a
// new entry as a snapshot carries it. Everything else (period, mode, columns) is the base's.
using System.Collections.Generic;

namespace Leaderboard.Client
{
    /// <summary>The delta does not apply to the snapshot held: the client asks for the full one (resync).</summary>
    public sealed class DeltaMismatch : System.Exception
    {
        public DeltaMismatch(string message) : base(message) { }
    }

    public static class Delta
    {
        /// <summary>The snapshot delta makes of held; throws DeltaMismatch unless held is its base.</summary>
        public static Dictionary<string, object> Apply(Dictionary<string, object> held, Dictionary<string, object> delta)
        {
            if (held == null) throw new DeltaMismatch("no snapshot held");
            foreach (var name in new[] { "board", "window" })
            {
                if (!Equals(Field(held, name), Field(delta, name))) throw new DeltaMismatch("the delta is for another " + name);
            }
            if (!(Field(held, "version") is long version) || !(Field(delta, "base") is long baseVersion) || version != baseVersion)
                throw new DeltaMismatch("the delta applies to another version");
            if (!(Field(held, "ts") is long ts) || !(Field(delta, "dt") is long dt))
                throw new DeltaMismatch("ts and dt must be integers");
            var bases = Field(held, "entries") as List<object>;
            var items = Field(delta, "entries") as List<object>;
            if (bases == null || items == null) throw new DeltaMismatch("entries must be lists");
            var entries = new List<object>(items.Count);
            for (int place = 0; place < items.Count; place++)
            {
                object item = items[place];
                var change = item as Dictionary<string, object>;
                if (change != null && !change.ContainsKey("@"))
                {
                    entries.Add(change); // a new entry, whole
                    continue;
                }
                var pair = item as List<object>;
                object index = item is long ? item : pair != null && pair.Count == 2 ? pair[0] : change != null ? change["@"] : null;
                if (index == null && pair == null && change == null)
                    throw new DeltaMismatch("an entry must be an index, an [index, score] pair or an object");
                if (!(index is long k) || k < 0 || k >= bases.Count || !(bases[(int)k] is Dictionary<string, object> old))
                    throw new DeltaMismatch("an entry's index is out of range");
                var entry = new Dictionary<string, object>(old);
                if (entry.ContainsKey("rank")) entry["rank"] = (long)(place + 1); // its place, unless told otherwise
                if (pair != null) entry["score"] = pair[1];
                else if (change != null)
                {
                    if (change.TryGetValue("-", out object gone) && gone is List<object> names)
                    {
                        foreach (var name in names)
                        {
                            if (name is string s) entry.Remove(s);
                        }
                    }
                    foreach (var field in change)
                    {
                        if (field.Key != "@" && field.Key != "-") entry[field.Key] = field.Value;
                    }
                }
                entries.Add(entry);
            }
            var snapshot = new Dictionary<string, object>(held)
            {
                ["version"] = version + 1,
                ["ts"] = ts + dt,
                ["entries"] = entries,
            };
            return snapshot;
        }

        static object Field(Dictionary<string, object> message, string name)
        {
            return message.TryGetValue(name, out object value) ? value : null;
        }
    }
}
