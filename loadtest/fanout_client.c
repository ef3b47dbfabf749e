/* Taskcast fan-out load client: N WebSocket subscribers on one epoll thread.
 *
 * Built at run time by loadtest/bench_fanout.py (gcc -O2 into a temp dir).
 *
 *   --proto centrifugo  after the upgrade, send ONE frame with the Centrifugo client protocol v2
 *                       connect + subscribe commands (newline-joined, like centrifuge-js); the
 *                       connection counts as ready when the subscribe reply (id 2) arrives.
 *   --proto protobuf    the same over Centrifugo's Protobuf protocol: the upgrade offers the
 *                       `centrifuge-protobuf` subprotocol (a 101 without it counts as failed), the
 *                       connect + subscribe go as varint-length-delimited Commands in ONE binary
 *                       frame, ready on the Reply with id 2 carrying `subscribe` (field 6).
 *   --proto raw         ready right after the upgrade (nchan).
 *   --deflate           offer permessage-deflate at the upgrade; a data frame with RSV1 set is
 *                       inflated (raw DEFLATE, the 0x00 0x00 0xff 0xff tail appended; each message
 *                       on its own, as the server answers server_no_context_takeover) before it is
 *                       split into messages. Link with -lz.
 *   --tokens FILE       idle clients (loadtest/bench_idle.py): one connection per line of FILE, each
 *                       sending ONE connect command carrying that line as its token (JSON protocol, no
 *                       subscribe: the token's channels are subscribed server-side); ready when the
 *                       connect reply (id 1) arrives without an error. -n is the line count.
 *   --source-addresses K  bind connection i (g = --first + i) to 127.0.0.(2 + g mod K), port
 *                       20000 + g / K (SO_REUSEADDR; below 61000): K × 41,000 connections to one
 *                       port, with no ephemeral-port search (at 25,000 connections per address the
 *                       kernel's search took 6 ms per connect). A port that cannot be bound falls
 *                       back to the kernel's choice at connect (IP_BIND_ADDRESS_NO_PORT). 0
 *                       (default): the kernel's choice of address and port (127.0.0.1).
 *   --first G           the global index of this process's first connection (several processes
 *                       share the source ports without colliding).
 *   --port2 P           connect the odd-numbered connections to port P instead of --port (two
 *                       gateway nodes): half of N on each. Counts and latency samples are kept
 *                       per side as well as merged (the merged percentiles are of all samples).
 *
 * Every text frame is split into messages on '\n' (the gateway joins the pushes of one loop tick
 * into one frame). A message whose first bytes contain "t":" is a delivery; on sampled
 * connections (1 in --sample, on each side) the 19-digit CLOCK_MONOTONIC timestamp right after it gives
 * the publish->receive latency. A message that is exactly {} is a Centrifugo server ping and is
 * answered with {}; WebSocket pings (opcode 9) are answered with pongs.
 *
 * Protobuf: the payload bytes of binary frames are one stream of varint-length-delimited Replies
 * (split across frames or reads is fine). Of each Reply the first PBUF bytes are kept and walked
 * just enough: Reply.push (4) -> Push.pub (4) -> Publication.data (4) is a delivery, and the JSON
 * bytes of that data carry the same "t":"<19 digits>" timestamp. An empty Reply is the server's
 * ping and is answered with an empty Command (one 0x00 byte in a binary frame).
 *
 * Control protocol on stdin/stdout (one JSON line each):
 *   prints {"ready": n, "failed": f, "connect_s": x}
 *   reads  "GO <t0_ns> <warm_s> <dur_s> <drain_s>" -> after t0+warm+dur+drain prints {"result": {...}}
 *   reads  "QUIT" (or EOF) -> exits
 * The soft RLIMIT_NOFILE is raised to the hard limit at start.
 * Every wait is bounded (handshakes 30 s per batch; measurement ends at the drain deadline).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define PFX 96
#define MAXSEC 600
#define TS_DIGITS 19
#define PBUF 256

enum { P_JSON = 0, P_RAW = 1, P_PB = 2 };

enum { HS = 0, SUBSCRIBING = 1, OPEN = 2, CLOSED = 3 };

typedef struct {
  int fd, state, sample, side;
  char hs[2048]; int hs_len;
  unsigned char hdr[14]; int hdr_len, hdr_need;
  uint64_t payload_left;
  int op;
  unsigned char ctrl[128]; int ctrl_len;
  char mpfx[PFX]; int mpos; /* current message: first PFX bytes, position */
  /* Protobuf splitter: reading the varint length (pb_body 0) or a body of pb_left more bytes. */
  int pb_body, pb_shift, pb_pos; uint64_t pb_len, pb_left;
  unsigned char pbuf[PBUF]; /* the current Reply's first PBUF bytes */
  int zmsg; unsigned char *zbuf; size_t zlen, zcap; /* the compressed data frame being read */
} conn_t;

