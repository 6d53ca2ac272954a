/*
 * See front.h. A connection moves through these states:
 *
 *   HEAD -> (BODY | CHUNK_LINE -> CHUNK_DATA -> CHUNK_CRLF ... -> TRAILER)
 *        -> WAITING (the callback has the request) -> HEAD (keep-alive) or CLOSING
 *
 * Timers. One per connection: before a request's first byte, the idle limit
 * (a new connection, or keep-alive between requests); from that byte until
 * the request is complete, the whole-request deadline, which silence or a
 * trickle of bytes cannot extend (a slow client gets 408 and is closed);
 * none while the request waits upstream; KEEP_CLOSING_MS while closing.
 * Writing a reply is bounded by the bufferevent's write timeout (the idle
 * limit).
 *
 * Reading. Head bytes are copied into the connection's head buffer as they
 * arrive and only scanned for line ends once (no quadratic re-parse of a
 * head sent a byte at a time); the strict parser runs when an empty line
 * ends the head. Body bytes move from the socket's buffer into the
 * request's without copying (evbuffer_remove_buffer), so a body sent slowly
 * costs nothing per byte either. The socket's input is capped by a read
 * watermark: a client cannot make one connection buffer more than the
 * request it is allowed.
 *
 * Writing. A client that pipelines requests and does not read the replies
 * is not served past OUTPUT_HIGH_BYTES of replies waiting: the next request
 * is read once they drain to half of that, so no client grows the output
 * without bound.
 *
 * Streams. A streamed reply (gRPC-Web and Connect server streaming) goes
 * out in chunks as it is made, ended by the last chunk (HTTP/1.0: by
 * closing); gw_req_stream_abort drops what the client has not read and
 * closes the connection.
 *
 * Closing. After an error reply, or a reply to a request that asked to
 * close, the connection writes what it has, shuts its sending side and
 * reads (and drops) what the client still sends for up to KEEP_CLOSING_MS:
 * closing with unread bytes would make the kernel send a reset, and the
 * client could lose the reply (RFC 9112 §9.6).
 *
 * Accepting. Over KEELSON_GATEWAY_MAX_CONNECTIONS, or over the per-address
 * cap for a peer that is not a trusted proxy, an accepted socket gets a
 * fixed 503 written without waiting and is closed: no bufferevent, no
 * allocation. When accept() fails for want of descriptors or memory the
 * listener pauses for ACCEPT_PAUSE_MS and tries again; one log line and one
 * count per episode, which ends with the next successful accept.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/listener.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "front_internal.h"
#include "h2.h"
#include "http1.h"
#include "ks_assert.h"
#include "ks_code.h"
#include "ks_hmap.h"
#include "ks_log.h"
#include "ks_metrics.h"
#include "ks_text.h"
#include "tls.h"

#define KEEP_CLOSING_MS   2000
#define ACCEPT_PAUSE_MS   100
#define CHUNK_LINE_MAX    (32 + GW_H1_CHUNK_EXT_MAX) /* hex digits, BWS, extensions, CRLF */
#define INPUT_SLACK_BYTES 65536 /* socket input buffered beyond the head limit */
#define FD_RESERVE        128   /* descriptors kept for everything but client connections */
#define XFF_NAME_MAX      64

static const int error_statuses[STATUS_KINDS] = {400, 408, 413, 417, 431, 501, 503};

/* ---- small helpers -------------------------------------------------------------- */

static const char *reason(int status)
{
        switch (status) {
        case 200:
                return "OK";
        case 304:
                return "Not Modified";
        case 308:
                return "Permanent Redirect";
        case 400:
                return "Bad Request";
        case 401:
                return "Unauthorized";
        case 403:
                return "Forbidden";
        case 404:
                return "Not Found";
        case 405:
                return "Method Not Allowed";
        case 408:
                return "Request Timeout";
        case 409:
                return "Conflict";
        case 412:
                return "Precondition Failed";
        case 413:
                return "Content Too Large";
        case 415:
                return "Unsupported Media Type";
        case 417:
                return "Expectation Failed";
        case 429:
                return "Too Many Requests";
        case 431:
                return "Request Header Fields Too Large";
        case 499:
                return "Client Closed Request";
        case 500:
                return "Internal Server Error";
        case 501:
                return "Not Implemented";
        case 502:
                return "Bad Gateway";
        case 503:
                return "Service Unavailable";
        case 504:
                return "Gateway Timeout";
        default:
                return status < 500 ? "Client Error" : "Server Error";
        }
}

static void ms_timeval(int64_t ms, struct timeval *tv)
{
        tv->tv_sec = (time_t)(ms / 1000);
        tv->tv_usec = (suseconds_t)(ms % 1000) * 1000;
}

static void timer_set(conn *c, int64_t ms)
{
        struct timeval tv;
        ms_timeval(ms, &tv);
        evtimer_add(c->timer, &tv);
}

/* The 16-byte form of a peer (IPv4 mapped into IPv6), and its text. */
static void peer_of(const struct sockaddr *sa, uint8_t addr[16], char text[GW_IP_MAX])
{
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        memset(addr, 0, 16);
        text[0] = '\0';
        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
                memcpy(addr, mapped, sizeof(mapped));
                memcpy(addr + 12, &in->sin_addr, 4);
                inet_ntop(AF_INET, &in->sin_addr, text, GW_IP_MAX);
        } else if (sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
                memcpy(addr, &in6->sin6_addr, 16);
                inet_ntop(AF_INET6, &in6->sin6_addr, text, GW_IP_MAX);
        }
}

/* HTTP-date (RFC 9110 §5.6.7), formatted once per second. */
const char *front_http_date(void)
{
        static char buf[40];
        static time_t at = -1;
        time_t now = time(NULL);
        if (now != at) {
                struct tm tm;
                gmtime_r(&now, &tm);
                strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
                at = now;
        }
        return buf;
}

