/*
 * See h2.h. nghttp2 owns the framing, HPACK, flow control (windows are
 * given back as the body is taken in) and the checks of RFC 9113 §8 on
 * every request (pseudo-header fields present and in order, no
 * connection-specific fields, Content-Length against the DATA received):
 * a stream that fails them is reset by nghttp2 and never reaches us.
 *
 * A stream's request is built as it comes: its header fields are copied
 * into one block of head_max bytes (the gw_req's head, each name and value
 * NUL-terminated, found by the same gw_h1_head the HTTP/1.1 reader fills),
 * its DATA into the request's body buffer. At END_STREAM it goes to the
 * front's callback, or, over a limit, is answered by the front itself.
 *
 * nghttp2 must not send from inside its own callbacks, and a reply may be
 * given inside one (the callback answers a request at once): replies are
 * submitted at any time, and framed into the output by flush() after the
 * read that caused them, or at once when they come from elsewhere.
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "grpc.h"
#include "h2.h"
#include "wire.h"
#include "ks_clock.h"
#include "ks_crypto.h"
#include "ks_log.h"
#include "ks_metrics.h"

#define SETTINGS_PAYLOAD_MAX 1024 /* HTTP2-Settings, decoded: 6 bytes a setting */
#define REPLY_FIELDS_MAX     64   /* fields of one reply, pseudo-header and front's own included */

struct gw_h2_stream {
        gw_req *req;
        gw_h2_stream *prev, *next; /* the connection's streams, oldest first */
        int64_t begun_ms;
        int64_t moved_ms; /* when its reply last moved: submitted, or a frame of it sent */
        size_t head_used;
        int fail_status; /* answered by the front at END_STREAM: 413, 431 */
        bool complete;   /* END_STREAM came */
        bool dispatched; /* the callback has it */
        bool replied;    /* the reply is submitted (a stream's: opened) */
        bool streaming;  /* taken at its HEADERS: the body goes to data_fn as it comes */
        bool reply_done; /* every byte of the reply is in reply (a stream's: closed) */
        gw_req_data_fn data_fn;
        void *data_arg;
        struct evbuffer *reply;
};

struct gw_h2 {
        conn *c;
        nghttp2_session *session;
        gw_h2_stream *first, *last;
        int64_t idle_since_ms; /* when its last stream closed (or it began): frames that
                                * open no stream (PING, SETTINGS, unknown) do not move it */
        bool in_recv;          /* inside nghttp2_session_mem_recv: no sending */
        bool draining;
};

/* ---- streams ------------------------------------------------------------------- */

static void stream_unlink(gw_h2 *h, gw_h2_stream *st)
{
        if (st->prev != NULL) {
                st->prev->next = st->next;
        } else {
                h->first = st->next;
        }
        if (st->next != NULL) {
                st->next->prev = st->prev;
        } else {
                h->last = st->prev;
        }
        st->prev = st->next = NULL;
}

/* Frees a stream's request: a dispatched one not answered hears of it first. */
static void stream_free(gw_h2 *h, gw_h2_stream *st)
{
        gw_req *r = st->req;
        stream_unlink(h, st);
        if (h->first == NULL) {
                h->idle_since_ms = ks_mono_ms();
        }
        if (st->dispatched && !(st->replied && st->reply_done) && r->cancel != NULL) {
                r->cancel(r->cancel_arg);
        }
        front_req_free(r);
        if (st->reply != NULL) {
                evbuffer_free(st->reply);
        }
        free(st);
}