static int64_t now_ns(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec; }
static double cpu_s(void) { struct rusage r; getrusage(RUSAGE_SELF, &r); return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6; }

static int64_t t0 = -1, w0, w1, tend;
static uint64_t total, win, bad, pings, other, win_side[2];
static uint64_t wire_win, zframes_win; /* bytes read and compressed frames seen in the window */
static int deflate_on = 0;
static z_stream zs;
static uint64_t per_sec[MAXSEC];
typedef struct { int64_t *v; size_t n, cap; } lat_t;
static lat_t lat, lat_side[2]; /* merged samples, and the same samples per side */
static int n_ready, n_failed, n_closed, pending, ready_side[2];
static int proto = P_JSON;
static char **tokens; /* --tokens: connection i's connect token */

static void lat_add(lat_t *l, int64_t v) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : (1 << 20);
    int64_t *p = realloc(l->v, cap * sizeof(int64_t));
    if (!p) return;
    l->v = p; l->cap = cap;
  }
  l->v[l->n++] = v;
}
static void add_lat(int side, int64_t v) { lat_add(&lat, v); lat_add(&lat_side[side], v); }

/* One masked frame (opcode 0x1 text, 0x2 binary) with a zero mask key. */
static void send_frame(conn_t *c, unsigned char opcode, const void *s, size_t L) {
  unsigned char out[1024]; size_t h;
  if (L > sizeof out - 8) return;
  out[0] = 0x80 | opcode;
  if (L < 126) { out[1] = 0x80 | (unsigned char)L; h = 2; }
  else { out[1] = 0x80 | 126; out[2] = (unsigned char)(L >> 8); out[3] = (unsigned char)L; h = 4; }
  memset(out + h, 0, 4); h += 4; /* zero mask key: payload unchanged */
  memcpy(out + h, s, L);
  if (write(c->fd, out, h + L) < 0) {}
}
static void send_text(conn_t *c, const char *s, size_t L) { send_frame(c, 0x1, s, L); }

static int ep = -1;
static conn_t *cs_base; /* the connection array (a connection's index: c - cs_base) */

static void mark_closed(conn_t *c) {
  if (c->state == SUBSCRIBING || c->state == HS) { n_failed++; pending--; }
  else if (c->state == OPEN) n_closed++;
  c->state = CLOSED;
  if (c->fd >= 0) { epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL); close(c->fd); c->fd = -1; }
}

static void message_done(conn_t *c, int64_t now, int in_win, uint64_t *cnt) {
  int L = c->mpos < PFX ? c->mpos : PFX;
  char *p = c->mpfx;
  c->mpos = 0;
  if (L == 2 && p[0] == '{' && p[1] == '}') { pings++; send_text(c, "{}", 2); return; }
  if (c->state == SUBSCRIBING && tokens) { /* the connect reply is the last step */
    if (L > 8 && !strncmp(p, "{\"id\":1,", 8)) {
      pending--;
      if (memmem(p, L, "\"error\"", 7)) { c->state = CLOSED; n_failed++; }
      else { c->state = OPEN; n_ready++; ready_side[c->side]++; }
    }
    return;
  }
  if (c->state == SUBSCRIBING) {
    if (L > 8 && !strncmp(p, "{\"id\":2,", 8)) {
      pending--;
      if (memmem(p, L, "\"subscribe\"", 11)) { c->state = OPEN; n_ready++; ready_side[c->side]++; }
      else { c->state = CLOSED; n_failed++; }
    } else if (L > 8 && !strncmp(p, "{\"id\":1,", 8) && memmem(p, L, "\"error\"", 7)) {
      pending--; c->state = CLOSED; n_failed++;
    }
    return;
  }
  char *t = memmem(p, L, "\"t\":\"", 5);
  if (!t) { other++; return; }
  (*cnt)++;
  if (c->sample && in_win) {
    char *d = t + 5; int64_t v = 0;
    if (d + TS_DIGITS > p + L) { bad++; return; }
    for (int k = 0; k < TS_DIGITS; k++) {
      if (d[k] < '0' || d[k] > '9') { bad++; return; }
      v = v * 10 + (d[k] - '0');
    }
    add_lat(c->side, now - v);
  }
}

