/* The floor of the gateway benchmark: the least a process can do to deliver a snapshot.
 *
 *     floor PORT REDIS_HOST REDIS_PORT CHANNEL        (LB_REDIS_PASSWORD: Redis's password, if any)
 *
 * One thread, one epoll. It accepts the benchmark's WebSocket upgrades on 127.0.0.1:PORT (the
 * same clients as every other target: it answers the handshake itself), subscribes to CHANNEL
 * with SSUBSCRIBE, and for each message frames it once (an unmasked text frame) and write()s
 * the same bytes to every open socket in a plain loop. Nothing else: no snapshot on connect, no
 * heartbeat, no flow control, no per-socket buffer. A socket that cannot take a whole frame at
 * once is closed (the benchmark's delivered / expected count shows it). What it costs per
 * delivery is, to within a few hundred nanoseconds, the kernel's work inside write() — on
 * loopback the sending and the receiving TCP stack — which every target pays alike.
 *
 * Two variants isolate what a real server adds around the same loop (bench/gateway.py's targets
 * floor-mt and floor-touch): FLOOR_THREADS=N starts N idle threads, as an event loop's worker pool
 * does (the kernel takes a file reference per write() in a multi-threaded process, none in a
 * single-threaded one); FLOOR_TOUCH=B reads and writes B bytes of the sender's own memory per
 * socket, one byte per cache line in a scattered order, in a pass before each fan-out, as an
 * interpreter's per-socket objects are visited before the writes (their cache misses are user
 * time; what they evict from the caches shows as the writes' system time); FLOOR_GREET=B sends
 * each socket a text frame of B bytes right after its upgrade, as a server's welcome and
 * snapshot on connect are (a socket's TCP state then starts from traffic, not from nothing).
 *
 * bench/gateway.py compiles it on demand with the system's cc (`apt-get install gcc`) into a
 * cache directory outside the repository. Reads from the clients are discarded; bytes from
 * Redis other than the channel's messages (AUTH's +OK, the subscription's confirmation) are
 * parsed and ignored.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX 4096 /* an upgrade request longer than this is refused (closed) */

/* ------------------------------------------------------------------ SHA-1, base64 (RFC 3174, 4648) */

static uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void sha1(const unsigned char *msg, size_t len, unsigned char out[20]) {
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    size_t total = ((len + 8) / 64 + 1) * 64;
    unsigned char buf[256]; /* the handshake's key + GUID: 60 bytes */
    if (total > sizeof buf) abort();
    memset(buf, 0, total);
    memcpy(buf, msg, len);
    buf[len] = 0x80;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) buf[total - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (size_t off = 0; off < total; off += 64) {
        uint32_t w[80];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)buf[off + 4 * i] << 24 | (uint32_t)buf[off + 4 * i + 1] << 16 |
                   (uint32_t)buf[off + 4 * i + 2] << 8 | buf[off + 4 * i + 3];
        for (int i = 16; i < 80; i++) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
        for (int i = 0; i < 80; i++) {
            uint32_t f, k;
            if (i < 20) f = (b & c) | (~b & d), k = 0x5A827999;
            else if (i < 40) f = b ^ c ^ d, k = 0x6ED9EBA1;
            else if (i < 60) f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
            else f = b ^ c ^ d, k = 0xCA62C1D6;
            uint32_t t = rol(a, 5) + f + e + k + w[i];
            e = d, d = c, c = rol(b, 30), b = a, a = t;
        }
        h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
    }
    for (int i = 0; i < 20; i++) out[i] = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
}

static size_t base64(const unsigned char *in, size_t len, char *out) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < len ? in[i + 2] : 0);
        out[o++] = abc[v >> 18 & 63];
        out[o++] = abc[v >> 12 & 63];
        out[o++] = i + 1 < len ? abc[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? abc[v & 63] : '=';
    }
    return o;
}

/* ------------------------------------------------------------------ connections */

enum { FREE = 0, UPGRADING, OPEN };

struct conn {
    unsigned char state;
    int slot;   /* OPEN: index in open_fds */
    char *head; /* UPGRADING: the request read so far (freed once upgraded) */
    int len;
};

static struct conn *conns; /* indexed by descriptor */
static int nconns;
static int *open_fds; /* the sockets a message goes to, in no particular order */
static int nopen;
static int ep;
static size_t greet; /* FLOOR_GREET: bytes of the frame each socket gets once upgraded */

static struct conn *conn_of(int fd) {
    if (fd >= nconns) {
        int n = nconns ? nconns : 1024;
        while (n <= fd) n *= 2;
        conns = realloc(conns, (size_t)n * sizeof *conns);
        open_fds = realloc(open_fds, (size_t)n * sizeof *open_fds);
        if (!conns || !open_fds) abort();
        memset(conns + nconns, 0, (size_t)(n - nconns) * sizeof *conns);
        nconns = n;
    }
    return &conns[fd];
}