static gw_h2_stream *stream_new(gw_h2 *h, int32_t id)
{
        conn *c = h->c;
        gw_h2_stream *st = calloc(1, sizeof(*st));
        gw_req *r = calloc(1, sizeof(*r));
        if (st == NULL || r == NULL || (r->head = malloc(c->f->lim.head_max + 1)) == NULL ||
            (r->body = evbuffer_new()) == NULL || (r->out = evbuffer_new()) == NULL ||
            (st->reply = evbuffer_new()) == NULL) {
                if (r != NULL) {
                        front_req_free(r);
                }
                if (st != NULL && st->reply != NULL) {
                        evbuffer_free(st->reply);
                }
                free(st);
                return NULL;
        }
        r->c = c;
        r->stream_id = id;
        r->h2 = st;
        r->h.minor_version = 1;
        r->h.keep_alive = true;
        st->req = r;
        st->begun_ms = ks_mono_ms();
        st->prev = h->last;
        if (h->last != NULL) {
                h->last->next = st;
        } else {
                h->first = st;
        }
        h->last = st;
        return st;
}

/* Copies len bytes and a NUL into the stream's head block; NULL when it is full. */
static const char *head_copy(gw_h2_stream *st, const uint8_t *p, size_t len, size_t cap)
{
        if (len + 1 > cap - st->head_used) {
                return NULL;
        }
        char *dst = st->req->head + st->head_used;
        memcpy(dst, p, len);
        dst[len] = '\0';
        st->head_used += len + 1;
        return dst;
}

static bool add_field(gw_h2_stream *st, const uint8_t *name, size_t nlen, const uint8_t *value,
                      size_t vlen, size_t cap)
{
        gw_h1_head *h = &st->req->h;
        if (h->nfields == GW_H1_FIELDS_MAX) {
                return false;
        }
        const char *n = head_copy(st, name, nlen, cap);
        const char *v = n != NULL ? head_copy(st, value, vlen, cap) : NULL;
        if (v == NULL) {
                return false;
        }
        h->fields[h->nfields++] = (gw_h1_field){n, nlen, v, vlen};
        return true;
}

/* ---- sending --------------------------------------------------------------------- */

static void arm_timer(gw_h2 *h);

/* Frames what nghttp2 has to send into the output; closes the connection when it is done. */
static void flush(gw_h2 *h)
{
        conn *c = h->c;
        struct evbuffer *out = bufferevent_get_output(c->bev);
        while (evbuffer_get_length(out) < OUTPUT_HIGH_BYTES) {
                const uint8_t *data = NULL;
                ssize_t n = nghttp2_session_mem_send(h->session, &data);
                if (n < 0) {
                        front_conn_close(c);
                        return;
                }
                if (n == 0) {
                        break;
                }
                evbuffer_add(out, data, (size_t)n);
        }
        bool done =
            !nghttp2_session_want_read(h->session) && !nghttp2_session_want_write(h->session);
        if (done || (h->draining && h->first == NULL && !nghttp2_session_want_write(h->session))) {
                front_conn_close(c);
                return;
        }
        arm_timer(h);
}

/* The names and values of "Name: value\r\n" lines in b, lowercased in place, as nv; how many. */
static size_t fields_nv(struct evbuffer *b, nghttp2_nv *nva, size_t max);

/* The body from the stream's buffer; its trailers, if any, once it is all out. */
static ssize_t reply_read(nghttp2_session *session, int32_t id, uint8_t *buf, size_t len,
                          uint32_t *flags, nghttp2_data_source *src, void *user)
{
        (void)user;
        gw_h2_stream *st = src->ptr;
        if (evbuffer_get_length(st->reply) == 0 && !st->reply_done) {
                return NGHTTP2_ERR_DEFERRED; /* a stream's next bytes are still to come */
        }
        int n = evbuffer_remove(st->reply, buf, len);
        if (n < 0) {
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
        if (evbuffer_get_length(st->reply) == 0 && st->reply_done) {
                *flags |= NGHTTP2_DATA_FLAG_EOF;
                struct evbuffer *t = st->req->trailers;
                if (t != NULL && evbuffer_get_length(t) > 0) {
                        nghttp2_nv nva[REPLY_FIELDS_MAX];
                        size_t nt = fields_nv(t, nva, REPLY_FIELDS_MAX);
                        if (nghttp2_submit_trailer(session, id, nva, nt) == 0) {
                                *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
                        }
                }
        }
        return n;
}

/* Connection-specific fields (RFC 9113 §8.2.2) never go out on HTTP/2. */
static bool connection_specific(const char *name)
{
        static const char *const names[] = {"connection", "keep-alive", "proxy-connection",
                                            "transfer-encoding", "upgrade"};
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                if (strcasecmp(name, names[i]) == 0) {
                        return true;
                }
        }
        return false;
}