void front_count_error(gw_front *f, int status)
{
        for (int i = 0; i < STATUS_KINDS; i++) {
                if (error_statuses[i] == status) {
                        ks_counter_inc(f->errors[i]);
                        return;
                }
        }
}

/* ---- per-address counts ----------------------------------------------------------- */

static uint32_t ip_find(gw_front *f, const uint8_t addr[16], uint64_t hash)
{
        for (uint32_t i = ks_hmap_first(&f->by_ip, hash); i != KS_HMAP_NONE;
             i = ks_hmap_next(&f->by_ip, i)) {
                if (memcmp(f->ips[i].addr, addr, 16) == 0) {
                        return i;
                }
        }
        return KS_HMAP_NONE;
}

/* Counts a connection of addr: its slot, or KS_HMAP_NONE when over the cap. */
static uint32_t ip_take(gw_front *f, const uint8_t addr[16])
{
        uint64_t hash = ks_hmap_hash(&f->by_ip, addr, 16);
        uint32_t i = ip_find(f, addr, hash);
        if (i != KS_HMAP_NONE) {
                if (f->ips[i].count >= (uint32_t)f->lim.conns_per_ip_max) {
                        return KS_HMAP_NONE;
                }
                f->ips[i].count++;
                return i;
        }
        if (f->n_free_ips == 0) {
                return KS_HMAP_NONE; /* cannot happen below the global cap */
        }
        i = f->free_ips[--f->n_free_ips];
        memcpy(f->ips[i].addr, addr, 16);
        f->ips[i].count = 1;
        ks_hmap_insert(&f->by_ip, i, hash);
        return i;
}

static void ip_release(gw_front *f, uint32_t i)
{
        if (i == KS_HMAP_NONE || --f->ips[i].count > 0) {
                return;
        }
        ks_hmap_remove(&f->by_ip, i);
        f->free_ips[f->n_free_ips++] = i;
}

/* ---- requests ---------------------------------------------------------------------- */

void front_req_free(gw_req *r)
{
        if (r == NULL) {
                return;
        }
        if (r->body != NULL) {
                evbuffer_free(r->body);
        }
        if (r->out != NULL) {
                evbuffer_free(r->out);
        }
        if (r->trailers != NULL) {
                evbuffer_free(r->trailers);
        }
        free(r->head);
        free(r);
}

/* The path of a request target: origin-form, absolute-form or "*"; NULL if none. */
const char *front_target_path(char *target)
{
        if (target[0] == '/' || strcmp(target, "*") == 0) {
                target[strcspn(target, "?#")] = '\0';
                return target;
        }
        const char *scheme_end = strstr(target, "://");
        if (scheme_end == NULL || scheme_end == target) {
                return NULL;
        }
        char *path = strchr(scheme_end + 3, '/');
        if (path == NULL) {
                return "/";
        }
        path[strcspn(path, "?#")] = '\0';
        return path;
}

/*
 * A request from the parsed head in c->hb: a copy of the head with every
 * name and value NUL-terminated in place (each is followed by a byte that is
 * not part of it: ':', whitespace or CR). NULL: out of memory or a target
 * without a path (*status says which).
 */
static gw_req *req_new(conn *c, const gw_h1_head *h, int *status)
{
        *status = 500;
        gw_req *r = calloc(1, sizeof(*r));
        if (r == NULL || (r->head = malloc(h->head_bytes + 1)) == NULL ||
            (r->body = evbuffer_new()) == NULL || (r->out = evbuffer_new()) == NULL) {
                front_req_free(r);
                return NULL;
        }
        memcpy(r->head, c->hb, h->head_bytes);
        r->head[h->head_bytes] = '\0';
        r->h = *h;
        ptrdiff_t shift = r->head - c->hb;
        r->h.method += shift;
        r->h.target += shift;
        r->head[r->h.method - r->head + (ptrdiff_t)r->h.method_len] = '\0';
        r->head[r->h.target - r->head + (ptrdiff_t)r->h.target_len] = '\0';
        for (size_t i = 0; i < r->h.nfields; i++) {
                gw_h1_field *fl = &r->h.fields[i];
                fl->name += shift;
                fl->value += shift;
                r->head[fl->name - r->head + (ptrdiff_t)fl->name_len] = '\0';
                r->head[fl->value - r->head + (ptrdiff_t)fl->value_len] = '\0';
        }
        r->is_head = strcmp(r->h.method, "HEAD") == 0;
        if ((r->path = front_target_path((char *)r->h.target)) == NULL) {
                *status = 400;
                front_req_free(r);
                return NULL;
        }
        r->c = c;
        return r;
}

const char *gw_req_method(const gw_req *r)
{
        return r->h.method;
}

const char *gw_req_path(const gw_req *r)
{
        return r->path;
}

const char *gw_req_header(const gw_req *r, const char *name)
{
        const gw_h1_field *f = gw_h1_find(&r->h, name);
        return f != NULL ? f->value : NULL;
}

size_t gw_req_header_count(const gw_req *r, const char *name)
{
        return gw_h1_count(&r->h, name);
}

size_t gw_req_header_last(const gw_req *r, const char *name, const char **out, size_t max)
{
        size_t total = gw_h1_count(&r->h, name), skip = total > max ? total - max : 0, n = 0;
        size_t name_len = strlen(name);
        for (size_t i = 0; i < r->h.nfields && n < max; i++) {
                const gw_h1_field *f = &r->h.fields[i];
                if (f->name_len != name_len || strcasecmp(f->name, name) != 0) {
                        continue;
                }
                if (skip > 0) {
                        skip--;
                        continue;
                }
                out[n++] = f->value;
        }
        return n;
}

