/*
 * minimal_strict: the candidate built the way the gateway is built. libevent
 * bufferevents, one event_base and one SO_REUSEPORT listener per thread, a
 * strict HTTP/1.1 framing reader (h1_strict.c) and, on the same bufferevent,
 * nghttp2 for cleartext HTTP/2 with prior knowledge: a connection whose
 * first bytes are the HTTP/2 preface is handed to nghttp2, any other is
 * HTTP/1.1. GET/POST get the fixed 20-byte body; a framing error gets its
 * status (400, 413, 431, 501) and Connection: close.
 *
 *   minimal_strict PORT [THREADS]
 *
 * The reply carries x-authorization-count like the other candidates.
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>

#include "front_common.h"
#include "h1_strict.h"

#define H2_PREFACE       "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_BYTES (sizeof(H2_PREFACE) - 1)
/* A request (head and body) never needs more input than this. */
#define CONN_INPUT_BYTES_MAX (H1_HEAD_BYTES_MAX + H1_BODY_BYTES_MAX + 4096)

enum conn_mode { MODE_UNKNOWN, MODE_H1, MODE_H2 };

struct conn {
        struct bufferevent *bev;
        enum conn_mode mode;
        int closing; /* free once the output has been written */
        nghttp2_session *h2;
};

struct h2_stream {
        int authorizations;
        char count[16];
};

static void conn_free(struct conn *c)
{
        if (c->h2 != NULL)
                nghttp2_session_del(c->h2);
        bufferevent_free(c->bev);
        free(c);
}

static void conn_close_after_write(struct conn *c)
{
        c->closing = 1;
        bufferevent_disable(c->bev, EV_READ);
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
                conn_free(c);
}

/* ---- HTTP/1.1 ------------------------------------------------------------ */

static const char *reason(int status)
{
        switch (status) {
        case 413:
                return "Content Too Large";
        case 431:
                return "Request Header Fields Too Large";
        case 501:
                return "Not Implemented";
        default:
                return "Bad Request";
        }
}

static void h1_error(struct conn *c, int status)
{
        evbuffer_add_printf(bufferevent_get_output(c->bev),
                            "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                            status, reason(status));
        conn_close_after_write(c);
}

static void h1_reply(struct conn *c, const struct h1_request *req)
{
        struct evbuffer *out = bufferevent_get_output(c->bev);
        int get = req->method_len == 3 && memcmp(req->method, "GET", 3) == 0;
        int post = req->method_len == 4 && memcmp(req->method, "POST", 4) == 0;

        if (!get && !post) {
                evbuffer_add_printf(out,
                                    "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, POST\r\n"
                                    "Content-Length: 0\r\n%s\r\n",
                                    req->keep_alive ? "" : "Connection: close\r\n");
                return;
        }
        evbuffer_add_printf(out,
                            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                            "x-authorization-count: %zu\r\n%s\r\n" FRONT_BODY,
                            FRONT_BODY_BYTES, h1_count_fields(req, "authorization"),
                            req->keep_alive ? "" : "Connection: close\r\n");
}

/* Serves every whole request in the input (pipelining included). */
static void h1_read(struct conn *c)
{
        struct evbuffer *in = bufferevent_get_input(c->bev);
        struct h1_request req;

        while (!c->closing && evbuffer_get_length(in) > 0) {
                size_t len = evbuffer_get_length(in), total, data;
                const char *buf = (const char *)evbuffer_pullup(in, -1);
                int rv = h1_parse_head(buf, len, &req);

                if (rv == H1_INCOMPLETE)
                        return;
                if (rv != H1_DONE) {
                        h1_error(c, rv);
                        return;
                }
                total = req.head_bytes + (size_t)req.body_bytes;
                if (req.chunked) {
                        rv = h1_chunked_length(buf + req.head_bytes, len - req.head_bytes, &total,
                                               &data);
                        if (rv == H1_INCOMPLETE && len < CONN_INPUT_BYTES_MAX)
                                return;
                        if (rv != H1_DONE) {
                                h1_error(c, rv == H1_INCOMPLETE ? 413 : rv);
                                return;
                        }
                        total += req.head_bytes;
                } else if (len < total) {
                        return;
                }
                h1_reply(c, &req);
                evbuffer_drain(in, total);
                if (!req.keep_alive)
                        conn_close_after_write(c);
        }
}

/* ---- HTTP/2 (nghttp2) ---------------------------------------------------- */

static ssize_t body_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *user)
{
        (void)s, (void)id, (void)src, (void)user;
        if (len < FRONT_BODY_BYTES)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        memcpy(buf, FRONT_BODY, FRONT_BODY_BYTES);
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t)FRONT_BODY_BYTES;
}

#define NV(n, v)                                                                                   \
        {                                                                                          \
                (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v),                          \
                    NGHTTP2_NV_FLAG_NO_COPY_NAME                                                   \
        }