/* Feed payload bytes of a text/binary frame into the message splitter. */
static void text_bytes(conn_t *c, const unsigned char *b, size_t k, int64_t now, int in_win, uint64_t *cnt) {
  while (k) {
    const unsigned char *nl = memchr(b, '\n', k);
    size_t seg = nl ? (size_t)(nl - b) : k;
    if (c->mpos < PFX) {
      size_t m = PFX - c->mpos; if (m > seg) m = seg;
      memcpy(c->mpfx + c->mpos, b, m);
    }
    c->mpos += (int)(seg > 1000000 ? 1000000 : seg);
    if (!nl) return;
    message_done(c, now, in_win, cnt);
    b += seg + 1; k -= seg + 1;
  }
}

/* Protobuf: read a varint at *p (< end); 0 when truncated or over 10 bytes. */
static int pb_varint(const unsigned char **p, const unsigned char *end, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; *p < end && shift < 70; shift += 7) {
    unsigned char b = *(*p)++;
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) { *v = x; return 1; }
  }
  return 0;
}

/* The first field `want` of the message [p, p+n): for wire type 2 its bytes (clamped to what was
 * kept of a long message), for wire type 0 its value. 0 when absent or the bytes are malformed. */
static int pb_field(const unsigned char *p, size_t n, unsigned want, const unsigned char **out, size_t *out_len,
                    uint64_t *value) {
  const unsigned char *end = p + n;
  while (p < end) {
    uint64_t key, v = 0;
    if (!pb_varint(&p, end, &key)) return 0;
    unsigned field = (unsigned)(key >> 3), wt = (unsigned)(key & 7);
    const unsigned char *start = p; size_t len = 0;
    if (wt == 0) { if (!pb_varint(&p, end, &v)) return 0; }
    else if (wt == 1) { if (end - p < 8) return 0; p += 8; }
    else if (wt == 5) { if (end - p < 4) return 0; p += 4; }
    else if (wt == 2) {
      if (!pb_varint(&p, end, &v)) return 0;
      start = p; len = v < (uint64_t)(end - p) ? (size_t)v : (size_t)(end - p);
      p += len;
    } else return 0;
    if (field == want) {
      if (out) *out = start;
      if (out_len) *out_len = len;
      if (value) *value = wt == 0 ? v : 0;
      return 1;
    }
  }
  return 0;
}

static void pb_pong(conn_t *c) { static const unsigned char empty = 0; send_frame(c, 0x2, &empty, 1); }