const char *gw_req_peer(const gw_req *r)
{
        return r->c->peer;
}

const uint8_t *gw_req_body(gw_req *r, size_t *len)
{
        static const uint8_t empty[1] = {0};
        *len = evbuffer_get_length(r->body);
        const uint8_t *p = *len > 0 ? evbuffer_pullup(r->body, -1) : NULL;
        return p != NULL ? p : empty;
}

static bool token_ok(const char *s, bool value)
{
        for (; *s != '\0'; s++) {
                unsigned char ch = (unsigned char)*s;
                if (ch == '\r' || ch == '\n' || ch == '\0' ||
                    (!value && (ch == ':' || ch <= ' '))) {
                        return false;
                }
        }
        return true;
}

void gw_req_add_header(gw_req *r, const char *name, const char *value)
{
        if (name[0] != '\0' && token_ok(name, false) && token_ok(value, true)) {
                evbuffer_add(r->out, name, strlen(name));
                evbuffer_add(r->out, ": ", 2);
                evbuffer_add(r->out, value, strlen(value));
                evbuffer_add(r->out, "\r\n", 2);
        }
}

bool gw_req_http2(const gw_req *r)
{
        return r->h2 != NULL;
}

void gw_front_set_streaming(gw_front *f, gw_front_stream_fn wants, void *arg)
{
        f->wants_stream = wants;
        f->stream_arg = arg;
}

bool gw_req_streaming(const gw_req *r)
{
        return r->h2 != NULL && gw_h2_streaming(r);
}

void gw_req_on_data(gw_req *r, gw_req_data_fn fn, void *arg)
{
        if (r->h2 != NULL) {
                gw_h2_on_data(r, fn, arg);
        }
}

static void h1_stream_open(gw_req *r, int status, const char *content_type);
static void h1_stream_write(gw_req *r, const void *data, size_t len);
static void h1_stream_close(gw_req *r);
static void h1_stream_abort(gw_req *r);

void gw_req_stream_open(gw_req *r, int status, const char *content_type)
{
        if (r->h2 != NULL) {
                gw_h2_stream_open(r, status, content_type);
        } else {
                h1_stream_open(r, status, content_type);
        }
}

void gw_req_stream_write(gw_req *r, const void *data, size_t len)
{
        if (r->h2 != NULL) {
                gw_h2_stream_write(r, data, len);
        } else {
                h1_stream_write(r, data, len);
        }
}

void gw_req_stream_abort(gw_req *r)
{
        if (r->h2 != NULL) {
                gw_h2_stream_abort(r);
        } else {
                h1_stream_abort(r);
        }
}

size_t gw_req_stream_pending(const gw_req *r)
{
        return r->h2 != NULL ? gw_h2_stream_pending(r)
                             : evbuffer_get_length(bufferevent_get_output(r->c->bev));
}

void gw_req_stream_close(gw_req *r)
{
        if (r->h2 != NULL) {
                gw_h2_stream_close(r);
        } else {
                h1_stream_close(r);
        }
}

void gw_req_add_trailer(gw_req *r, const char *name, const char *value)
{
        if (r->h2 == NULL || name[0] == '\0' || !token_ok(name, false) || !token_ok(value, true)) {
                return;
        }
        if (r->trailers == NULL && (r->trailers = evbuffer_new()) == NULL) {
                return;
        }
        evbuffer_add_printf(r->trailers, "%s: %s\r\n", name, value);
}

void gw_req_on_cancel(gw_req *r, void (*fn)(void *arg), void *arg)
{
        r->cancel = fn;
        r->cancel_arg = arg;
}

/* ---- connections ------------------------------------------------------------------ */

static void process(conn *c);

void front_conn_free(conn *c)
{
        gw_front *f = c->f;
        if (c->h2 != NULL) {
                gw_h2_free(c);
        }
        if (c->req != NULL) {
                gw_req *r = c->req;
                c->req = NULL;
                if (r->cancel != NULL) {
                        r->cancel(r->cancel_arg);
                }
                front_req_free(r);
        }
        LIST_REMOVE(c, link);
        f->nconns--;
        ks_gauge_add(f->open_gauge, -1);
        ip_release(f, c->ip_slot);
        if (c->timer != NULL) {
                event_free(c->timer);
        }
        bufferevent_free(c->bev);
        free(c->hb);
        free(c);
        if (f->paused && f->listener != NULL) {
                evconnlistener_enable(f->listener); /* a descriptor is free again */
        }
}

/* Writes what is queued, then stops sending and drops what still comes. */
/* Stops sending: TLS's close_notify first, on a TLS connection. */
static void shut_write(conn *c)
{
        if (c->tls) {
                SSL *ssl = bufferevent_openssl_get_ssl(c->bev);
                if (ssl != NULL) {
                        SSL_shutdown(ssl);
                }
        }
        shutdown(bufferevent_getfd(c->bev), SHUT_WR);
}

void front_conn_close(conn *c)
{
        c->state = C_CLOSING;
        evtimer_del(c->timer);
        timer_set(c, KEEP_CLOSING_MS);
        bufferevent_enable(c->bev, EV_READ);
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
                shut_write(c);
        }
}

int front_error_json(int status, const char *message, char *buf, size_t len)
{
        int code = status == 408                    ? KS_DEADLINE_EXCEEDED
                   : status == 413 || status == 431 ? KS_RESOURCE_EXHAUSTED
                   : status == 501                  ? KS_UNIMPLEMENTED
                   : status == 503                  ? KS_UNAVAILABLE
                                                    : KS_INVALID_ARGUMENT;
        int n =
            snprintf(buf, len, "{\"code\":\"%s\",\"message\":\"%s\"}", ks_code_name(code), message);
        return n < 0 ? 0 : (size_t)n >= len ? (int)len - 1 : n;
}