static int h2_respond(nghttp2_session *s, int32_t id, struct h2_stream *st)
{
        nghttp2_data_provider body = {.read_callback = body_read};
        snprintf(st->count, sizeof(st->count), "%d", st->authorizations);
        nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "text/plain"),
                            NV("content-length", "20"), NV("x-authorization-count", st->count)};
        return nghttp2_submit_response(s, id, nva, sizeof(nva) / sizeof(nva[0]), &body);
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
        struct h2_stream *st;

        (void)user;
        if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
                return 0;
        if ((st = calloc(1, sizeof(*st))) == NULL)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        nghttp2_session_set_stream_user_data(s, f->hd.stream_id, st);
        return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t name_len, const uint8_t *value, size_t value_len, uint8_t flags,
                     void *user)
{
        struct h2_stream *st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);

        (void)value, (void)value_len, (void)flags, (void)user;
        if (st != NULL && name_len == 13 && memcmp(name, "authorization", 13) == 0)
                st->authorizations++;
        return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user)
{
        struct h2_stream *st;

        (void)user;
        if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
            !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
                return 0;
        if ((st = nghttp2_session_get_stream_user_data(s, f->hd.stream_id)) == NULL)
                return 0;
        return h2_respond(s, f->hd.stream_id, st) == 0 ? 0 : NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *user)
{
        (void)code, (void)user;
        free(nghttp2_session_get_stream_user_data(s, id));
        return 0;
}

/* Made once in main, before any thread, and only read after. */
static nghttp2_session_callbacks *h2_callbacks;

static void h2_callbacks_init(void)
{
        nghttp2_session_callbacks_new(&h2_callbacks);
        nghttp2_session_callbacks_set_on_begin_headers_callback(h2_callbacks, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(h2_callbacks, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(h2_callbacks, on_frame_recv);
        nghttp2_session_callbacks_set_on_stream_close_callback(h2_callbacks, on_stream_close);
}

/* Everything nghttp2 wants to send goes to the bufferevent's output. */
static int h2_flush(struct conn *c)
{
        struct evbuffer *out = bufferevent_get_output(c->bev);
        const uint8_t *data;
        ssize_t n;

        while ((n = nghttp2_session_mem_send(c->h2, &data)) > 0)
                evbuffer_add(out, data, (size_t)n);
        if (n < 0)
                return -1;
        if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2))
                return -1;
        return 0;
}

static int h2_start(struct conn *c)
{
        nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
                                       {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, H1_HEAD_BYTES_MAX}};

        if (nghttp2_session_server_new(&c->h2, h2_callbacks, c) != 0)
                return -1;
        return nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 2) == 0 ? 0 : -1;
}

static void h2_read(struct conn *c)
{
        struct evbuffer *in = bufferevent_get_input(c->bev);
        size_t len = evbuffer_get_length(in);
        ssize_t n = nghttp2_session_mem_recv(c->h2, evbuffer_pullup(in, -1), len);

        if (n < 0) {
                conn_close_after_write(c);
                return;
        }
        evbuffer_drain(in, (size_t)n);
        if (h2_flush(c) != 0)
                conn_close_after_write(c);
}

/* ---- the connection -------------------------------------------------------- */

/* The first bytes decide: the HTTP/2 preface, or HTTP/1.1. */
static int sniff(struct conn *c)
{
        struct evbuffer *in = bufferevent_get_input(c->bev);
        size_t len = evbuffer_get_length(in);
        size_t n = len < H2_PREFACE_BYTES ? len : H2_PREFACE_BYTES;

        if (memcmp(evbuffer_pullup(in, (ssize_t)n), H2_PREFACE, n) != 0) {
                c->mode = MODE_H1;
                return 0;
        }
        if (n < H2_PREFACE_BYTES)
                return 1; /* a prefix of the preface so far: wait */
        c->mode = MODE_H2;
        return h2_start(c);
}

static void on_read(struct bufferevent *bev, void *arg)
{
        struct conn *c = arg;

        (void)bev;
        if (c->mode == MODE_UNKNOWN) {
                int rv = sniff(c);
                if (rv < 0) {
                        conn_free(c);
                        return;
                }
                if (rv > 0)
                        return;
        }
        if (c->mode == MODE_H1)
                h1_read(c);
        else
                h2_read(c);
}

static void on_write(struct bufferevent *bev, void *arg)
{
        struct conn *c = arg;

        (void)bev;
        if (c->closing)
                conn_free(c);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
        (void)bev;
        if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
                conn_free(arg);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
        struct event_base *base = arg;
        struct conn *c = calloc(1, sizeof(*c));

        (void)l, (void)sa, (void)salen;
        if (c == NULL) {
                close(fd);
                return;
        }
        c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
        bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
        bufferevent_setwatermark(c->bev, EV_READ, 0, CONN_INPUT_BYTES_MAX);
        bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

static void *serve(void *arg)
{
        int fd = (int)(intptr_t)arg;
        struct event_base *base = event_base_new();

        if (evconnlistener_new(base, on_accept, base, LEV_OPT_CLOSE_ON_FREE, -1, fd) == NULL) {
                fprintf(stderr, "minimal_strict: evconnlistener_new failed\n");
                exit(1);
        }
        event_base_dispatch(base);
        return NULL;
}

int main(int argc, char **argv)
{
        struct front_args args;

        front_parse_args(argc, argv, &args);
        h2_callbacks_init();
        front_run_threads(&args, serve);
        return 0;
}