#define NV(n, nl, v, vl)                                                                           \
        (nghttp2_nv)                                                                               \
        {                                                                                          \
                (uint8_t *)(n), (uint8_t *)(v), (nl), (vl), NGHTTP2_NV_FLAG_NONE                   \
        }

static size_t fields_nv(struct evbuffer *b, nghttp2_nv *nva, size_t max)
{
        size_t n = 0, len = evbuffer_get_length(b);
        char *fields = len > 0 ? (char *)evbuffer_pullup(b, -1) : NULL;
        for (size_t at = 0; fields != NULL && at < len && n < max;) {
                char *line = fields + at, *eol = memchr(line, '\r', len - at);
                char *colon = memchr(line, ':', len - at);
                if (eol == NULL || colon == NULL || colon > eol) {
                        break;
                }
                *colon = '\0';
                *eol = '\0';
                for (char *p = line; p < colon; p++) {
                        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
                }
                const char *value = colon + 1 + (colon[1] == ' ');
                if (!connection_specific(line)) {
                        nva[n++] = NV(line, (size_t)(colon - line), value, strlen(value));
                }
                at = (size_t)(eol - fields) + 2;
        }
        return n;
}

static void submit(gw_h2 *h, gw_h2_stream *st, int status, const char *content_type,
                   const void *body, size_t len, bool open_stream)
{
        gw_req *r = st->req;
        nghttp2_nv nva[REPLY_FIELDS_MAX];
        size_t n = 0;
        char status_s[8], length_s[24];
        const char *date = front_http_date();

        st->replied = true;
        st->reply_done = true;
        st->moved_ms = ks_mono_ms();
        r->cancel = NULL;
        snprintf(status_s, sizeof(status_s), "%d", status);
        snprintf(length_s, sizeof(length_s), "%zu", len);
        nva[n++] = NV(":status", 7, status_s, strlen(status_s));
        nva[n++] = NV("date", 4, date, strlen(date));
        if (content_type != NULL) {
                nva[n++] = NV("content-type", 12, content_type, strlen(content_type));
        }
        n += fields_nv(r->out, nva + n, REPLY_FIELDS_MAX - 1 - n);
        bool trailers = r->trailers != NULL && evbuffer_get_length(r->trailers) > 0;
        /* 304: no body, no length of one (RFC 9110 §15.4.5); a stream's length is unknown */
        if (!trailers && status != 304 && !open_stream) {
                nva[n++] = NV("content-length", 14, length_s, strlen(length_s));
        }
        bool has_body = open_stream || (len > 0 && !r->is_head && status != 304);
        if (has_body) {
                evbuffer_add(st->reply, body, len);
        }
        nghttp2_data_provider dp = {.source.ptr = st, .read_callback = reply_read};
        if (open_stream) {
                st->reply_done = false; /* reply_read defers until gw_h2_stream_close */
        }
        /* Trailers after no body at all go in the one HEADERS (gRPC's Trailers-Only). */
        if (trailers && !has_body) {
                n += fields_nv(r->trailers, nva + n, REPLY_FIELDS_MAX - n);
        }
        if (nghttp2_submit_response(h->session, r->stream_id, nva, n, has_body ? &dp : NULL) != 0) {
                nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, r->stream_id,
                                          NGHTTP2_INTERNAL_ERROR);
        }
}