/* An error the front answers itself: Connect error JSON, then close. */
static void conn_fail(conn *c, int status, const char *message)
{
        char body[192];
        int n = front_error_json(status, message, body, sizeof(body));
        evbuffer_add_printf(bufferevent_get_output(c->bev),
                            "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: application/json\r\n"
                            "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
                            status, reason(status), front_http_date(), n, body);
        front_count_error(c->f, status);
        front_req_free(c->req);
        c->req = NULL;
        front_conn_close(c);
}

static const char *framing_message(int status)
{
        switch (status) {
        case 413:
                return "request body too large";
        case 431:
                return "request header section too large";
        case 501:
                return "transfer coding not implemented";
        default:
                return "malformed HTTP/1.1 request";
        }
}

/* The request is complete: to the callback. */
static void dispatch(conn *c)
{
        c->state = C_WAITING;
        evtimer_del(c->timer);
        c->served++;
        if (gw_h2_wants_upgrade(c->req)) {
                gw_req *r = c->req;
                c->req = NULL;
                if (gw_h2_upgrade(c, r) == 0) {
                        return; /* r is stream 1's now */
                }
                c->req = r; /* not honoured: answered as HTTP/1.1 */
        }
        c->f->fn(c->req, c->f->arg);
}

/* After the head: how the body comes. */
static void body_begin(conn *c)
{
        const gw_h1_head *h = &c->req->h;
        if (h->expect_other) {
                conn_fail(c, 417, "only Expect: 100-continue is supported");
                return;
        }
        bool has_body = h->chunked || h->body_bytes > 0;
        if (h->expect_continue && has_body && h->minor_version == 1) {
                evbuffer_add(bufferevent_get_output(c->bev), "HTTP/1.1 100 Continue\r\n\r\n", 25);
        }
        c->body_bytes = 0;
        c->trailer_bytes = 0;
        if (h->chunked) {
                c->state = C_CHUNK_LINE;
        } else if (h->body_bytes > 0) {
                c->remaining = h->body_bytes;
                c->state = C_BODY;
        } else {
                dispatch(c);
        }
}

/* Parses the head once an empty line has come. */
static void head_end(conn *c)
{
        gw_front *f = c->f;
        gw_h1_head *h = malloc(sizeof(*h));
        if (h == NULL) {
                conn_fail(c, 503, "out of memory");
                return;
        }
        int rv = gw_h1_parse_head(c->hb, c->hb_len, f->lim.head_max, f->lim.body_max, h);
        if (rv == GW_H1_INCOMPLETE) {
                free(h); /* only empty lines so far */
                return;
        }
        if (rv != GW_H1_DONE) {
                free(h);
                conn_fail(c, rv, framing_message(rv));
                return;
        }
        int status = 0;
        c->req = req_new(c, h, &status);
        size_t rest = c->hb_len - h->head_bytes;
        c->keep_alive = h->keep_alive;
        if (c->req != NULL && rest > 0) { /* bytes after the head go back to the input */
                evbuffer_prepend(bufferevent_get_input(c->bev), c->hb + h->head_bytes, rest);
        }
        free(h);
        c->hb_len = 0;
        c->scanned = 0;
        if (c->req == NULL) {
                conn_fail(c, status,
                          status == 400 ? "request target without a path" : "out of memory");
                return;
        }
        body_begin(c);
}

/* Moves head bytes into c->hb; ends the head at the first empty line. */
static void read_head(conn *c, struct evbuffer *in)
{
        size_t cap = c->f->lim.head_max + 1;
        size_t n = evbuffer_get_length(in);
        if (n > cap - c->hb_len) {
                n = cap - c->hb_len;
        }
        if (!c->started && n > 0) {
                c->started = true;
                timer_set(c, c->f->lim.request_ms);
        }
        evbuffer_remove(in, c->hb + c->hb_len, n);
        c->hb_len += n;
        while (c->scanned < c->hb_len) {
                size_t i = c->scanned++;
                if (c->hb[i] != '\n') {
                        continue;
                }
                bool bare = i == 0 || c->hb[i - 1] != '\r';
                bool empty = i == 1 || (i >= 3 && memcmp(c->hb + i - 3, "\r\n\r\n", 4) == 0);
                if (bare || empty) {
                        head_end(c); /* stays in C_HEAD only after leading empty lines */
                        if (c->state != C_HEAD) {
                                return;
                        }
                }
        }
        if (c->state == C_HEAD && c->hb_len == cap) {
                conn_fail(c, 431, framing_message(431));
        }
}

static void read_chunk_line(conn *c, struct evbuffer *in)
{
        size_t n = evbuffer_get_length(in);
        size_t look = n < CHUNK_LINE_MAX ? n : CHUNK_LINE_MAX;
        const char *p = (const char *)evbuffer_pullup(in, (ev_ssize_t)look);
        uint64_t size = 0;
        size_t line = 0;
        int rv = gw_h1_chunk_line(p != NULL ? p : "", look, c->f->lim.body_max - c->body_bytes,
                                  &size, &line);
        if (rv == GW_H1_INCOMPLETE) {
                if (look == CHUNK_LINE_MAX) {
                        conn_fail(c, 400, framing_message(400));
                }
                return;
        }
        if (rv != GW_H1_DONE) {
                conn_fail(c, rv, framing_message(rv));
                return;
        }
        evbuffer_drain(in, line);
        if (size == 0) {
                c->state = C_TRAILER;
                return;
        }
        c->remaining = size;
        c->body_bytes += size;
        c->state = C_CHUNK_DATA;
}

