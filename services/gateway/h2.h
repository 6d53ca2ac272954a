/*
 * h2.c: HTTP/2 in cleartext (h2c, RFC 9113) on a connection of the front,
 * with nghttp2 on the same bufferevent. A connection becomes HTTP/2 in one
 * of two ways: its first bytes are the client preface (prior knowledge, as
 * gRPC clients and `curl --http2-prior-knowledge` connect), or its HTTP/1.1
 * request asks for `Upgrade: h2c` (RFC 7540 §3.2), which is answered 101
 * and becomes stream 1. Every stream's request reaches the front's callback
 * as a gw_req like any other; its reply goes out as HEADERS and DATA.
 *
 * Limits, all from gw_front_limits: SETTINGS_MAX_CONCURRENT_STREAMS
 * (h2_streams_max; a stream over it is refused by nghttp2 with
 * REFUSED_STREAM), SETTINGS_MAX_HEADER_LIST_SIZE and a stream's header bytes
 * (head_max; over it 431), a stream's body (body_max; over it 413), a
 * stream's whole request (request_ms from its HEADERS to its END_STREAM;
 * past it the stream is reset and 408 counted), an idle connection
 * (idle_ms with no stream open: GOAWAY, then close). Replies waiting to be
 * written are bounded as on HTTP/1.1: past OUTPUT_HIGH_BYTES nothing more
 * is framed until the client reads. On drain: GOAWAY with the last stream
 * taken, the open ones are answered, then the connection closes.
 */
#ifndef GW_H2_H
#define GW_H2_H

#include <stdbool.h>
#include <stddef.h>

#include "front_internal.h"

#define GW_H2_PREFACE     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define GW_H2_PREFACE_LEN 24

/* Registers HTTP/2's metrics (at zero until used). 0, or -1 out of memory. */
int gw_h2_metrics_init(void);
/* Makes c an HTTP/2 connection whose input opens with the preface. 0 or -1 (no memory). */
int gw_h2_start(conn *c);
/* Whether the HTTP/1.1 request r asks for h2c in a way this server honours. */
bool gw_h2_wants_upgrade(const gw_req *r);
/*
 * Answers r with 101 and makes c an HTTP/2 connection whose stream 1 is r,
 * handed to the callback. 0; or -1 with nothing written (a malformed
 * HTTP2-Settings, no memory): r is the caller's still, to serve as HTTP/1.1.
 */
int gw_h2_upgrade(conn *c, gw_req *r);

/* The front's events on an HTTP/2 connection. */
void gw_h2_read(conn *c);
void gw_h2_write(conn *c); /* the output drained below its low watermark */
void gw_h2_timer(conn *c);
void gw_h2_drain(conn *c);
/* From front_conn_free: unanswered requests get their cancel callback. */
void gw_h2_free(conn *c);

/* The stream API of front.h (gw_req_on_data, gw_req_stream_*), for HTTP/2 requests. */
void gw_h2_on_data(gw_req *r, gw_req_data_fn fn, void *arg);
bool gw_h2_streaming(const gw_req *r);
void gw_h2_stream_open(gw_req *r, int status, const char *content_type);
void gw_h2_stream_write(gw_req *r, const void *data, size_t len);
void gw_h2_stream_close(gw_req *r);
size_t gw_h2_stream_pending(const gw_req *r);
void gw_h2_stream_abort(gw_req *r);

/* gw_req_reply of a request that came on a stream. */
void gw_h2_reply(gw_req *r, int status, const char *content_type, const void *body, size_t len);

#endif