/* One whole Reply (its first PBUF bytes in c->pbuf, c->pb_len bytes in all). */
static void pb_reply_done(conn_t *c, int64_t now, int in_win, uint64_t *cnt) {
  const unsigned char *p = c->pbuf; size_t L = (size_t)c->pb_pos;
  if (c->pb_len == 0) { pings++; pb_pong(c); return; }
  if (c->state == SUBSCRIBING) {
    uint64_t id = 0;
    pb_field(p, L, 1, NULL, NULL, &id);
    int err = pb_field(p, L, 2, NULL, NULL, NULL);
    if (id == 2) {
      pending--;
      if (!err && pb_field(p, L, 6, NULL, NULL, NULL)) { c->state = OPEN; n_ready++; ready_side[c->side]++; }
      else { c->state = CLOSED; n_failed++; }
    } else if (id == 1 && err) {
      pending--; c->state = CLOSED; n_failed++;
    }
    return;
  }
  const unsigned char *push, *pub, *data; size_t push_len, pub_len, data_len;
  if (!pb_field(p, L, 4, &push, &push_len, NULL) || !pb_field(push, push_len, 4, &pub, &pub_len, NULL)) {
    other++;
    return;
  }
  (*cnt)++;
  if (!c->sample || !in_win) return;
  if (!pb_field(pub, pub_len, 4, &data, &data_len, NULL)) { bad++; return; }
  const char *t = memmem(data, data_len, "\"t\":\"", 5);
  if (!t || (const unsigned char *)t + 5 + TS_DIGITS > data + data_len) { bad++; return; }
  int64_t v = 0;
  for (int k = 0; k < TS_DIGITS; k++) {
    char d = t[5 + k];
    if (d < '0' || d > '9') { bad++; return; }
    v = v * 10 + (d - '0');
  }
  add_lat(c->side, now - v);
}

/* Feed payload bytes of binary frames into the varint-delimited Reply splitter. */
static void pb_bytes(conn_t *c, const unsigned char *b, size_t k, int64_t now, int in_win, uint64_t *cnt) {
  while (k && c->state != CLOSED) {
    if (!c->pb_body) {
      unsigned char x = *b++; k--;
      if (c->pb_shift > 63) { bad++; mark_closed(c); return; }
      c->pb_len |= (uint64_t)(x & 0x7f) << c->pb_shift;
      c->pb_shift += 7;
      if (x & 0x80) continue;
      c->pb_body = 1; c->pb_left = c->pb_len; c->pb_pos = 0;
    } else {
      size_t m = k < c->pb_left ? k : (size_t)c->pb_left;
      if (c->pb_pos < PBUF) {
        size_t keep = PBUF - (size_t)c->pb_pos; if (keep > m) keep = m;
        memcpy(c->pbuf + c->pb_pos, b, keep); c->pb_pos += (int)keep;
      }
      b += m; k -= m; c->pb_left -= m;
    }
    if (c->pb_body && c->pb_left == 0) {
      pb_reply_done(c, now, in_win, cnt);
      c->pb_body = 0; c->pb_shift = 0; c->pb_len = 0;
    }
  }
}

/* Inflate the compressed frame held in c->zbuf and feed its bytes to the splitters. */
static void inflate_frame(conn_t *c, int64_t now, int in_win, uint64_t *cnt) {
  static const unsigned char tail[4] = {0, 0, 0xff, 0xff};
  static unsigned char out[1 << 16];
  if (in_win) zframes_win++;
  if (c->zlen + 4 > c->zcap) {
    unsigned char *p = realloc(c->zbuf, c->zlen + 4); if (!p) { bad++; return; }
    c->zbuf = p; c->zcap = c->zlen + 4;
  }
  memcpy(c->zbuf + c->zlen, tail, 4);
  inflateReset(&zs);
  zs.next_in = c->zbuf; zs.avail_in = (uInt)(c->zlen + 4);
  do {
    zs.next_out = out; zs.avail_out = sizeof out;
    int rc = inflate(&zs, Z_SYNC_FLUSH);
    if (rc != Z_OK && rc != Z_BUF_ERROR && rc != Z_STREAM_END) { bad++; break; }
    size_t got = sizeof out - zs.avail_out;
    if (proto == P_PB) pb_bytes(c, out, got, now, in_win, cnt);
    else text_bytes(c, out, got, now, in_win, cnt);
    if (got == 0) break;
  } while (zs.avail_in > 0 || zs.avail_out == 0);
  c->zlen = 0;
}

static void frame_end(conn_t *c, int64_t now, int in_win, uint64_t *cnt) {
  if (c->zmsg && (c->op == 1 || c->op == 2 || c->op == 0) && (c->hdr[0] & 0x80)) inflate_frame(c, now, in_win, cnt);
  if (c->op == 1 || c->op == 2 || c->op == 0) {
    if (proto != P_PB) message_done(c, now, in_win, cnt); /* Protobuf messages carry their length */
  } else if (c->op == 9) {
    unsigned char out[140]; int L = c->ctrl_len;
    out[0] = 0x8A; out[1] = 0x80 | L; memset(out + 2, 0, 4); memcpy(out + 6, c->ctrl, L);
    if (write(c->fd, out, 6 + L) < 0) {}
  } else if (c->op == 8) {
    mark_closed(c);
  }
  c->hdr_len = 0; c->hdr_need = 2; c->ctrl_len = 0;
}