static void read_trailer(conn *c, struct evbuffer *in)
{
        size_t limit = c->f->lim.head_max - c->trailer_bytes;
        size_t n = evbuffer_get_length(in), look = n < limit ? n : limit;
        const char *p = (const char *)evbuffer_pullup(in, (ev_ssize_t)look);
        size_t line = 0;
        bool last = false;
        int rv = gw_h1_trailer_line(p != NULL ? p : "", look, &line, &last);
        if (rv == GW_H1_INCOMPLETE) {
                if (look == limit) {
                        conn_fail(c, 431, framing_message(431));
                }
                return;
        }
        if (rv != GW_H1_DONE) {
                conn_fail(c, rv, framing_message(rv));
                return;
        }
        evbuffer_drain(in, line);
        c->trailer_bytes += line;
        if (last) {
                dispatch(c);
        }
}

/* One step over the input; false when it needs more bytes (or the state waits). */
static bool step(conn *c, struct evbuffer *in)
{
        size_t n = evbuffer_get_length(in);
        conn_state before = c->state;
        switch (c->state) {
        case C_HEAD:
                if (n == 0) {
                        return false;
                }
                if (evbuffer_get_length(bufferevent_get_output(c->bev)) > OUTPUT_HIGH_BYTES) {
                        /* A client that pipelines requests without reading the replies
                         * waits here: on_write goes on once they drain. */
                        return false;
                }
                if (c->served == 0 && !c->started && c->hb_len == 0) {
                        /* The HTTP/2 preface, or the start of one: wait for all 24 bytes. */
                        size_t look = n < GW_H2_PREFACE_LEN ? n : GW_H2_PREFACE_LEN;
                        const void *p = evbuffer_pullup(in, (ev_ssize_t)look);
                        if (p != NULL && memcmp(p, GW_H2_PREFACE, look) == 0) {
                                if (look < GW_H2_PREFACE_LEN) {
                                        return false;
                                }
                                if (gw_h2_start(c) != 0) {
                                        conn_fail(c, 503, "out of memory");
                                        return false;
                                }
                                gw_h2_read(c);
                                return false;
                        }
                }
                read_head(c, in);
                return c->state != before || evbuffer_get_length(in) < n;
        case C_BODY:
        case C_CHUNK_DATA: {
                if (n == 0) {
                        return false;
                }
                size_t take = n < c->remaining ? n : (size_t)c->remaining;
                evbuffer_remove_buffer(in, c->req->body, take);
                c->remaining -= take;
                if (c->remaining == 0) {
                        if (c->state == C_BODY) {
                                dispatch(c);
                        } else {
                                c->state = C_CHUNK_CRLF;
                        }
                }
                return true;
        }
        case C_CHUNK_CRLF: {
                char crlf[2];
                if (n < 2) {
                        return false;
                }
                evbuffer_remove(in, crlf, 2);
                if (crlf[0] != '\r' || crlf[1] != '\n') {
                        conn_fail(c, 400, framing_message(400));
                        return false;
                }
                c->state = C_CHUNK_LINE;
                return true;
        }
        case C_CHUNK_LINE:
                if (n == 0) {
                        return false;
                }
                read_chunk_line(c, in);
                return c->state != before;
        case C_TRAILER:
                if (n == 0) {
                        return false;
                }
                read_trailer(c, in);
                return c->state != before || evbuffer_get_length(in) < n;
        case C_CLOSING:
                evbuffer_drain(in, n);
                return false;
        case C_WAITING:
        default:
                return false;
        }
}

static void process(conn *c)
{
        struct evbuffer *in = bufferevent_get_input(c->bev);
        c->processing = true;
        while (step(c, in)) {
        }
        c->processing = false;
}

/* A part of a reply's head composed in h1_head: the longest is under 100 bytes. */
#define HEAD_PART_MAX 256

/* Appends a literal or a short field (a reason phrase, the date) to a head part. */
static void head_put(char *head, size_t *n, const char *s)
{
        size_t len = strlen(s);
        KS_ASSERT(*n + len <= HEAD_PART_MAX);
        memcpy(head + *n, s, len);
        *n += len;
}

/*
 * An HTTP/1.1 reply's status line and fields. len: its Content-Length, or
 * -1 for a reply streamed in chunks (close-delimited on HTTP/1.0). Returns
 * whether the connection closes after it.
 */
static bool h1_head(gw_req *r, struct evbuffer *out, int status, const char *content_type,
                    int64_t len)
{
        conn *c = r->c;
        bool close = !c->keep_alive || c->f->draining || (len < 0 && r->h.minor_version == 0);
        /* Composed by hand: a printf per field was a tenth of a short reply's cost. */
        char head[HEAD_PART_MAX];
        size_t n = 0;

        head_put(head, &n, "HTTP/1.1 ");
        head[n++] = (char)('0' + status / 100 % 10);
        head[n++] = (char)('0' + status / 10 % 10);
        head[n++] = (char)('0' + status % 10);
        head[n++] = ' ';
        head_put(head, &n, reason(status));
        head_put(head, &n, "\r\nDate: ");
        head_put(head, &n, front_http_date());
        head_put(head, &n, "\r\n");
        evbuffer_add(out, head, n);
        if (content_type != NULL) {
                evbuffer_add(out, "Content-Type: ", 14);
                evbuffer_add(out, content_type, strlen(content_type));
                evbuffer_add(out, "\r\n", 2);
        }
        evbuffer_add_buffer(out, r->out);
        n = 0;
        if (len < 0) {
                if (r->h.minor_version == 1) {
                        head_put(head, &n, "Transfer-Encoding: chunked\r\n");
                }
        } else if (status != 304) { /* a 304 has no body, and no length of one (RFC 9110 §15.4.5) */
                char digits[KS_DECIMAL_MAX];
                ks_fmt_i64(digits, len);
                head_put(head, &n, "Content-Length: ");
                head_put(head, &n, digits);
                head_put(head, &n, "\r\n");
        }
        head_put(head, &n,
                 close                     ? "Connection: close\r\n\r\n"
                 : r->h.minor_version == 0 ? "Connection: keep-alive\r\n\r\n"
                                           : "\r\n");
        evbuffer_add(out, head, n);
        return close;
}

