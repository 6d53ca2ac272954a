/*
 * libFuzzer target: the gateway's HTTP/2 front (h2.c, driven by front.c) as
 * a hostile client meets it. The input is what a client sends on one
 * connection: the preface and frames (or an HTTP/1.1 request asking for
 * h2c), written in pieces to one end of a socketpair whose other end the
 * front serves (front_adopt_fd), the loop run until nothing more happens
 * after each piece. A few leading bytes choose the front's limits, where the
 * pieces break, when the front drains or its timer fires, and how the
 * callback answers each request: at once or later, a reply with or without
 * trailers, or the stream API (open, write, close, abort), or never.
 *
 * Input: limits, flow, events, MODES mode bytes, (pieces - 1) split bytes,
 * then the bytes of the connection (see the bit layouts below). A flow bit
 * sends the client preface first, so that mutations spend themselves on
 * frames; another has the client read nothing until the end, through small
 * socket buffers, so that replies back up in the front.
 *
 * Beyond memory safety and leaks (ASan, LSan, UBSan), it checks that:
 *
 * - every request handed to the callback has a method and a path (starting
 *   with '/', or "*"), a head within head_max, a body within its limit, and
 *   is a stream only on HTTP/2; a connection never has more requests open
 *   in the callback than SETTINGS_MAX_CONCURRENT_STREAMS allows;
 * - a request hears of nothing after it is answered or cancelled (its
 *   record is freed then, so a late data or cancel callback is a
 *   use-after-free), and once the front is freed every request handed out
 *   was answered or cancelled, and nothing of the front is left on the loop;
 * - what the front sends on HTTP/2 (after the 101, on an upgrade) opens with
 *   SETTINGS and is a sequence of well-formed frames of the types a server
 *   sends, on the right streams.
 */
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "front.h"
#include "front_internal.h"
#include "h2.h"
#include "ks_log.h"

#define MODES        4 /* request k is answered as mode byte k % MODES says */
#define HEADER_BYTES (3 + MODES)
#define PIECES_MAX   8
#define OUT_MAX      (1u << 20) /* the front's output kept for the frame walk */
#define BIG_BYTES    70000      /* a body over HTTP/2's initial window (65535) */
#define PENDING_MAX  4096       /* an echoing stream's unsent bytes: past it, aborted */
#define LOOPS_MAX    64         /* loop turns after one piece or event */
#define QUIET_LOOPS  2          /* turns with no output that end a settle */
#define FRAME_HEAD   9
#define UPGRADED     "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"

/* Mode byte: when (bits 0-1), how (2-3), an extra field (4), a big body (5), status (6-7). */
enum { W_NOW, W_PIECE, W_END, W_NEVER };
/*
 * How a unary request is answered: a plain reply, one with trailers, gRPC's
 * Trailers-Only, an error with a body. How a stream is: gw_req_reply before
 * any open (as the handler refuses one), opened at once and closed with
 * trailers at the chosen time (at once: at the end of its body, echoing it),
 * opened, written and closed at the chosen time, opened at once and aborted.
 */
enum { H_PLAIN, H_TRAILERS, H_TRAILERS_ONLY, H_ERROR };
enum { S_REPLY, S_ECHO, S_WHOLE, S_ABORT };

typedef struct held held;
struct held {
        gw_req *r;
        uint8_t when, how, mode;
        bool streaming;
        bool http2;
        held *next;
};

static struct {
        struct event_base *base;
        int base_events; /* events on the loop before a front exists */
        gw_front *front;
        gw_front_limits lim;
        int client;
        uint8_t modes[MODES];
        unsigned dispatched, answered, canceled;
        held *list;
        uint8_t *out;
        size_t out_len;
        bool reading; /* the client reads what the front sends */
        bool trace;   /* FUZZ_H2_TRACE set: one line per input of what happened */
} fz;

static uint8_t big[BIG_BYTES];

static void die(const char *what)
{
        fprintf(stderr, "fuzz_h2: %s\n", what);
        abort();
}

/* ---- requests ------------------------------------------------------------------ */

static void unlink_held(held *x)
{
        for (held **p = &fz.list; *p != NULL; p = &(*p)->next) {
                if (*p == x) {
                        *p = x->next;
                        free(x);
                        return;
                }
        }
        die("a request not in the list");
}

