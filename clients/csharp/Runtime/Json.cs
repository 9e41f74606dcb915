// A small, strict JSON reader and writer (RFC 8259): .NET Standard 2.0 has no System.Text.Json,
// and the client must not depend on a third-party package (one assembly for Unity, Godot .NET
// and bots).
//
// Values map to plain .NET objects: an object is a Dictionary<string, object> (key order kept
// is not promised), an array a List<object>, a string a string, true/false a bool, null null,
// a number a long when it is an integer that fits, else a double. Anything else (a trailing
// comma, a leading zero, a lone surrogate, a control character in a string, text after the
// value, nesting deeper than MaxDepth) is a JsonError: the client reports it as an error event
// and reads on.
using System;
using System.Collections;
using System.Collections.Generic;
using System.Globalization;
using System.Text;

namespace Leaderboard.Client
{
    /// <summary>The text is not JSON (or not JSON this reader accepts); Position is where.</summary>
    public sealed class JsonError : FormatException
    {
        public int Position { get; }

        public JsonError(string message, int position) : base(message + " at " + position)
        {
            Position = position;
        }
    }

    public static class Json
    {
        /// <summary>Deeper nesting than this is refused: a hostile frame must not exhaust the stack.</summary>
        public const int MaxDepth = 64;

        public static object Parse(string text)
        {
            if (text == null) throw new ArgumentNullException(nameof(text));
            var reader = new Reader(text);
            reader.SkipSpace();
            object value = reader.Value(0);
            reader.SkipSpace();
            if (!reader.AtEnd) throw reader.Error("text after the value");
            return value;
        }

        /// <summary>Parse text that must be a JSON object.</summary>
        public static Dictionary<string, object> ParseObject(string text)
        {
            var value = Parse(text) as Dictionary<string, object>;
            if (value == null) throw new JsonError("not a JSON object", 0);
            return value;
        }

        public static string Write(object value)
        {
            var sb = new StringBuilder();
            Write(sb, value, 0);
            return sb.ToString();
        }

        static void Write(StringBuilder sb, object value, int depth)
        {
            if (depth > MaxDepth) throw new ArgumentException("nested deeper than " + MaxDepth);
            if (value == null) sb.Append("null");
            else if (value is bool b) sb.Append(b ? "true" : "false");
            else if (value is string s) WriteString(sb, s);
            else if (value is long l) sb.Append(l.ToString(CultureInfo.InvariantCulture));
            else if (value is int i) sb.Append(i.ToString(CultureInfo.InvariantCulture));
            else if (value is double || value is float)
            {
                double d = Convert.ToDouble(value, CultureInfo.InvariantCulture);
                if (double.IsNaN(d) || double.IsInfinity(d)) throw new ArgumentException("JSON has no NaN or infinity");
                sb.Append(d.ToString("R", CultureInfo.InvariantCulture));
            }
            else if (value is IDictionary<string, object> map)
            {
                sb.Append('{');
                bool firstKey = true;
                foreach (var pair in map)
                {
                    if (!firstKey) sb.Append(',');
                    firstKey = false;
                    WriteString(sb, pair.Key);
                    sb.Append(':');
                    Write(sb, pair.Value, depth + 1);
                }
                sb.Append('}');
            }
            else if (value is IEnumerable list)
            {
                sb.Append('[');
                bool firstItem = true;
                foreach (var item in list)
                {
                    if (!firstItem) sb.Append(',');
                    firstItem = false;
                    Write(sb, item, depth + 1);
                }
                sb.Append(']');
            }
            else throw new ArgumentException("no JSON form for " + value.GetType().Name);
        }

        static void WriteString(StringBuilder sb, string s)
        {
            sb.Append('"');
            foreach (char c in s)
            {
                switch (c)
                {
                    case '"': sb.Append("\\\""); break;
                    case '\\': sb.Append("\\\\"); break;
                    case '\n': sb.Append("\\n"); break;
                    case '\r': sb.Append("\\r"); break;
                    case '\t': sb.Append("\\t"); break;
                    default:
                        if (c < 0x20) sb.Append("\\u").Append(((int)c).ToString("x4", CultureInfo.InvariantCulture));
                        else sb.Append(c);
                        break;
                }
            }
            sb.Append('"');
        }

        sealed class Reader
        {
            readonly string text;
            int pos;

            public Reader(string text)
            {
                this.text = text;
            }

            public bool AtEnd => pos >= text.Length;

            public JsonError Error(string what) => new JsonError(what, pos);

            public void SkipSpace()
            {
                while (pos < text.Length)
                {
                    char c = text[pos];
                    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
                    pos++;
                }
            }

            public object Value(int depth)
            {
                if (depth > MaxDepth) throw Error("nested deeper than " + MaxDepth);
                if (AtEnd) throw Error("a value expected");
                char c = text[pos];
                switch (c)
                {
                    case '{': return Object(depth);
                    case '[': return Array(depth);
                    case '"': return String();
                    case 't': Literal("true"); return true;
                    case 'f': Literal("false"); return false;
                    case 'n': Literal("null"); return null;
                    default:
                        if (c == '-' || (c >= '0' && c <= '9')) return Number();
                        throw Error("unexpected character");
                }
            }