/* The reply to r is all written: r goes; the connection closes or reads the next request. */
static void h1_done(gw_req *r, bool close)
{
        conn *c = r->c;
        c->req = NULL;
        front_req_free(r);
        if (close) {
                front_conn_close(c);
                return;
        }
        c->state = C_HEAD;
        c->started = false;
        timer_set(c, c->f->lim.idle_ms);
        if (!c->processing && evbuffer_get_length(bufferevent_get_input(c->bev)) > 0) {
                bufferevent_trigger(c->bev, EV_READ,
                                    BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
        }
}

/*
 * Where a reply to c is composed: the front's reply buffer when nothing of
 * c's waits to be written and c is plain TCP (write_reply then writes it at
 * once), else c's output.
 */
static struct evbuffer *reply_buffer(conn *c)
{
        struct evbuffer *out = bufferevent_get_output(c->bev);
        return !c->tls && evbuffer_get_length(out) == 0 ? c->f->reply : out;
}

/*
 * A reply composed in reply_buffer's: what the socket takes now is written
 * with one writev, the rest goes to c's output for the bufferevent. Written
 * through the bufferevent, every reply armed the socket's write event, woke
 * on it and disarmed it: two epoll_ctl and a turn of the loop. A failed
 * write leaves the reply to the bufferevent, which meets the error and ends
 * the connection as for any other. False when the rest could not be kept
 * (out of memory): the reply is cut, and the connection must close.
 */
static bool write_reply(conn *c, struct evbuffer *composed)
{
        struct evbuffer *out = bufferevent_get_output(c->bev);
        if (composed == out) {
                return true;
        }
        (void)evbuffer_write(composed, bufferevent_getfd(c->bev));
        if (evbuffer_get_length(composed) > 0 && evbuffer_add_buffer(out, composed) != 0) {
                /* The front's buffer is every reply's: nothing of this one may stay in it. */
                evbuffer_drain(composed, evbuffer_get_length(composed));
                return false;
        }
        return true;
}

void gw_req_reply(gw_req *r, int status, const char *content_type, const void *body, size_t len)
{
        if (r->h2 != NULL) {
                gw_h2_reply(r, status, content_type, body, len);
                return;
        }
        struct evbuffer *out = reply_buffer(r->c);
        bool close = h1_head(r, out, status, content_type, (int64_t)len);
        if (!r->is_head && status != 304 && len > 0) {
                evbuffer_add(out, body, len);
        }
        bool written = write_reply(r->c, out);
        h1_done(r, close || !written);
}

/*
 * Streams on HTTP/1.1 (gRPC-Web and Connect streaming): the reply in
 * chunks, ended by the last chunk; on HTTP/1.0, by closing. The request's
 * body came whole before the callback (gw_req_streaming is false).
 */
static void h1_stream_open(gw_req *r, int status, const char *content_type)
{
        r->h1_close = h1_head(r, bufferevent_get_output(r->c->bev), status, content_type, -1);
        r->h1_open = true;
}

static void h1_stream_write(gw_req *r, const void *data, size_t len)
{
        struct evbuffer *out = bufferevent_get_output(r->c->bev);
        if (!r->h1_open || len == 0) {
                return;
        }
        if (r->h.minor_version == 1) {
                evbuffer_add_printf(out, "%zx\r\n", len);
        }
        evbuffer_add(out, data, len);
        if (r->h.minor_version == 1) {
                evbuffer_add(out, "\r\n", 2);
        }
}

static void h1_stream_close(gw_req *r)
{
        if (!r->h1_open) {
                h1_stream_open(r, 200, NULL);
        }
        if (r->h.minor_version == 1) {
                evbuffer_add(bufferevent_get_output(r->c->bev), "0\r\n\r\n", 5);
        }
        h1_done(r, r->h1_close);
}

/* What waits unwritten is dropped, and the connection closed: the client sees the stream cut. */
static void h1_stream_abort(gw_req *r)
{
        conn *c = r->c;
        struct evbuffer *out = bufferevent_get_output(c->bev);
        evbuffer_drain(out, evbuffer_get_length(out));
        c->req = NULL;
        front_req_free(r);
        front_conn_close(c);
}

static void on_read(struct bufferevent *bev, void *arg)
{
        (void)bev;
        conn *c = arg;
        if (c->h2 != NULL && c->state != C_CLOSING) {
                gw_h2_read(c);
                return;
        }
        process(c);
}

/* The output drained to its low watermark (or emptied). */
static void on_write(struct bufferevent *bev, void *arg)
{
        conn *c = arg;
        if (c->state == C_CLOSING) {
                if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
                        shut_write(c); /* all written */
                }
                return;
        }
        if (c->h2 != NULL) {
                gw_h2_write(c); /* frames held back while the output was full */
                return;
        }
        if (c->state == C_HEAD && !c->processing) {
                process(c); /* pipelined requests held back while replies waited */
        }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
        (void)bev;
        if (what == BEV_EVENT_CONNECTED) {
                return; /* the TLS handshake is done: the request comes next */
        }
        front_conn_free(arg); /* EOF, an error or the write timeout: the connection is done */
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        conn *c = arg;
        if (c->h2 != NULL && c->state != C_CLOSING) {
                gw_h2_timer(c);
                return;
        }
        if (c->state == C_CLOSING || (c->state == C_HEAD && !c->started)) {
                front_conn_free(c);
                return;
        }
        conn_fail(c, 408, "request not received in time");
}