static void answered(held *x)
{
        fz.answered++;
        unlink_held(x);
}

static void on_cancel(void *arg)
{
        fz.canceled++;
        unlink_held(arg);
}

static void unary_reply(held *x)
{
        static const int statuses[] = {200, 304, 404, 503};
        gw_req *r = x->r;
        int status = statuses[x->mode >> 6];
        bool big_body = (x->mode & 0x20) != 0;
        if ((x->mode & 0x10) != 0) {
                gw_req_add_header(r, "X-Fuzz", "1");
                gw_req_add_header(r, "Connection", "close"); /* never sent on HTTP/2 */
                gw_req_add_header(r, "Bad Name", "v");       /* refused */
        }
        switch (x->how) {
        case H_TRAILERS:
                gw_req_add_trailer(r, "grpc-status", "0");
                gw_req_add_trailer(r, "grpc-message", "ok");
                gw_req_reply(r, 200, "application/grpc",
                             big_body ? big : (const uint8_t *)"\0\0\0\0\0",
                             big_body ? BIG_BYTES : 5);
                break;
        case H_TRAILERS_ONLY:
                gw_req_add_trailer(r, "grpc-status", "5");
                gw_req_reply(r, 200, "application/grpc", NULL, 0);
                break;
        case H_ERROR:
                gw_req_reply(r, status, "application/json", "{\"code\":\"x\"}", 12);
                break;
        default:
                gw_req_reply(r, status, big_body ? NULL : "text/plain",
                             big_body ? big : (const uint8_t *)"ok", big_body ? BIG_BYTES : 2);
                break;
        }
        answered(x);
}

static void stream_close(held *x)
{
        gw_req_add_trailer(x->r, "grpc-status", "0");
        gw_req_stream_close(x->r);
        answered(x);
}

/* What x does at its chosen time. */
static void act(held *x)
{
        if (!x->streaming) {
                unary_reply(x);
                return;
        }
        switch (x->how) {
        case S_REPLY:
                unary_reply(x);
                break;
        case S_ECHO:
                stream_close(x);
                break;
        case S_WHOLE:
                gw_req_stream_open(x->r, 200, "application/grpc");
                gw_req_stream_write(x->r, "\0\0\0\0\2hi", 7);
                if ((x->mode & 0x20) != 0) {
                        gw_req_stream_write(x->r, big, BIG_BYTES);
                }
                stream_close(x);
                break;
        default:
                gw_req_stream_abort(x->r);
                answered(x);
                break;
        }
}

static void on_data(const uint8_t *data, size_t len, bool end, void *arg)
{
        held *x = arg;
        if (!x->streaming || (len > 0 && data == NULL) || (end && len > 0)) {
                die("data callback out of its contract");
        }
        if (x->how == S_ECHO && len > 0) {
                if (gw_req_stream_pending(x->r) > PENDING_MAX) {
                        gw_req_stream_abort(x->r); /* as the event hub ends a reader too slow */
                        answered(x);
                        return;
                }
                gw_req_stream_write(x->r, data, len);
        }
        if (x->when != W_NOW) {
                return;
        }
        if ((x->how == S_ECHO && end) || x->how == S_ABORT) {
                act(x);
        }
}

static bool wants_stream(const gw_req *r, void *arg)
{
        (void)arg;
        const char *path = gw_req_path(r);
        if (gw_req_method(r) == NULL || path == NULL || !gw_req_http2(r)) {
                die("a stream asked for without a method or a path, or not on HTTP/2");
        }
        return strncmp(path, "/s", 2) == 0;
}

static void check_request(gw_req *r)
{
        const char *method = gw_req_method(r), *path = gw_req_path(r);
        if (method == NULL || method[0] == '\0' || path == NULL ||
            (path[0] != '/' && strcmp(path, "*") != 0)) {
                die("a request without a method or a path");
        }
        if (gw_req_streaming(r) && !gw_req_http2(r)) {
                die("a stream on HTTP/1.1");
        }
        if (r->h.head_bytes > fz.lim.head_max || r->h.nfields > GW_H1_FIELDS_MAX) {
                die("a head over head_max");
        }
        size_t len = 0, max = fz.lim.body_max;
        const uint8_t *body = gw_req_body(r, &len);
        if (gw_req_http2(r) && fz.lim.grpc_body_max > max) {
                max = fz.lim.grpc_body_max;
        }
        if (body == NULL || len > max || (gw_req_streaming(r) && len > 0)) {
                die("a body over its limit");
        }
        const char *values[4];
        gw_req_header_last(r, "content-type", values, 4);
        (void)gw_req_header(r, "host");
        if (strcmp(gw_req_peer(r), "127.0.0.1") != 0) {
                die("the wrong peer");
        }
}