/* A request the front answers itself (a limit), as on HTTP/1.1 but without closing. */
static void fail_stream(gw_h2 *h, gw_h2_stream *st, int status, const char *message)
{
        char body[192];
        front_count_error(h->c->f, status);
        /* A gRPC client reads its status from trailers: Trailers-Only, as the handler answers. */
        const char *type = gw_req_header(st->req, "content-type");
        gw_grpc_protocol p;
        if (gw_grpc_protocol_parse(type, &p) == 0 && p == GW_GRPC) {
                char code[12], text[GW_GRPC_MESSAGE_MAX + 1];
                gw_wire_status(status == 413 || status == 431 ? KS_RESOURCE_EXHAUSTED
                                                              : KS_INVALID_ARGUMENT,
                               message, code, text);
                gw_req_add_trailer(st->req, "grpc-status", code);
                gw_req_add_trailer(st->req, "grpc-message", text);
                submit(h, st, 200, "application/grpc", NULL, 0, false);
                return;
        }
        int n = front_error_json(status, message, body, sizeof(body));
        submit(h, st, status, "application/json", body, (size_t)n, false);
}

void gw_h2_on_data(gw_req *r, gw_req_data_fn fn, void *arg)
{
        r->h2->data_fn = fn;
        r->h2->data_arg = arg;
}

bool gw_h2_streaming(const gw_req *r)
{
        return r->h2->streaming;
}

void gw_h2_stream_open(gw_req *r, int status, const char *content_type)
{
        gw_h2 *h = r->c->h2;
        gw_h2_stream *st = r->h2;
        gw_req_data_fn fn = st->data_fn;
        void *arg = st->data_arg;
        void (*cancel)(void *) = r->cancel;
        void *cancel_arg = r->cancel_arg;
        /* A reply with a body that is not all there yet: trailers wait for the close. */
        submit(h, st, status, content_type, NULL, 0, true);
        st->data_fn = fn;
        st->data_arg = arg;
        r->cancel = cancel; /* until the close, a reset still cancels */
        r->cancel_arg = cancel_arg;
        if (!h->in_recv) {
                flush(h);
        }
}

void gw_h2_stream_write(gw_req *r, const void *data, size_t len)
{
        gw_h2 *h = r->c->h2;
        evbuffer_add(r->h2->reply, data, len);
        nghttp2_session_resume_data(h->session, r->stream_id);
        if (!h->in_recv) {
                flush(h);
        }
}

void gw_h2_stream_abort(gw_req *r)
{
        gw_h2 *h = r->c->h2;
        gw_h2_stream *st = r->h2;
        evbuffer_drain(st->reply, evbuffer_get_length(st->reply));
        st->reply_done = true;
        st->data_fn = NULL;
        r->cancel = NULL;
        nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, r->stream_id,
                                  NGHTTP2_ENHANCE_YOUR_CALM);
        if (!h->in_recv) {
                flush(h);
        }
}

size_t gw_h2_stream_pending(const gw_req *r)
{
        return evbuffer_get_length(r->h2->reply);
}

void gw_h2_stream_close(gw_req *r)
{
        gw_h2 *h = r->c->h2;
        r->h2->reply_done = true;
        r->h2->data_fn = NULL;
        r->cancel = NULL;
        nghttp2_session_resume_data(h->session, r->stream_id);
        if (!h->in_recv) {
                flush(h);
        }
}

void gw_h2_reply(gw_req *r, int status, const char *content_type, const void *body, size_t len)
{
        gw_h2 *h = r->c->h2;
        submit(h, r->h2, status, content_type, body, len, false);
        if (!h->in_recv) {
                flush(h);
        }
}