/* ---- accepting ---------------------------------------------------------------------- */

#define REFUSED_BODY "{\"code\":\"unavailable\",\"message\":\"too many connections\"}"

static void refuse(gw_front *f, evutil_socket_t fd, ks_counter *why)
{
        if (f->lim.tls == NULL) { /* a TLS client would read a plaintext reply as an attack */
                ssize_t n =
                    send(fd, f->refused_reply, f->refused_reply_len, MSG_DONTWAIT | MSG_NOSIGNAL);
                (void)n; /* best effort: the client learns why, or sees the close */
        }
        ks_counter_inc(why);
        evutil_closesocket(fd);
}

/* A bufferevent for an accepted socket: OpenSSL's (the handshake first) under TLS. */
static struct bufferevent *bev_new(gw_front *f, evutil_socket_t fd)
{
        if (f->lim.tls == NULL) {
                return bufferevent_socket_new(f->base, fd, BEV_OPT_CLOSE_ON_FREE);
        }
        SSL *ssl = gw_tls_accept(f->lim.tls);
        if (ssl == NULL) {
                return NULL;
        }
        struct bufferevent *bev = bufferevent_openssl_socket_new(
            f->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
        if (bev == NULL) {
                SSL_free(ssl);
                return NULL;
        }
        /* A client that closes without close_notify has still said all it meant to. */
        bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
        return bev;
}

static int conn_start(gw_front *f, evutil_socket_t fd, uint32_t slot, const char *peer);

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
        (void)l;
        (void)salen;
        gw_front *f = arg;
        f->paused = false; /* the episode, if any, is over */
        uint8_t addr[16];
        char peer[GW_IP_MAX];
        peer_of(sa, addr, peer);
        if (f->nconns >= f->lim.conns_max) {
                refuse(f, fd, f->refused_limit);
                return;
        }
        uint32_t slot = KS_HMAP_NONE;
        if (f->lim.proxies == NULL || !gw_proxy_trusted(f->lim.proxies, peer)) {
                if ((slot = ip_take(f, addr)) == KS_HMAP_NONE) {
                        refuse(f, fd, f->refused_address);
                        return;
                }
        }
        conn_start(f, fd, slot, peer);
}

/*
 * A connection on fd (non-blocking), counted under its address's slot:
 * 0, or -1 with fd closed and the slot released.
 */
static int conn_start(gw_front *f, evutil_socket_t fd, uint32_t slot, const char *peer)
{
        conn *c = calloc(1, sizeof(*c));
        if (c == NULL || (c->hb = malloc(f->lim.head_max + 1)) == NULL ||
            (c->bev = bev_new(f, fd)) == NULL ||
            (c->timer = evtimer_new(f->base, on_timer, c)) == NULL) {
                if (c != NULL) {
                        if (c->bev != NULL) {
                                bufferevent_free(c->bev);
                                fd = -1;
                        }
                        free(c->hb);
                        free(c);
                }
                if (fd >= 0) {
                        evutil_closesocket(fd);
                }
                ip_release(f, slot);
                return -1;
        }
        c->f = f;
        c->tls = f->lim.tls != NULL;
        c->ip_slot = slot;
        c->state = C_HEAD;
        c->keep_alive = true;
        snprintf(c->peer, sizeof(c->peer), "%s", peer);
        LIST_INSERT_HEAD(&f->conns, c, link);
        f->nconns++;
        ks_gauge_add(f->open_gauge, 1);
        struct timeval wt;
        ms_timeval(f->lim.idle_ms, &wt);
        bufferevent_set_timeouts(c->bev, NULL, &wt);
        bufferevent_setwatermark(c->bev, EV_READ, 0, f->lim.head_max + INPUT_SLACK_BYTES);
        bufferevent_setwatermark(c->bev, EV_WRITE, OUTPUT_HIGH_BYTES / 2, 0);
        bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
        bufferevent_enable(c->bev, EV_READ | EV_WRITE);
        timer_set(c, f->lim.idle_ms);
        return 0;
}

int front_adopt_fd(gw_front *f, evutil_socket_t fd, const char *peer)
{
        if (f->nconns >= f->lim.conns_max || evutil_make_socket_nonblocking(fd) != 0) {
                evutil_closesocket(fd);
                return -1;
        }
        return conn_start(f, fd, KS_HMAP_NONE, peer);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        gw_front *f = arg;
        if (f->listener != NULL && !f->draining) {
                evconnlistener_enable(f->listener);
        }
}

static void on_accept_error(struct evconnlistener *l, void *arg)
{
        gw_front *f = arg;
        int err = EVUTIL_SOCKET_ERROR();
        if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM) {
                ks_log_warn(NULL, "accept failed", "{s:s}", "error", strerror(err));
                return;
        }
        evconnlistener_disable(l);
        if (!f->paused) {
                f->paused = true;
                ks_counter_inc(f->accept_paused);
                ks_log_warn(NULL, "accept paused: out of descriptors or memory", "{s:s,s:I,s:I}",
                            "error", strerror(err), "connections", (json_int_t)f->nconns,
                            "retry_ms", (json_int_t)ACCEPT_PAUSE_MS);
        }
        struct timeval tv;
        ms_timeval(ACCEPT_PAUSE_MS, &tv);
        evtimer_add(f->resume_ev, &tv);
}

