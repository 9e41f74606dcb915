// Reconnect delays: exponential backoff with FULL jitter, as the project's other clients do
// (docs/clients.md). Wait a random time in [0, cap]; the cap doubles from 0.5 s to 20 s and
// resets once a connection stayed up 10 s. Without the randomness every client of a crashed
// gateway would come back at the same instant and knock over the next one.
using System;

namespace Leaderboard.Client
{
    public sealed class Backoff
    {
        public const int Draining = 1012; // the gateway restarts: another one answers at once
        public const int Overloaded = 1013; // the gateway is full: stay away for a while

        public double Base { get; set; } = 0.5;
        public double Ceiling { get; set; } = 20.0;
        public double StableAfter { get; set; } = 10.0;
        public double OverloadFloor { get; set; } = 5.0; // the cap after a 1013, at least
        public double DrainCap { get; set; } = 1.0; // after a 1012: soon, but not all at once

        readonly Random random;
        int attempt;

        public Backoff(Random random = null)
        {
            this.random = random ?? new Random();
        }

        public double Cap => Math.Min(Ceiling, Base * Math.Pow(2.0, attempt));

        /// <summary>The seconds to wait before the next attempt, after a drop with closeCode (null: none).</summary>
        public double NextDelay(int? closeCode)
        {
            if (closeCode == Draining) return random.NextDouble() * DrainCap;
            double cap = Cap;
            if (closeCode == Overloaded) cap = Math.Max(cap, OverloadFloor);
            attempt = Math.Min(attempt + 1, 64); // the cap is long reached; 2^attempt stays finite
            return random.NextDouble() * cap;
        }

        /// <summary>How long the last connection lasted; a stable one resets the cap.</summary>
        public void ConnectedFor(double seconds)
        {
            if (seconds >= StableAfter) attempt = 0;
        }
    }
}