/* ---- receiving ----------------------------------------------------------------- */

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
        gw_h2 *h = user;
        if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
                return 0;
        }
        gw_h2_stream *st = stream_new(h, frame->hd.stream_id);
        if (st == NULL) {
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
        }
        nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, st);
        return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *user)
{
        (void)flags;
        gw_h2 *h = user;
        gw_h2_stream *st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (st == NULL || st->fail_status != 0 || frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
                return 0; /* trailers are dropped, as on HTTP/1.1 */
        }
        size_t cap = h->c->f->lim.head_max;
        gw_h1_head *hd = &st->req->h;
        bool ok = true;
        if (nlen > 0 && name[0] == ':') {
                const char *v = head_copy(st, value, vlen, cap);
                ok = v != NULL;
                if (ok && nlen == 7 && memcmp(name, ":method", 7) == 0) {
                        hd->method = v;
                        hd->method_len = vlen;
                } else if (ok && nlen == 5 && memcmp(name, ":path", 5) == 0) {
                        hd->target = v;
                        hd->target_len = vlen;
                } else if (ok && nlen == 10 && memcmp(name, ":authority", 10) == 0) {
                        ok = add_field(st, (const uint8_t *)"host", 4, value, vlen, cap);
                }
        } else {
                ok = add_field(st, name, nlen, value, vlen, cap);
        }
        if (!ok) {
                st->fail_status = 431;
        }
        return 0;
}

static int on_data(nghttp2_session *session, uint8_t flags, int32_t id, const uint8_t *data,
                   size_t len, void *user)
{
        (void)flags;
        gw_h2 *h = user;
        gw_h2_stream *st = nghttp2_session_get_stream_user_data(session, id);
        if (st == NULL || st->fail_status != 0) {
                return 0;
        }
        if (st->streaming) {
                if (st->data_fn != NULL && !(st->replied && st->reply_done)) {
                        st->data_fn(data, len, false, st->data_arg);
                }
                return 0;
        }
        const gw_front_limits *lim = &h->c->f->lim;
        const char *type = gw_req_header(st->req, "content-type");
        size_t max = type != NULL && strncasecmp(type, "application/grpc", 16) == 0 &&
                             lim->grpc_body_max > lim->body_max
                         ? lim->grpc_body_max
                         : lim->body_max;
        if (len > max - evbuffer_get_length(st->req->body)) {
                st->fail_status = 413;
                evbuffer_drain(st->req->body, evbuffer_get_length(st->req->body));
                return 0;
        }
        evbuffer_add(st->req->body, data, len);
        return 0;
}

/* The end of a stream's header fields: taken now when the front wants it as a stream. */
static void headers_done(gw_h2 *h, gw_h2_stream *st)
{
        gw_front *f = h->c->f;
        gw_req *r = st->req;
        if (st->fail_status != 0 || f->wants_stream == NULL || r->h.method == NULL ||
            r->h.target == NULL) {
                return;
        }
        /* The path is cut in place once: complete() finds the target cut already. */
        if ((r->path = front_target_path((char *)r->h.target)) == NULL ||
            !f->wants_stream(r, f->stream_arg)) {
                return;
        }
        r->is_head = strcmp(r->h.method, "HEAD") == 0;
        r->h.head_bytes = st->head_used;
        st->streaming = true;
        st->dispatched = true;
        f->fn(r, f->arg);
}

/* END_STREAM: the request is whole. */
static void complete(gw_h2 *h, gw_h2_stream *st)
{
        gw_req *r = st->req;
        st->complete = true;
        if (st->streaming) {
                if (st->data_fn != NULL && !(st->replied && st->reply_done)) {
                        st->data_fn(NULL, 0, true, st->data_arg);
                }
                return;
        }
        if (st->fail_status != 0) {
                fail_stream(h, st, st->fail_status,
                            st->fail_status == 413 ? "request body too large"
                                                   : "request header section too large");
                return;
        }
        /* nghttp2 has checked :method and :path are there (RFC 9113 §8.3.1). */
        if (r->h.method == NULL || r->h.target == NULL ||
            (r->path = front_target_path((char *)r->h.target)) == NULL) {
                fail_stream(h, st, 400, "request target without a path");
                return;
        }
        r->is_head = strcmp(r->h.method, "HEAD") == 0;
        r->h.head_bytes = st->head_used;
        r->h.body_bytes = evbuffer_get_length(r->body);
        st->dispatched = true;
        h->c->f->fn(r, h->c->f->arg);
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
        gw_h2 *h = user;
        if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
                gw_h2_stream *st =
                    nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
                if (st != NULL) {
                        headers_done(h, st);
                }
        }
        if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
            (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) {
                return 0;
        }
        gw_h2_stream *st = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (st != NULL && !st->complete) {
                complete(h, st);
        }
        return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t id, uint32_t code, void *user)
{
        (void)code;
        gw_h2 *h = user;
        gw_h2_stream *st = nghttp2_session_get_stream_user_data(session, id);
        if (st != NULL) {
                nghttp2_session_set_stream_user_data(session, id, NULL);
                stream_free(h, st);
        }
        return 0;
}