static void drop(int fd) {
    struct conn *c = &conns[fd];
    if (c->state == OPEN) { /* the last open socket takes its slot */
        int last = open_fds[--nopen];
        open_fds[c->slot] = last;
        conns[last].slot = c->slot;
    }
    free(c->head);
    memset(c, 0, sizeof *c);
    close(fd);
}

/* The upgrade request is complete: answer it with 101 and the accept value, or close. */
static void upgrade(int fd, struct conn *c) {
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char *key = NULL;
    for (char *line = strstr(c->head, "\r\n"); line && line[2] != '\r'; line = strstr(line + 2, "\r\n"))
        if (strncasecmp(line + 2, "Sec-WebSocket-Key:", 18) == 0) {
            key = line + 20;
            break;
        }
    if (!key) { drop(fd); return; }
    while (*key == ' ') key++;
    size_t klen = strcspn(key, " \r");
    if (klen > 64) { drop(fd); return; }
    unsigned char joined[128], digest[20];
    memcpy(joined, key, klen);
    memcpy(joined + klen, guid, sizeof guid - 1);
    sha1(joined, klen + sizeof guid - 1, digest);
    char reply[256], accept[32];
    accept[base64(digest, 20, accept)] = 0;
    int n = snprintf(reply, sizeof reply,
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Accept: %s\r\n\r\n", accept);
    if (write(fd, reply, (size_t)n) != n) { drop(fd); return; }
    if (greet) {
        static char *hello;
        size_t size = 4 + greet;
        if (!hello) {
            hello = malloc(size);
            if (!hello || greet >= 65536) abort();
            hello[0] = (char)0x81, hello[1] = 126, hello[2] = (char)(greet >> 8), hello[3] = (char)greet;
            memset(hello + 4, ' ', greet);
        }
        if (write(fd, hello, size) != (ssize_t)size) { drop(fd); return; }
    }
    free(c->head);
    c->head = NULL;
    c->state = OPEN;
    c->slot = nopen;
    open_fds[nopen++] = fd;
}

static void readable(int fd) {
    struct conn *c = &conns[fd];
    char scrap[4096];
    for (;;) {
        char *into = scrap;
        size_t room = sizeof scrap;
        if (c->state == UPGRADING) {
            into = c->head + c->len;
            room = HEAD_MAX - 1 - (size_t)c->len;
            if (room == 0) { drop(fd); return; }
        }
        ssize_t n = read(fd, into, room);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) { drop(fd); return; }
        if (n < 0) return;
        if (c->state == UPGRADING) {
            c->len += (int)n;
            c->head[c->len] = 0;
            if (strstr(c->head, "\r\n\r\n")) upgrade(fd, c);
            if (c->state != OPEN) return;
        }
    }
}