/* Room for conns_max descriptors: the soft limit raised toward the hard one. */
static void fit_descriptor_limit(int64_t conns_max)
{
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
                return;
        }
        rlim_t want = (rlim_t)conns_max + FD_RESERVE;
        if (rl.rlim_cur >= want) {
                return;
        }
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < want) {
                ks_log_warn(NULL,
                            "the descriptor limit is below KEELSON_GATEWAY_MAX_CONNECTIONS: "
                            "accept pauses when descriptors run out",
                            "{s:I,s:I}", "nofile",
                            (json_int_t)(rl.rlim_cur > was ? rl.rlim_cur : was), "max_connections",
                            (json_int_t)conns_max);
        }
}

static int listen_on(gw_front *f, const char *host, int port)
{
        struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC,
                                        .ai_socktype = SOCK_STREAM,
                                        .ai_flags = EVUTIL_AI_PASSIVE | EVUTIL_AI_NUMERICSERV};
        struct evutil_addrinfo *ai = NULL;
        char service[8];
        snprintf(service, sizeof(service), "%d", port);
        if (evutil_getaddrinfo(host, service, &hints, &ai) != 0 || ai == NULL) {
                return -1;
        }
        unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE;
        if (f->lim.reuse_port) {
                flags |= LEV_OPT_REUSEABLE_PORT;
        }
        f->listener = evconnlistener_new_bind(f->base, on_accept, f, flags, -1, ai->ai_addr,
                                              (int)ai->ai_addrlen);
        evutil_freeaddrinfo(ai);
        if (f->listener == NULL) {
                return -1;
        }
        evconnlistener_set_error_cb(f->listener, on_accept_error);
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        if (getsockname(evconnlistener_get_fd(f->listener), (struct sockaddr *)&ss, &len) != 0) {
                return -1;
        }
        f->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
        return 0;
}

static int metrics_setup(gw_front *f)
{
        ks_metrics *m = ks_metrics_default();
        f->open_gauge =
            ks_gauge_get(m, "keelson_gateway_connections", "Open client connections", NULL);
        f->refused_limit = ks_counter_get(m, "keelson_gateway_connections_refused_total",
                                          "Connections refused at accept", "reason=\"limit\"");
        f->refused_address =
            ks_counter_get(m, "keelson_gateway_connections_refused_total",
                           "Connections refused at accept", "reason=\"per_address\"");
        f->accept_paused =
            ks_counter_get(m, "keelson_gateway_accept_paused_total",
                           "Times accepting paused because descriptors or memory ran out", NULL);
        for (int i = 0; i < STATUS_KINDS; i++) {
                char labels[32];
                snprintf(labels, sizeof(labels), "status=\"%d\"", error_statuses[i]);
                f->errors[i] = ks_counter_get(
                    m, "keelson_gateway_http_errors_total",
                    "Requests the HTTP front answered itself: framing, limits, deadlines", labels);
                if (f->errors[i] == NULL) {
                        return -1;
                }
        }
        return f->open_gauge != NULL && f->refused_limit != NULL && f->refused_address != NULL &&
                       f->accept_paused != NULL && gw_h2_metrics_init() == 0
                   ? 0
                   : -1;
}

int gw_front_new(gw_front **out, struct event_base *base, const char *host, int port,
                 const gw_front_limits *lim, gw_front_fn fn, void *arg)
{
        *out = NULL;
        gw_front *f = calloc(1, sizeof(*f));
        if (f == NULL) {
                return -1;
        }
        f->base = base;
        f->lim = *lim;
        f->fn = fn;
        f->arg = arg;
        LIST_INIT(&f->conns);
        uint32_t slots = (uint32_t)lim->conns_max;
        if (metrics_setup(f) != 0 || ks_hmap_init(&f->by_ip, slots) != 0 ||
            (f->ips = calloc(slots, sizeof(*f->ips))) == NULL ||
            (f->free_ips = malloc(slots * sizeof(*f->free_ips))) == NULL ||
            (f->resume_ev = evtimer_new(base, on_resume, f)) == NULL ||
            (f->reply = evbuffer_new()) == NULL) {
                gw_front_free(f);
                return -1;
        }
        for (uint32_t i = 0; i < slots; i++) {
                f->free_ips[i] = slots - 1 - i;
        }
        f->refused_reply_len = (size_t)snprintf(
            f->refused_reply, sizeof(f->refused_reply),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
            sizeof(REFUSED_BODY) - 1, REFUSED_BODY);
        f->n_free_ips = slots;
        fit_descriptor_limit(lim->conns_max);
        if (listen_on(f, host, port) != 0) {
                ks_log_error(NULL, "cannot listen", "{s:s,s:i}", "host", host, "port", port);
                gw_front_free(f);
                return -1;
        }
        *out = f;
        return 0;
}

int gw_front_port(const gw_front *f)
{
        return f->port;
}

void gw_front_drain(gw_front *f)
{
        f->draining = true;
        if (f->listener != NULL) {
                evconnlistener_free(f->listener);
                f->listener = NULL;
        }
        conn *c = LIST_FIRST(&f->conns);
        while (c != NULL) {
                conn *next = LIST_NEXT(c, link);
                if (c->h2 != NULL && c->state != C_CLOSING) {
                        gw_h2_drain(c); /* GOAWAY; closes once its streams are answered */
                } else if (c->state == C_HEAD && !c->started) {
                        front_conn_free(c); /* idle: nothing to finish */
                }
                c = next;
        }
}

void gw_front_free(gw_front *f)
{
        if (f == NULL) {
                return;
        }
        if (f->listener != NULL) {
                evconnlistener_free(f->listener);
                f->listener = NULL;
        }
        while (!LIST_EMPTY(&f->conns)) {
                front_conn_free(LIST_FIRST(&f->conns));
        }
        if (f->resume_ev != NULL) {
                event_free(f->resume_ev);
        }
        if (f->reply != NULL) {
                evbuffer_free(f->reply);
        }
        ks_hmap_fini(&f->by_ip);
        free(f->ips);
        free(f->free_ips);
        free(f);
}