/* ---- the session --------------------------------------------------------------- */

/* A reply moved (its HEADERS, or DATA the client's window let out). */
static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
        (void)user;
        if (frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) {
                gw_h2_stream *st =
                    nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
                if (st != NULL) {
                        st->moved_ms = ks_mono_ms();
                }
        }
        return 0;
}

static nghttp2_session_callbacks *callbacks(void)
{
        static nghttp2_session_callbacks *cbs; /* made once, on the loop's thread */
        if (cbs == NULL && nghttp2_session_callbacks_new(&cbs) == 0) {
                nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
                nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
                nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
                nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
                nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
                nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
        }
        return cbs;
}

static ks_counter *stalled_counter(void)
{
        static ks_counter *counter;
        if (counter == NULL) {
                counter = ks_counter_get(
                    ks_metrics_default(), "keelson_gateway_http2_stalled_replies_total",
                    "HTTP/2 replies reset because the client let them wait "
                    "for KEELSON_GATEWAY_IO_TIMEOUT_S (no window, not reading)",
                    NULL);
        }
        return counter;
}

static ks_counter *opened_counter(bool upgrade)
{
        static ks_counter *counters[2];
        if (counters[upgrade] == NULL) {
                counters[upgrade] =
                    ks_counter_get(ks_metrics_default(), "keelson_gateway_http2_connections_total",
                                   "Connections that became HTTP/2, by how",
                                   upgrade ? "how=\"upgrade\"" : "how=\"prior_knowledge\"");
        }
        return counters[upgrade];
}

int gw_h2_metrics_init(void)
{
        return opened_counter(false) != NULL && opened_counter(true) != NULL &&
                       stalled_counter() != NULL
                   ? 0
                   : -1;
}

static gw_h2 *session_new(conn *c)
{
        const gw_front_limits *lim = &c->f->lim;
        nghttp2_session_callbacks *cbs = callbacks();
        gw_h2 *h = calloc(1, sizeof(*h));
        if (h == NULL || cbs == NULL || nghttp2_session_server_new(&h->session, cbs, h) != 0) {
                free(h);
                return NULL;
        }
        /* A window of 0 in the limits (a test's own front) keeps nghttp2's 65,535. */
        int32_t stream_window =
            lim->h2_stream_window > 0 ? lim->h2_stream_window : NGHTTP2_INITIAL_WINDOW_SIZE;
        int32_t conn_window =
            lim->h2_conn_window > 0 ? lim->h2_conn_window : NGHTTP2_INITIAL_CONNECTION_WINDOW_SIZE;
        nghttp2_settings_entry iv[] = {
            {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)lim->h2_streams_max},
            {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)lim->head_max},
            {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)stream_window},
        };
        /* The connection's window is no setting: a WINDOW_UPDATE on stream 0 after SETTINGS. */
        if (nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, iv, 3) != 0 ||
            nghttp2_session_set_local_window_size(h->session, NGHTTP2_FLAG_NONE, 0, conn_window) !=
                0) {
                nghttp2_session_del(h->session);
                free(h);
                return NULL;
        }
        h->c = c;
        h->idle_since_ms = ks_mono_ms();
        return h;
}

