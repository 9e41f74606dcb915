// The peers' baseline of the gateway benchmark: the WebSocket fan-out a Node.js developer writes
// with the `ws` library. One Redis sharded pub/sub subscription; every message is sent to every
// open socket with ws.send, which frames it once per socket. No snapshot on connect, no flow
// control, no heartbeat: the same duties as bench/naive_gateway.py.
//
//     LB_REDIS_URL=redis://127.0.0.1:7000/0 node server.js PORT CHANNEL
//
// Redis is spoken over `net` (RESP: AUTH, SSUBSCRIBE, then the pushed messages), so `ws` is the
// one dependency. A message arrives as a string, as a Node Redis client hands it to a subscriber.
'use strict';

const net = require('net');
const { WebSocket, WebSocketServer } = require('ws');

const [port, channel] = process.argv.slice(2);
const url = new URL(process.env.LB_REDIS_URL || 'redis://127.0.0.1:6379/0');
const wss = new WebSocketServer({ host: '127.0.0.1', port: Number(port) });

function command(...args) {
  return `*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('');
}

// One RESP2 value from buf at i: [value, next index], or null while it is incomplete.
function parse(buf, i) {
  const eol = buf.indexOf('\r\n', i);
  if (eol < 0) return null;
  const type = String.fromCharCode(buf[i]);
  const line = buf.toString('latin1', i + 1, eol);
  if (type === '+' || type === ':') return [line, eol + 2];
  if (type === '-') throw new Error(`redis: ${line}`);
  const n = Number(line);
  if (type === '$') return n < 0 ? [null, eol + 2] : buf.length < eol + 4 + n ? null : [buf.subarray(eol + 2, eol + 2 + n), eol + 4 + n];
  const items = []; // '*': an array
  let next = eol + 2;
  for (let k = 0; k < n; k++) {
    const item = parse(buf, next);
    if (item === null) return null;
    items.push(item[0]);
    next = item[1];
  }
  return [items, next];
}

const redis = net.connect(Number(url.port || 6379), url.hostname, () => {
  if (url.password) redis.write(command('AUTH', decodeURIComponent(url.username || 'default'), decodeURIComponent(url.password)));
  redis.write(command('SSUBSCRIBE', channel));
});
let pending = Buffer.alloc(0);
redis.on('data', (chunk) => {
  pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
  let value;
  while ((value = parse(pending, 0)) !== null) {
    pending = pending.subarray(value[1]);
    const [kind, , payload] = Array.isArray(value[0]) ? value[0] : [];
    if (kind && kind.toString() === 'smessage') {
      const data = payload.toString();
      for (const c of wss.clients) if (c.readyState === WebSocket.OPEN) c.send(data);
    }
  }
});
redis.on('error', (err) => { console.error(err.message); process.exit(1); });
redis.on('close', () => process.exit(1));
process.on('SIGTERM', () => process.exit(0));