/* Requests of HTTP/2 open in the callback (not answered, not cancelled). */
static int64_t open_h2(void)
{
        int64_t n = 0;
        for (held *x = fz.list; x != NULL; x = x->next) {
                n += x->http2;
        }
        return n;
}

static void on_request(gw_req *r, void *arg)
{
        (void)arg;
        check_request(r);
        held *x = calloc(1, sizeof(*x));
        if (x == NULL) {
                die("out of memory");
        }
        x->r = r;
        x->mode = fz.modes[fz.dispatched % MODES];
        x->when = x->mode & 3;
        x->how = (x->mode >> 2) & 3;
        x->streaming = gw_req_streaming(r);
        x->http2 = gw_req_http2(r);
        x->next = fz.list;
        fz.list = x;
        fz.dispatched++;
        if (x->http2 && open_h2() > fz.lim.h2_streams_max) {
                die("more requests open on a connection than its streams limit");
        }
        gw_req_on_cancel(r, on_cancel, x);
        if (x->streaming) {
                gw_req_on_data(r, on_data, x);
                if (x->how == S_ECHO || x->how == S_ABORT) {
                        gw_req_stream_open(r, 200, "application/grpc");
                }
                if (x->when == W_NOW && (x->how == S_ECHO || x->how == S_ABORT)) {
                        return; /* on_data ends it */
                }
        }
        if (x->when == W_NOW) {
                act(x);
        }
}

/* Acts on every request waiting for `when` (any act may end others: a reset); how many. */
static int act_held(uint8_t when)
{
        for (int n = 0;; n++) {
                held *x = fz.list;
                while (x != NULL && x->when != when) {
                        x = x->next;
                }
                if (x == NULL) {
                        return n;
                }
                act(x);
        }
}

/* ---- the connection ------------------------------------------------------------- */

/* Reads what the front wrote; the number of bytes. */
static size_t read_output(void)
{
        static uint8_t buf[65536];
        size_t total = 0;
        while (fz.reading) {
                ssize_t n = recv(fz.client, buf, sizeof(buf), MSG_DONTWAIT);
                if (n <= 0) {
                        return total;
                }
                size_t keep = OUT_MAX - fz.out_len < (size_t)n ? OUT_MAX - fz.out_len : (size_t)n;
                memcpy(fz.out + fz.out_len, buf, keep);
                fz.out_len += keep;
                total += (size_t)n;
        }
        return total;
}

/* Runs the loop until the front has nothing more to say. */
static void settle(void)
{
        int quiet = 0;
        for (int i = 0; i < LOOPS_MAX && quiet < QUIET_LOOPS; i++) {
                event_base_loop(fz.base, EVLOOP_NONBLOCK);
                quiet = read_output() > 0 ? 0 : quiet + 1;
        }
}

static void send_piece(const uint8_t *p, size_t len)
{
        while (len > 0) {
                ssize_t n = send(fz.client, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0 && errno == EAGAIN) {
                        /* full: even a client that reads late reads now, or both would wait */
                        bool reading = fz.reading;
                        fz.reading = true;
                        settle();
                        fz.reading = reading;
                        continue;
                }
                if (n <= 0) {
                        return; /* the front closed: the rest is lost, as on a real socket */
                }
                p += n;
                len -= (size_t)n;
        }
}

/* The connection's timer, if set, fires now: as if its time had come. */
static void fire_timer(void)
{
        conn *c = LIST_FIRST(&fz.front->conns);
        if (c != NULL && evtimer_pending(c->timer, NULL)) {
                event_active(c->timer, EV_TIMEOUT, 1);
        }
}