/* c is HTTP/2 from now on: the HTTP/1.1 reader's timer and state are done with. */
static void adopt(conn *c, gw_h2 *h, bool upgrade)
{
        c->h2 = h;
        c->state = C_WAITING;
        evtimer_del(c->timer);
        ks_counter_inc(opened_counter(upgrade));
}

int gw_h2_start(conn *c)
{
        gw_h2 *h = session_new(c);
        if (h == NULL) {
                return -1;
        }
        adopt(c, h, false);
        return 0;
}

/* Whether the comma-separated list in value holds token (case-insensitive). */
static bool list_has(const char *value, const char *token)
{
        size_t tl = strlen(token);
        for (const char *p = value; p != NULL && *p != '\0';) {
                while (*p == ' ' || *p == '\t' || *p == ',') {
                        p++;
                }
                size_t n = strcspn(p, ", \t");
                if (n == tl && strncasecmp(p, token, tl) == 0) {
                        return true;
                }
                p += n;
        }
        return false;
}

bool gw_h2_wants_upgrade(const gw_req *r)
{
        const char *upgrade = gw_req_header(r, "Upgrade");
        const char *connection = gw_req_header(r, "Connection");
        return !r->c->tls && r->h.minor_version == 1 && upgrade != NULL && connection != NULL &&
               list_has(upgrade, "h2c") && list_has(connection, "upgrade") &&
               list_has(connection, "http2-settings") &&
               gw_req_header_count(r, "HTTP2-Settings") == 1;
}

int gw_h2_upgrade(conn *c, gw_req *r)
{
        /* HTTP2-Settings: a SETTINGS payload in base64url without padding. */
        const char *b64 = gw_req_header(r, "HTTP2-Settings");
        uint8_t payload[SETTINGS_PAYLOAD_MAX];
        int plen = ks_base64_decode(b64, strlen(b64), payload, sizeof(payload));
        if (plen < 0) {
                return -1;
        }
        gw_h2 *h = session_new(c);
        if (h == NULL) {
                return -1;
        }
        if (nghttp2_session_upgrade2(h->session, payload, (size_t)plen, r->is_head, NULL) != 0) {
                nghttp2_session_del(h->session);
                free(h);
                return -1;
        }
        gw_h2_stream *st = stream_new(h, 1);
        if (st == NULL) {
                nghttp2_session_del(h->session);
                free(h);
                return -1;
        }
        /* The HTTP/1.1 request becomes stream 1's: its own block replaces the new one. */
        front_req_free(st->req);
        st->req = r;
        r->stream_id = 1;
        r->h2 = st;
        st->complete = true;
        nghttp2_session_set_stream_user_data(h->session, 1, st);
        evbuffer_add_printf(bufferevent_get_output(c->bev),
                            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                            "Upgrade: h2c\r\n\r\n");
        adopt(c, h, true);
        st->dispatched = true;
        h->in_recv = true; /* a reply given at once waits for the flush below */
        c->f->fn(r, c->f->arg);
        h->in_recv = false;
        flush(h);
        if (c->state != C_CLOSING && evbuffer_get_length(bufferevent_get_input(c->bev)) > 0) {
                gw_h2_read(c); /* the client preface, if it came with the request */
        }
        return 0;
}

void gw_h2_read(conn *c)
{
        gw_h2 *h = c->h2;
        struct evbuffer *in = bufferevent_get_input(c->bev);
        size_t len = evbuffer_get_length(in);
        if (len == 0) {
                return;
        }
        h->in_recv = true;
        ssize_t n = nghttp2_session_mem_recv(h->session, evbuffer_pullup(in, -1), len);
        h->in_recv = false;
        if (n < 0) {
                ks_log_debug(NULL, "http/2 connection error", "{s:s,s:s}", "peer", c->peer, "error",
                             nghttp2_strerror((int)n));
                evbuffer_drain(in, len);
                flush(h); /* the GOAWAY nghttp2 queued, if any */
                front_conn_close(c);
                return;
        }
        evbuffer_drain(in, (size_t)n);
        flush(h);
}

