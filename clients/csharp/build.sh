#!/usr/bin/env bash
# Builds the C# client with Debian's mono (mcs): the library, the conformance adapter and the
# example bot, into OUT (default var/csharp; the suite builds into a temporary directory).
#
# The library is compiled against mono's 4.x profile (mscorlib, System, System.Core), C# 7.2
# (-langversion:7.2, the newest mcs 6.8 takes), and uses only types .NET Standard 2.0 has:
# tests/test_csharp.py checks every type it references against mono's netstandard.dll facade.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/../../var/csharp"}
mkdir -p "$out"
flags=(-langversion:7.2 -warnaserror+ -debug- -optimize+ -nologo)
mcs "${flags[@]}" -target:library -r:System.dll -r:System.Core.dll \
  -out:"$out/Leaderboard.Client.dll" "$here"/Runtime/*.cs
mcs "${flags[@]}" -r:"$out/Leaderboard.Client.dll" -out:"$out/LeaderboardAdapter.exe" "$here/Conformance/Adapter.cs"
mcs "${flags[@]}" -r:"$out/Leaderboard.Client.dll" -out:"$out/Watch.exe" "$here/Samples~/Bot/Watch.cs"