            void Literal(string word)
            {
                if (string.CompareOrdinal(text, pos, word, 0, word.Length) != 0) throw Error("unexpected word");
                pos += word.Length;
            }

            void Expect(char c)
            {
                if (AtEnd || text[pos] != c) throw Error("'" + c + "' expected");
                pos++;
            }

            Dictionary<string, object> Object(int depth)
            {
                var map = new Dictionary<string, object>();
                Expect('{');
                if (Empty('}')) return map;
                do
                {
                    SkipSpace();
                    if (AtEnd || text[pos] != '"') throw Error("a string key expected");
                    string key = String();
                    SkipSpace();
                    Expect(':');
                    SkipSpace();
                    map[key] = Value(depth + 1);
                } while (Next('}'));
                return map;
            }

            List<object> Array(int depth)
            {
                var list = new List<object>();
                Expect('[');
                if (Empty(']')) return list;
                do
                {
                    SkipSpace();
                    list.Add(Value(depth + 1));
                } while (Next(']'));
                return list;
            }

            /// <summary>Right after the opening bracket: whether the closing one follows (consumed).</summary>
            bool Empty(char close)
            {
                SkipSpace();
                if (AtEnd || text[pos] != close) return false;
                pos++;
                return true;
            }

            /// <summary>After an element: whether another follows (a comma), else the closing bracket (consumed).</summary>
            bool Next(char close)
            {
                SkipSpace();
                if (!AtEnd && text[pos] == ',')
                {
                    pos++;
                    return true;
                }
                Expect(close);
                return false;
            }

            string String()
            {
                Expect('"');
                var sb = new StringBuilder();
                while (true)
                {
                    if (AtEnd) throw Error("unterminated string");
                    char c = text[pos++];
                    if (c == '"') return sb.ToString();
                    if (c < 0x20) throw Error("a control character in a string");
                    if (char.IsSurrogate(c))
                    {
                        // only a well-formed pair: a lone surrogate is no Unicode text
                        if (!char.IsHighSurrogate(c) || AtEnd || !char.IsLowSurrogate(text[pos])) throw Error("a lone surrogate");
                        sb.Append(c).Append(text[pos++]);
                        continue;
                    }
                    if (c != '\\')
                    {
                        sb.Append(c);
                        continue;
                    }
                    if (AtEnd) throw Error("unterminated escape");
                    char e = text[pos++];
                    switch (e)
                    {
                        case '"': sb.Append('"'); break;
                        case '\\': sb.Append('\\'); break;
                        case '/': sb.Append('/'); break;
                        case 'b': sb.Append('\b'); break;
                        case 'f': sb.Append('\f'); break;
                        case 'n': sb.Append('\n'); break;
                        case 'r': sb.Append('\r'); break;
                        case 't': sb.Append('\t'); break;
                        case 'u':
                            char u = Hex4();
                            if (char.IsHighSurrogate(u))
                            {
                                if (pos + 1 < text.Length && text[pos] == '\\' && text[pos + 1] == 'u')
                                {
                                    pos += 2;
                                    char low = Hex4();
                                    if (!char.IsLowSurrogate(low)) throw Error("a lone surrogate");
                                    sb.Append(u).Append(low);
                                    break;
                                }
                                throw Error("a lone surrogate");
                            }
                            if (char.IsLowSurrogate(u)) throw Error("a lone surrogate");
                            sb.Append(u);
                            break;
                        default:
                            throw Error("an unknown escape");
                    }
                }
            }

            char Hex4()
            {
                if (pos + 4 > text.Length) throw Error("four hex digits expected");
                int value = 0;
                for (int i = 0; i < 4; i++)
                {
                    char h = text[pos++];
                    int digit = h >= '0' && h <= '9' ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                        : -1;
                    if (digit < 0) throw Error("a hex digit expected");
                    value = value * 16 + digit;
                }
                return (char)value;
            }

            object Number()
            {
                int start = pos;
                bool integer = true;
                if (text[pos] == '-') pos++;
                if (AtEnd) throw Error("a digit expected");
                if (text[pos] == '0')
                {
                    pos++;
                    if (!AtEnd && IsDigit(text[pos])) throw Error("a leading zero");
                }
                else Digits();
                if (!AtEnd && text[pos] == '.')
                {
                    integer = false;
                    pos++;
                    Digits();
                }
                if (!AtEnd && (text[pos] == 'e' || text[pos] == 'E'))
                {
                    integer = false;
                    pos++;
                    if (!AtEnd && (text[pos] == '+' || text[pos] == '-')) pos++;
                    Digits();
                }
                string literal = text.Substring(start, pos - start);
                if (integer && long.TryParse(literal, NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out long whole))
                    return whole;
                double real = double.Parse(literal, NumberStyles.Float, CultureInfo.InvariantCulture);
                if (double.IsInfinity(real)) throw Error("a number out of range");
                return real;
            }

            void Digits()
            {
                if (AtEnd || !IsDigit(text[pos])) throw Error("a digit expected");
                while (!AtEnd && IsDigit(text[pos])) pos++;
            }

            static bool IsDigit(char c) => c >= '0' && c <= '9';
        }
    }
}