/* ---- what the front sent ---------------------------------------------------------- */

static void check_frames(const uint8_t *p, size_t n)
{
        for (size_t at = 0; n - at >= FRAME_HEAD;) {
                size_t len = (size_t)p[at] << 16 | (size_t)p[at + 1] << 8 | p[at + 2];
                uint8_t type = p[at + 3], flags = p[at + 4];
                uint32_t sid = ((uint32_t)p[at + 5] << 24 | (uint32_t)p[at + 6] << 16 |
                                (uint32_t)p[at + 7] << 8 | p[at + 8]) &
                               0x7fffffffu;
                if (at == 0 && type != 0x4) {
                        die("HTTP/2 output that does not open with SETTINGS");
                }
                bool conn_level = type == 0x4 || type == 0x6 || type == 0x7;
                bool ok = false;
                switch (type) {
                case 0x0: /* DATA */
                case 0x1: /* HEADERS */
                        ok = sid % 2 == 1;
                        break;
                case 0x3: /* RST_STREAM */
                        ok = sid % 2 == 1 && len == 4;
                        break;
                case 0x4: /* SETTINGS */
                        ok = (flags & 1) ? len == 0 : len % 6 == 0;
                        break;
                case 0x6: /* PING */
                        ok = len == 8;
                        break;
                case 0x7: /* GOAWAY */
                        ok = len >= 8;
                        break;
                case 0x8: /* WINDOW_UPDATE */
                        ok = len == 4;
                        break;
                default:
                        break;
                }
                if (!ok || (conn_level && sid != 0)) {
                        die("a malformed frame, or one a server does not send");
                }
                if (fz.trace) {
                        fprintf(stderr, " %u/%u/%zu", type, sid, len);
                }
                if (len > n - at - FRAME_HEAD) {
                        return; /* cut by the close or by OUT_MAX */
                }
                at += FRAME_HEAD + len;
        }
}

static void check_output(bool prior_knowledge)
{
        if (fz.out_len == 0) {
                return;
        }
        if (fz.trace) {
                fprintf(stderr, "%.12s... frames (type/stream/length):", (const char *)fz.out);
        }
        if (prior_knowledge) {
                check_frames(fz.out, fz.out_len);
                return;
        }
        if (fz.out_len >= 9 && memcmp(fz.out, "HTTP/1.1 ", 9) != 0) {
                die("HTTP/1.1 output that does not open with a status line");
        }
        const uint8_t *up = memmem(fz.out, fz.out_len, UPGRADED, sizeof(UPGRADED) - 1);
        if (up != NULL) {
                size_t skip = (size_t)(up - fz.out) + sizeof(UPGRADED) - 1;
                check_frames(up + sizeof(UPGRADED) - 1, fz.out_len - skip);
        }
}

/* ---- the run ---------------------------------------------------------------------- */

/* Limits byte: head_max (bits 0-1), body_max (2-3), gRPC's (4), request_ms (5), streams (6-7). */
static void set_limits(uint8_t b)
{
        static const size_t heads[] = {128, 512, 4096, 16384};
        static const size_t bodies[] = {16, 256, 4096, 65536};
        static const int64_t streams[] = {1, 2, 8, 100};
        fz.lim = (gw_front_limits){
            .head_max = heads[b & 3],
            .body_max = bodies[(b >> 2) & 3],
            .grpc_body_max = (b & 0x10) ? 8192 : 0,
            /* 0: every deadline has passed by the next turn of the loop, deterministically */
            .request_ms = (b & 0x20) ? 0 : 3600000,
            .idle_ms = 3600000, /* the idle timer fires only when the input says */
            .conns_max = 4,
            .conns_per_ip_max = 4,
            .h2_streams_max = streams[b >> 6],
        };
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
        (void)argc;
        (void)argv;
        signal(SIGPIPE, SIG_IGN);
        ks_log_init("gateway", KS_LOG_ERROR);
        memset(big, 'x', sizeof(big));
        fz.base = event_base_new();
        fz.out = malloc(OUT_MAX);
        if (fz.base == NULL || fz.out == NULL) {
                die("no event base");
        }
        fz.base_events = event_base_get_num_events(fz.base, EVENT_BASE_COUNT_ADDED);
        fz.trace = getenv("FUZZ_H2_TRACE") != NULL;
        return 0;
}