static void parse(conn_t *c, const unsigned char *b, size_t n, int64_t now) {
  size_t i = 0; uint64_t cnt = 0;
  int in_win = (t0 >= 0 && now >= w0 && now < w1);
  if (in_win) wire_win += n;
  while (i < n && c->state != CLOSED) {
    if (c->payload_left == 0 && c->hdr_len < c->hdr_need) {
      c->hdr[c->hdr_len++] = b[i++];
      if (c->hdr_len == 2) {
        int l7 = c->hdr[1] & 0x7f;
        c->hdr_need = 2 + (l7 == 126 ? 2 : (l7 == 127 ? 8 : 0)) + ((c->hdr[1] & 0x80) ? 4 : 0);
      }
      if (c->hdr_len == c->hdr_need) {
        int l7 = c->hdr[1] & 0x7f; uint64_t L = l7;
        if (l7 == 126) L = ((uint64_t)c->hdr[2] << 8) | c->hdr[3];
        else if (l7 == 127) { L = 0; for (int k = 2; k < 10; k++) L = (L << 8) | c->hdr[k]; }
        c->op = c->hdr[0] & 0x0f;
        if (c->op == 1 || c->op == 2) { c->zmsg = (c->hdr[0] & 0x40) != 0; c->zlen = 0; }
        c->payload_left = L;
        if (L == 0) frame_end(c, now, in_win, &cnt);
      }
      continue;
    }
    size_t k = n - i; if (k > c->payload_left) k = c->payload_left;
    if (c->op <= 2 && c->zmsg) {
      if (c->zlen + k > c->zcap) {
        size_t cap = (c->zlen + k) * 2 + 64;
        unsigned char *p = realloc(c->zbuf, cap); if (!p) { bad++; mark_closed(c); return; }
        c->zbuf = p; c->zcap = cap;
      }
      memcpy(c->zbuf + c->zlen, b + i, k); c->zlen += k;
    } else if (c->op <= 2 && proto == P_PB) pb_bytes(c, b + i, k, now, in_win, &cnt);
    else if (c->op <= 2) text_bytes(c, b + i, k, now, in_win, &cnt);
    else if (c->ctrl_len + k <= 125) { memcpy(c->ctrl + c->ctrl_len, b + i, k); c->ctrl_len += (int)k; }
    i += k; c->payload_left -= k;
    if (c->payload_left == 0) frame_end(c, now, in_win, &cnt);
  }
  if (t0 >= 0 && cnt) {
    total += cnt;
    if (in_win) { win += cnt; win_side[c->side] += cnt; }
    int64_t s = (now - t0) / 1000000000LL;
    if (s >= 0 && s < MAXSEC) per_sec[s] += cnt;
  }
}

static void handshake_bytes(conn_t *c, int64_t now, const char *cmd, size_t cmd_len) {
  ssize_t r = read(c->fd, c->hs + c->hs_len, sizeof c->hs - 1 - c->hs_len);
  if (r <= 0) { if (r < 0 && errno == EAGAIN) return; mark_closed(c); return; }
  c->hs_len += (int)r; c->hs[c->hs_len] = 0;
  char *end = strstr(c->hs, "\r\n\r\n");
  if (!end) { if (c->hs_len >= (int)sizeof c->hs - 1) mark_closed(c); return; }
  if (strncmp(c->hs, "HTTP/1.1 101", 12)) { mark_closed(c); return; }
  size_t rest = c->hs_len - (end + 4 - c->hs);
  if (proto == P_PB && !strcasestr(c->hs, "\r\nSec-WebSocket-Protocol: centrifuge-protobuf")) {
    mark_closed(c); /* the server did not take the subprotocol: it would speak JSON */
    return;
  }
  if (proto == P_RAW) { c->state = OPEN; n_ready++; ready_side[c->side]++; pending--; }
  else if (tokens) {
    char one[1000];
    int L = snprintf(one, sizeof one, "{\"id\":1,\"connect\":{\"token\":\"%s\"}}", tokens[c - cs_base]);
    c->state = SUBSCRIBING;
    if (L > 0 && L < (int)sizeof one) send_frame(c, 0x1, one, (size_t)L);
    else mark_closed(c);
  }
  else { c->state = SUBSCRIBING; send_frame(c, proto == P_PB ? 0x2 : 0x1, cmd, cmd_len); }
  if (rest) parse(c, (unsigned char *)end + 4, rest, now);
}

