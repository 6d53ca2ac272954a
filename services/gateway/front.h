/*
 * front.c: the gateway's HTTP server on libevent bufferevents. It
 * accepts connections (a global cap and one per client address, refused
 * cheaply over them; accept paused while descriptors run out), reads each
 * request with http1.c's strict framing under a whole-request deadline,
 * hands complete requests to one callback, and writes the replies. One
 * request per connection at a time; pipelined bytes wait in the buffer.
 *
 * HTTP/2 in cleartext (h2c) on the same port (h2.c, nghttp2): a connection
 * that opens with the HTTP/2 preface (prior knowledge), or an HTTP/1.1
 * request with `Upgrade: h2c`, carries many requests at once, one per
 * stream; each reaches the same callback as a gw_req, with the same
 * accessors, so nothing above the front knows which version it came in.
 *
 * Framing errors, bodies over the limit and expired request deadlines are
 * answered here (Connect error JSON, Connection: close) and never reach the
 * callback.
 */
#ifndef GW_FRONT_H
#define GW_FRONT_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clientip.h"

typedef struct gw_front gw_front;
typedef struct gw_req gw_req;

typedef struct gw_front_limits {
        size_t head_max;           /* request line and fields: over it, 431 */
        size_t body_max;           /* over it, 413 before the body is read */
        int64_t request_ms;        /* from a request's first byte to its last */
        int64_t idle_ms;           /* an idle keep-alive connection; writing a reply */
        int64_t conns_max;         /* open connections in all */
        int64_t conns_per_ip_max;  /* per peer address (trusted proxies are not counted) */
        const gw_proxies *proxies; /* the trusted proxies, or NULL */
        int64_t h2_streams_max;    /* HTTP/2: concurrent streams per connection */
        int32_t h2_stream_window;  /* HTTP/2: a stream's receive window (initial) */
        int32_t h2_conn_window;    /* HTTP/2: the connection's receive window */
        size_t grpc_body_max;      /* HTTP/2: the body of a gRPC-family request (its message) */
        struct gw_tls *tls;        /* TLS on every connection (tls.h), or NULL: cleartext */
        bool reuse_port;           /* SO_REUSEPORT: other processes may listen on the port too */
} gw_front_limits;

/* A complete request: the callback answers it now or later with gw_req_reply. */
typedef void (*gw_front_fn)(gw_req *r, void *arg);

/* Binds host:port (0: any free port) and accepts on base. Returns 0 or -1. */
int gw_front_new(gw_front **out, struct event_base *base, const char *host, int port,
                 const gw_front_limits *lim, gw_front_fn fn, void *arg);
int gw_front_port(const gw_front *f);
/* Stops accepting, closes idle connections, and every other after its reply. */
void gw_front_drain(gw_front *f);
/* Closes every connection: a request not answered yet gets its cancel callback. */
void gw_front_free(gw_front *f);

/* ---- a request: valid from the callback until gw_req_reply or its cancel ---- */

const char *gw_req_method(const gw_req *r);
/* The path of the request target, without the query. */
const char *gw_req_path(const gw_req *r);
/* The first value of a field (case-insensitive name), or NULL. */
const char *gw_req_header(const gw_req *r, const char *name);
size_t gw_req_header_count(const gw_req *r, const char *name);
/* Up to max values of a field, the last ones, in arrival order; returns how many. */
size_t gw_req_header_last(const gw_req *r, const char *name, const char **out, size_t max);
/* The peer's address, canonical text. */
const char *gw_req_peer(const gw_req *r);
/* The body, contiguous (len 0: an empty body; never NULL). */
const uint8_t *gw_req_body(gw_req *r, size_t *len);

/* Whether the request came on an HTTP/2 stream. */
bool gw_req_http2(const gw_req *r);

/*
 * Streams (gRPC's streaming methods). The front asks wants() of every
 * HTTP/2 request once its header fields are complete: true hands it to the
 * callback at once, its body to come in pieces through the function given
 * to gw_req_on_data (end: the client has sent all of it). Any request's
 * reply, on HTTP/2 or HTTP/1.1, may be written as it is made:
 * gw_req_stream_open once, gw_req_stream_write any number of times,
 * gw_req_stream_close last (after gw_req_add_trailer); on HTTP/1.1 it goes
 * in chunks. The cancel callback runs if the client resets the stream or
 * goes away before the close.
 */
typedef bool (*gw_front_stream_fn)(const gw_req *r, void *arg);
void gw_front_set_streaming(gw_front *f, gw_front_stream_fn wants, void *arg);
/* Whether r was taken as a stream (its body comes through gw_req_on_data). */
bool gw_req_streaming(const gw_req *r);
typedef void (*gw_req_data_fn)(const uint8_t *data, size_t len, bool end, void *arg);
void gw_req_on_data(gw_req *r, gw_req_data_fn fn, void *arg);
void gw_req_stream_open(gw_req *r, int status, const char *content_type);
void gw_req_stream_write(gw_req *r, const void *data, size_t len);
/* Bytes of a stream not yet taken by the client (HTTP/2: not framed; HTTP/1.1: the output). */
size_t gw_req_stream_pending(const gw_req *r);
/* Ends the reply (with its trailers); r is gone once the stream closes. */
void gw_req_stream_close(gw_req *r);
/*
 * Ends a stream whose client does not read: what waits is dropped and the
 * stream reset with ENHANCE_YOUR_CALM (trailers would wait behind the data
 * flow control holds back; gRPC clients report the reset as
 * RESOURCE_EXHAUSTED); on HTTP/1.1 the connection is closed. r is gone
 * once the stream closes.
 */
void gw_req_stream_abort(gw_req *r);

/* Adds a reply field (Content-Length, Date and Connection are the front's). */
void gw_req_add_header(gw_req *r, const char *name, const char *value);
/*
 * Adds a trailer field, sent after the body (gRPC's grpc-status). HTTP/2
 * only: an HTTP/1.1 reply carries none, and a reply with trailers has no
 * Content-Length.
 */
void gw_req_add_trailer(gw_req *r, const char *name, const char *value);
/* Writes the reply (no body for HEAD); r is gone afterwards. */
void gw_req_reply(gw_req *r, int status, const char *content_type, const void *body, size_t len);
/*
 * fn(arg) runs if the connection goes away before the reply (peer closed,
 * an error, gw_front_free); r is gone afterwards. NULL fn: none.
 */
void gw_req_on_cancel(gw_req *r, void (*fn)(void *arg), void *arg);

#endif