void gw_h2_write(conn *c)
{
        flush(c->h2);
}

/* A reply with bytes that wait for the client's window (or its socket). */
static bool stalled(const gw_h2_stream *st)
{
        return st->replied && st->reply != NULL && evbuffer_get_length(st->reply) > 0;
}

/*
 * The connection's next deadline, in ms from now (-1: none): with no
 * stream, the idle limit since the last one closed; a stream still coming
 * in, its whole-request deadline; a reply that waits for the client to
 * open its window, the I/O limit since a reply last moved. A stream that
 * waits for its handler (an upstream call, an event stream between
 * events) has none here: the handler bounds it.
 */
static int64_t next_deadline(const gw_h2 *h, int64_t now)
{
        const gw_front_limits *lim = &h->c->f->lim;
        if (h->first == NULL) {
                return h->idle_since_ms + lim->idle_ms - now;
        }
        int64_t ms = -1;
        for (const gw_h2_stream *st = h->first; st != NULL; st = st->next) {
                int64_t due = 0;
                if (!st->complete) {
                        due = st->begun_ms + lim->request_ms;
                } else if (stalled(st)) {
                        due = st->moved_ms + lim->idle_ms;
                } else {
                        continue;
                }
                int64_t left = due > now ? due - now : 0;
                ms = ms < 0 || left < ms ? left : ms;
        }
        return ms;
}

static void arm_timer(gw_h2 *h)
{
        struct timeval tv;
        int64_t ms = next_deadline(h, ks_mono_ms());
        if (ms < 0 && h->first != NULL) {
                evtimer_del(h->c->timer);
                return;
        }
        ms = ms < 0 ? 0 : ms;
        tv.tv_sec = (time_t)(ms / 1000);
        tv.tv_usec = (suseconds_t)(ms % 1000) * 1000;
        evtimer_add(h->c->timer, &tv);
}

/*
 * Whatever is due: an idle connection ends (GOAWAY); a stream not whole by
 * its deadline is reset CANCEL; replies that have not moved for the I/O
 * limit are dropped and their streams reset CANCEL (the client gave no
 * window, or stopped reading).
 */
void gw_h2_timer(conn *c)
{
        gw_h2 *h = c->h2;
        const gw_front_limits *lim = &c->f->lim;
        int64_t now = ks_mono_ms();
        if (h->first == NULL) {
                if (now - h->idle_since_ms >= lim->idle_ms) {
                        nghttp2_session_terminate_session(h->session, NGHTTP2_NO_ERROR);
                        flush(h);
                        front_conn_close(c);
                        return;
                }
                flush(h);
                return;
        }
        for (gw_h2_stream *st = h->first; st != NULL; st = st->next) {
                if (!st->complete && now - st->begun_ms >= lim->request_ms) {
                        front_count_error(c->f, 408);
                        nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, st->req->stream_id,
                                                  NGHTTP2_CANCEL);
                        st->complete = true; /* freed when nghttp2 closes the stream */
                } else if (st->complete && stalled(st) && now - st->moved_ms >= lim->idle_ms) {
                        ks_counter_inc(stalled_counter());
                        evbuffer_drain(st->reply, evbuffer_get_length(st->reply));
                        st->data_fn = NULL;
                        nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, st->req->stream_id,
                                                  NGHTTP2_CANCEL);
                }
        }
        flush(h);
}

void gw_h2_drain(conn *c)
{
        gw_h2 *h = c->h2;
        h->draining = true;
        nghttp2_submit_goaway(h->session, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(h->session), NGHTTP2_NO_ERROR,
                              NULL, 0);
        flush(h);
}

void gw_h2_free(conn *c)
{
        gw_h2 *h = c->h2;
        c->h2 = NULL;
        while (h->first != NULL) {
                nghttp2_session_set_stream_user_data(h->session, h->first->req->stream_id, NULL);
                stream_free(h, h->first);
        }
        nghttp2_session_del(h->session); /* calls no stream callback */
        free(h);
}