/*
 * Flow byte: pieces - 1 (bits 0-2), the client closes its side after the
 * last piece (3), streams wanted (4), the client preface (the magic and an
 * empty SETTINGS) sent before the input (5), the client reads nothing until
 * the end and the socket buffers are small, so replies back up in the front
 * (6).
 */
#define F_EOF       0x08
#define F_STREAMS   0x10
#define F_PREFACE   0x20
#define F_NO_READ   0x40
#define SMALL_BYTES 4096

static void open_connection(uint8_t flow)
{
        static const uint8_t settings[FRAME_HEAD] = {0, 0, 0, 0x4, 0, 0, 0, 0, 0};
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 ||
            gw_front_new(&fz.front, fz.base, "127.0.0.1", 0, &fz.lim, on_request, NULL) != 0) {
                die("no socketpair or front");
        }
        if (flow & F_STREAMS) {
                gw_front_set_streaming(fz.front, wants_stream, NULL);
        }
        fz.client = sv[1];
        fz.reading = (flow & F_NO_READ) == 0;
        if (!fz.reading) {
                int small = SMALL_BYTES;
                setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
                setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
        }
        if (front_adopt_fd(fz.front, sv[0], "127.0.0.1") != 0) {
                die("front_adopt_fd failed");
        }
        if (flow & F_PREFACE) {
                send_piece((const uint8_t *)GW_H2_PREFACE, GW_H2_PREFACE_LEN);
                send_piece(settings, sizeof(settings));
        }
}

/* Events byte: the piece after which the front drains (bits 0-3), its timer fires (4-7). */
static void send_pieces(const uint8_t *data, size_t size, const uint8_t *split, size_t pieces,
                        uint8_t events)
{
        size_t at = 0;
        for (size_t i = 0; i < pieces; i++) {
                /* each split byte takes its share (of 256) of what is left */
                size_t len = i + 1 == pieces ? size - at : (size - at) * split[i] / 256;
                send_piece(data + at, len);
                at += len;
                settle();
                if (act_held(W_PIECE) > 0) {
                        settle();
                }
                if ((size_t)(events & 15) == i) {
                        gw_front_drain(fz.front);
                        settle();
                }
                if ((size_t)(events >> 4) == i) {
                        fire_timer();
                        settle();
                }
        }
}

static void run(const uint8_t *data, size_t size, uint8_t flow, uint8_t events)
{
        size_t pieces = (size_t)(flow & (PIECES_MAX - 1)) + 1;
        const uint8_t *split = data;
        if (size < pieces - 1) {
                return;
        }
        data += pieces - 1;
        size -= pieces - 1;
        open_connection(flow);
        send_pieces(data, size, split, pieces, events);
        if (flow & F_EOF) {
                shutdown(fz.client, SHUT_WR);
                settle();
        }
        fz.reading = true;
        act_held(W_END);
        settle();
        gw_front_free(fz.front);
        fz.front = NULL;
        event_base_loop(fz.base, EVLOOP_NONBLOCK); /* libevent's deferred frees */
        close(fz.client);
        check_output(
            (flow & F_PREFACE) != 0 ||
            (size >= GW_H2_PREFACE_LEN && memcmp(data, GW_H2_PREFACE, GW_H2_PREFACE_LEN) == 0));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < HEADER_BYTES) {
                return 0;
        }
        set_limits(data[0]);
        memcpy(fz.modes, data + 3, MODES);
        fz.dispatched = fz.answered = fz.canceled = 0;
        fz.out_len = 0;
        run(data + HEADER_BYTES, size - HEADER_BYTES, data[1], data[2]);
        if (fz.trace) {
                fprintf(stderr, "\nrequests %u, answered %u, cancelled %u, output %zu bytes\n",
                        fz.dispatched, fz.answered, fz.canceled, fz.out_len);
        }
        if (fz.list != NULL || fz.dispatched != fz.answered + fz.canceled) {
                die("a request neither answered nor cancelled once the front is freed");
        }
        if (event_base_get_num_events(fz.base, EVENT_BASE_COUNT_ADDED) != fz.base_events) {
                die("events of the front left on the loop");
        }
        return 0;
}