static int cmp64(const void *a, const void *b) { int64_t x = *(const int64_t *)a, y = *(const int64_t *)b; return (x > y) - (x < y); }
static double pct(const lat_t *l, double q) {
  if (!l->n) return -1;
  size_t k = (size_t)(q * (l->n - 1) + 0.5); if (k >= l->n) k = l->n - 1;
  return l->v[k] / 1e6;
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1", *path = "/connection/websocket", *channel = "bench";
  int port = 0, port2 = 0, n = 1000, sample = 10, conc = 200, nsrc = 0, first = 0;
  const char *token_file = NULL;
  for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--deflate")) deflate_on = 1; /* the one flag without a value */
  for (int i = 1; i + 1 < argc; i++) {
    if (!strcmp(argv[i], "--port")) port = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--port2")) port2 = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--host")) host = argv[++i];
    else if (!strcmp(argv[i], "--path")) path = argv[++i];
    else if (!strcmp(argv[i], "--channel")) channel = argv[++i];
    else if (!strcmp(argv[i], "-n")) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tokens")) token_file = argv[++i];
    else if (!strcmp(argv[i], "--source-addresses")) nsrc = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--first")) first = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--sample")) sample = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--concurrency")) conc = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--proto")) {
      const char *v = argv[++i];
      proto = !strcmp(v, "raw") ? P_RAW : !strcmp(v, "protobuf") ? P_PB : P_JSON;
    }
  }
  struct rlimit rl_nofile;
  if (!getrlimit(RLIMIT_NOFILE, &rl_nofile)) { rl_nofile.rlim_cur = rl_nofile.rlim_max; setrlimit(RLIMIT_NOFILE, &rl_nofile); }
  if (token_file) { /* one token a line; -n becomes the line count */
    FILE *f = fopen(token_file, "r");
    if (!f) return 2;
    size_t cap = 1024, k = 0; char line[1000];
    tokens = malloc(cap * sizeof(char *));
    while (tokens && fgets(line, sizeof line, f)) {
      line[strcspn(line, "\r\n")] = 0;
      if (!line[0]) continue;
      if (k == cap) { cap *= 2; tokens = realloc(tokens, cap * sizeof(char *)); if (!tokens) break; }
      tokens[k++] = strdup(line);
    }
    fclose(f);
    if (!tokens || k == 0) return 2;
    n = (int)k;
  }
  if (n < 1 || sample < 1 || conc < 1 || nsrc < 0 || nsrc > 250) return 2;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (inflateInit2(&zs, -15) != Z_OK) return 2;
  char req[2][600], cmd[256]; int rl[2];
  for (int s = 0; s < 2; s++)
    rl[s] = snprintf(req[s], sizeof req[s], "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s%s\r\n", path, host,
                     s && port2 ? port2 : port, proto == P_PB ? "Sec-WebSocket-Protocol: centrifuge-protobuf\r\n" : "",
                     deflate_on ? "Sec-WebSocket-Extensions: permessage-deflate\r\n" : "");
  int cl;
  if (proto == P_PB) { /* Command{id 1, connect{name "bench"}}, Command{id 2, subscribe{channel}} */
    size_t chl = strlen(channel);
    if (chl > 100) return 2;
    unsigned char *o = (unsigned char *)cmd;
    static const unsigned char connect[] = {11, 0x08, 1, 0x22, 7, 0x22, 5, 'b', 'e', 'n', 'c', 'h'};
    memcpy(o, connect, sizeof connect); o += sizeof connect;
    *o++ = (unsigned char)(6 + chl); *o++ = 0x08; *o++ = 2; /* length, id = 2 */
    *o++ = 0x2a; *o++ = (unsigned char)(2 + chl); *o++ = 0x0a; *o++ = (unsigned char)chl; /* subscribe{channel} */
    memcpy(o, channel, chl); o += chl;
    cl = (int)(o - (unsigned char *)cmd);
  } else {
    cl = snprintf(cmd, sizeof cmd, "{\"id\":1,\"connect\":{\"name\":\"bench\"}}\n{\"id\":2,\"subscribe\":{\"channel\":\"%s\"}}", channel);
  }
  conn_t *cs = calloc(n, sizeof(conn_t));
  cs_base = cs;
  ep = epoll_create1(0);
  if (!cs || ep < 0) return 2;
  struct sockaddr_in sa[2] = {{0}};
  for (int s = 0; s < 2; s++) {
    sa[s].sin_family = AF_INET; sa[s].sin_port = htons(s && port2 ? port2 : port); inet_pton(AF_INET, host, &sa[s].sin_addr);
  }
  static unsigned char buf[1 << 18];
  struct epoll_event evs[1024];
  int64_t tc = now_ns();
  for (int base = 0; base < n; base += conc) {  /* connect in bounded batches */
    int hi = base + conc < n ? base + conc : n;
    for (int i = base; i < hi; i++) {
      conn_t *c = &cs[i]; c->hdr_need = 2; c->state = HS;
      c->side = port2 ? (i & 1) : 0;
      c->sample = ((port2 ? i >> 1 : i) % sample == 0); /* 1 in `sample` on each side */
      c->fd = socket(AF_INET, SOCK_STREAM, 0);
      pending++;
      if (c->fd < 0) { mark_closed(c); continue; }
      int one = 1; setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (nsrc) {
        long g = (long)first + i;
        long sport = 20000 + g / nsrc;
        struct sockaddr_in src = {0};
        src.sin_family = AF_INET; src.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)(g % nsrc));
        src.sin_port = htons(sport < 61000 ? (uint16_t)sport : 0);
        setsockopt(c->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (src.sin_port == 0 || bind(c->fd, (struct sockaddr *)&src, sizeof src) < 0) {
          src.sin_port = 0;
          setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
          if (bind(c->fd, (struct sockaddr *)&src, sizeof src) < 0) { mark_closed(c); continue; }
        }
      }
      if (connect(c->fd, (struct sockaddr *)&sa[c->side], sizeof sa[0]) < 0 ||
          write(c->fd, req[c->side], rl[c->side]) != rl[c->side]) {
        mark_closed(c); continue;
      }
      fcntl(c->fd, F_SETFL, O_NONBLOCK);
      struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
      epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }
    int64_t deadline = now_ns() + 30000000000LL;
    while (pending > 0 && now_ns() < deadline) {
      int k = epoll_wait(ep, evs, 1024, 100);
      int64_t now = now_ns();
      for (int e = 0; e < k; e++) {
        conn_t *c = evs[e].data.ptr;
        if (c->state == HS) handshake_bytes(c, now, cmd, cl);
        else if (c->state != CLOSED) {
          ssize_t r = read(c->fd, buf, sizeof buf);
          if (r > 0) parse(c, buf, r, now);
          else if (r == 0 || (errno != EAGAIN && errno != EINTR)) mark_closed(c);
        }
      }
    }
    if (pending > 0) { n_failed += pending; pending = 0; }
  }
  printf("{\"ready\": %d, \"failed\": %d, \"connect_s\": %.3f, \"ready_side\": [%d, %d]}\n", n_ready, n_failed,
         (now_ns() - tc) / 1e9, ready_side[0], ready_side[1]);
  fcntl(0, F_SETFL, O_NONBLOCK);
  struct epoll_event sev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(ep, EPOLL_CTL_ADD, 0, &sev);
  char line[256]; int ll = 0; double cpu0 = 0, cpu1 = 0, dur = 0; int have0 = 0, have1 = 0, closed0 = 0;
  for (;;) {
    int k = epoll_wait(ep, evs, 1024, 5);
    int64_t now = now_ns();
    for (int e = 0; e < k; e++) {
      conn_t *c = evs[e].data.ptr;
      if (!c) {
        ssize_t r = read(0, line + ll, sizeof line - 1 - ll);
        if (r == 0) goto quit;
        if (r < 0) continue;
        ll += (int)r; line[ll] = 0;
        char *nl;
        while ((nl = strchr(line, '\n'))) {
          *nl = 0;
          if (!strncmp(line, "QUIT", 4)) goto quit;
          if (!strncmp(line, "GO ", 3)) {
            long long a; double warm, d, drain;
            if (sscanf(line + 3, "%lld %lf %lf %lf", &a, &warm, &d, &drain) == 4) {
              total = win = bad = pings = other = win_side[0] = win_side[1] = wire_win = zframes_win = 0;
              lat.n = lat_side[0].n = lat_side[1].n = 0; memset(per_sec, 0, sizeof per_sec);
              w0 = a + (int64_t)(warm * 1e9); w1 = w0 + (int64_t)(d * 1e9); tend = w1 + (int64_t)(drain * 1e9);
              dur = d; have0 = have1 = 0; closed0 = n_closed; t0 = a;
            }
          }
          ll -= (int)(nl + 1 - line); memmove(line, nl + 1, ll + 1);
        }
        if (ll >= (int)sizeof line - 1) ll = 0;
        continue;
      }
      if (c->state == CLOSED) continue;
      ssize_t r = read(c->fd, buf, sizeof buf);
      if (r > 0) parse(c, buf, r, now);
      else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        mark_closed(c);
      }
    }
    if (t0 >= 0) {
      now = now_ns();
      if (!have0 && now >= w0) { cpu0 = cpu_s(); have0 = 1; }
      if (!have1 && now >= w1) { cpu1 = cpu_s(); have1 = 1; }
      if (now >= tend) {
        qsort(lat.v, lat.n, sizeof(int64_t), cmp64);
        for (int s = 0; s < 2; s++) qsort(lat_side[s].v, lat_side[s].n, sizeof(int64_t), cmp64);
        int nsec = (int)((tend - t0) / 1000000000LL); if (nsec > MAXSEC) nsec = MAXSEC;
        printf("{\"result\": {\"open\": %d, \"closed_in_step\": %d, \"total\": %llu, \"win\": %llu, \"dur\": %.3f, \"lat_n\": %zu, "
               "\"p50_ms\": %.4f, \"p90_ms\": %.4f, \"p99_ms\": %.4f, \"max_ms\": %.4f, \"client_cpu_pct\": %.1f, "
               "\"bad\": %llu, \"pings\": %llu, \"other\": %llu, \"wire_bytes\": %llu, \"deflated_frames\": %llu, \"sides\": [",
               n_ready - n_closed, n_closed - closed0, (unsigned long long)total, (unsigned long long)win, dur, lat.n,
               pct(&lat, 0.5), pct(&lat, 0.9), pct(&lat, 0.99), lat.n ? lat.v[lat.n - 1] / 1e6 : -1.0,
               dur > 0 ? (cpu1 - cpu0) / dur * 100 : 0.0,
               (unsigned long long)bad, (unsigned long long)pings, (unsigned long long)other,
               (unsigned long long)wire_win, (unsigned long long)zframes_win);
        for (int s = 0; s < 2; s++)
          printf("%s{\"ready\": %d, \"win\": %llu, \"lat_n\": %zu, \"p50_ms\": %.4f, \"p99_ms\": %.4f}", s ? ", " : "",
                 ready_side[s], (unsigned long long)win_side[s], lat_side[s].n, pct(&lat_side[s], 0.5), pct(&lat_side[s], 0.99));
        printf("], \"per_sec\": [");
        for (int s = 0; s < nsec; s++) printf("%s%llu", s ? ", " : "", (unsigned long long)per_sec[s]);
        printf("]}}\n");
        t0 = -1;
      }
    }
  }
quit:
  for (int i = 0; i < n; i++) if (cs[i].fd >= 0) close(cs[i].fd);
  return 0;
}