static void accept_all(int listener) {
    for (;;) {
        int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        struct conn *c = conn_of(fd);
        c->state = UPGRADING;
        c->head = malloc(HEAD_MAX);
        c->len = 0;
        if (!c->head) abort();
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
}

/* ------------------------------------------------------------------ the fan-out */

static unsigned long short_writes;
static size_t touch; /* FLOOR_TOUCH: bytes of per-socket memory visited before each fan-out */
static unsigned char *touched;
static size_t touched_cap; /* sockets the area has room for */

/* Visit `touch` bytes per open socket, in the order of a hash of the descriptor (no prefetcher
 * streams through it), one read-modify-write per 64-byte line, like a reference count. */
static void touch_all(void) {
    if (!touch) return;
    if ((size_t)nconns > touched_cap) {
        touched = realloc(touched, (size_t)nconns * touch);
        if (!touched) abort();
        memset(touched + touched_cap * touch, 0, ((size_t)nconns - touched_cap) * touch);
        touched_cap = (size_t)nconns;
    }
    for (int i = 0; i < nopen; i++) {
        size_t slot = ((size_t)open_fds[i] * 2654435761u) % touched_cap;
        unsigned char *at = touched + slot * touch;
        for (size_t off = 0; off < touch; off += 64) at[off]++;
    }
}

static void *idle(void *arg) {
    (void)arg;
    for (;;) pause();
    return NULL;
}

static void fan_out(const char *payload, size_t len) {
    static char *frame;
    static size_t cap;
    size_t head = len < 126 ? 2 : len < 65536 ? 4 : 10;
    if (head + len > cap) {
        cap = head + len;
        frame = realloc(frame, cap);
        if (!frame) abort();
    }
    frame[0] = (char)0x81; /* FIN, text */
    if (head == 2) frame[1] = (char)len;
    else if (head == 4) frame[1] = 126, frame[2] = (char)(len >> 8), frame[3] = (char)len;
    else {
        frame[1] = 127;
        for (int i = 0; i < 8; i++) frame[2 + i] = (char)((uint64_t)len >> (56 - 8 * i));
    }
    memcpy(frame + head, payload, len);
    size_t size = head + len;
    touch_all();
    for (int i = 0; i < nopen; i++) {
        int fd = open_fds[i];
        if (write(fd, frame, size) != (ssize_t)size) {
            short_writes++;
            drop(fd); /* its slot now holds another socket: visit it */
            i--;
        }
    }
}

/* ------------------------------------------------------------------ Redis (RESP, just enough) */

/* One RESP value at p (up to end): returns the byte after it, NULL while incomplete. A bulk
 * string's bytes and length go to *s, *slen. */
static const char *resp(const char *p, const char *end, const char **s, long *slen) {
    const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
    if (!eol) return NULL;
    long n = strtol(p + 1, NULL, 10);
    switch (*p) {
    case '$':
        if (n < 0) return eol + 2;
        if (end - (eol + 2) < n + 2) return NULL;
        *s = eol + 2, *slen = n;
        return eol + 2 + n + 2;
    case '*': {
        const char *q = eol + 2;
        for (long i = 0; i < n && q; i++) q = resp(q, end, s, slen);
        return q;
    }
    case '-':
        fprintf(stderr, "floor: redis: %.*s\n", (int)(eol - p - 1), p + 1);
        exit(1);
    default:
        return eol + 2;
    }
}

static char *rbuf;
static size_t rlen, rcap;

static void from_redis(int fd) {
    for (;;) {
        if (rcap - rlen < 65536) {
            rcap = rcap * 2 + 65536;
            rbuf = realloc(rbuf, rcap);
            if (!rbuf) abort();
        }
        ssize_t n = read(fd, rbuf + rlen, rcap - rlen);
        if (n == 0) {
            fprintf(stderr, "floor: redis closed the connection\n");
            exit(1);
        }
        if (n < 0) break;
        rlen += (size_t)n;
    }
    const char *p = rbuf, *end = rbuf + rlen;
    while (p < end) {
        const char *kind = NULL, *s = NULL;
        long kindlen = 0, slen = 0;
        const char *next;
        if (*p == '*' && end - p > 4) { /* a push: [kind, channel, payload] */
            const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
            if (!eol) break;
            next = resp(eol + 2, end, &kind, &kindlen); /* the kind */
            if (next) next = resp(next, end, &s, &slen); /* the channel */
            long items = strtol(p + 1, NULL, 10);
            for (long i = 2; i < items && next; i++) next = resp(next, end, &s, &slen); /* payload */
        } else {
            next = resp(p, end, &s, &slen);
        }
        if (!next) break;
        if (kind && kindlen == 8 && memcmp(kind, "smessage", 8) == 0) fan_out(s, (size_t)slen);
        p = next;
    }
    rlen = (size_t)(end - p);
    memmove(rbuf, p, rlen);
}

static void command(int fd, int argc, const char **argv) {
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        n += snprintf(buf + n, sizeof buf - (size_t)n, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
    if (n >= (int)sizeof buf || write(fd, buf, (size_t)n) != n) {
        fprintf(stderr, "floor: cannot send a command to redis\n");
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: floor PORT REDIS_HOST REDIS_PORT CHANNEL\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN); /* a peer gone: write() fails with EPIPE, the socket is dropped */
    const char *threads = getenv("FLOOR_THREADS"), *bytes = getenv("FLOOR_TOUCH"), *hello = getenv("FLOOR_GREET");
    touch = bytes ? (size_t)strtoul(bytes, NULL, 10) : 0;
    greet = hello ? (size_t)strtoul(hello, NULL, 10) : 0;
    for (int i = 0, n = threads ? atoi(threads) : 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, idle, NULL)) abort();
    }
    ep = epoll_create1(EPOLL_CLOEXEC);

    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1]))};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 4096)) {
        perror("floor: listen");
        return 1;
    }

    int redis = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in raddr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
    if (inet_pton(AF_INET, argv[2], &raddr.sin_addr) != 1 || connect(redis, (struct sockaddr *)&raddr, sizeof raddr)) {
        perror("floor: redis");
        return 1;
    }
    const char *password = getenv("LB_REDIS_PASSWORD");
    if (password && *password) command(redis, 2, (const char *[]){"AUTH", password});
    command(redis, 2, (const char *[]){"SSUBSCRIBE", argv[4]});
    fcntl(redis, F_SETFL, fcntl(redis, F_GETFL) | O_NONBLOCK); /* from here the reads drain what is there */

    struct epoll_event ev = {.events = EPOLLIN, .data.fd = listener};
    epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev);
    ev.data.fd = redis;
    epoll_ctl(ep, EPOLL_CTL_ADD, redis, &ev);

    struct epoll_event ready[512];
    for (;;) {
        int n = epoll_wait(ep, ready, 512, -1);
        for (int i = 0; i < n; i++) {
            int fd = ready[i].data.fd;
            if (fd == listener) accept_all(listener);
            else if (fd == redis) from_redis(redis);
            else if (fd < nconns && conns[fd].state != FREE) readable(fd);
        }
    }
}
