/*
 * webhook_sink: a tenant's webhook URL, for the delivery tests. A small
 * HTTP/1.1 server on 127.0.0.1 (a free port the kernel picks) that records
 * every request it is sent and answers as a test scripts it.
 *
 *   wsink *s;
 *   assert_int_equal(wsink_start(&s), 0);
 *   wsink_answer(s, 2, 500, 0);           (the first 2 requests: 500 at once)
 *   wsink_default(s, 200, 0);             (every later one: 200; the default)
 *   wsink_url(s, "127.0.0.1", url, sizeof(url));      (http://127.0.0.1:<port>/hook)
 *   ... a subscription to url, an event ...
 *   assert_int_equal(wsink_wait(s, NULL, invoice_id, 3, 30000), 3);
 *   wsink_request r;
 *   assert_int_equal(wsink_get(s, NULL, invoice_id, 0, &r), 0);  (the first match, copied)
 *   ... r.webhook_id, r.body ...
 *   wsink_request_free(&r);
 *   wsink_stop(s);
 *
 * What it speaks: requests with a Content-Length body (or none), several on
 * one connection (keep-alive, as libcurl reuses connections; pipelined ones
 * too), "Expect: 100-continue" answered. A chunked body is answered 501 and
 * the connection closed, unrecorded; so is a head or body past its limit
 * (431, 413). Every answer carries a Content-Length; HTTP/1.0 and
 * "Connection: close" close after it.
 *
 * The script: steps taken in arrival order, each for its count of
 * requests, then the default. A request takes its step when its body has
 * come (it is recorded then, with the time), waits the step's delay, then
 * is answered. Each connection has a thread of its own, so one delayed
 * answer holds up no other connection. A client that gave up meanwhile
 * (closed) is no error: its request stays recorded.
 *
 * Thread-safe: every function may be called from any thread. None uses
 * cmocka: they return a status. Limits: WSINK_CONNS_MAX connections at once
 * (more are closed at once), WSINK_REQUESTS_MAX requests recorded (more are
 * answered 503), bodies of WSINK_BODY_MAX bytes.
 */
#ifndef WEBHOOK_SINK_H
#define WEBHOOK_SINK_H

#include <stddef.h>
#include <stdint.h>

#define WSINK_CONNS_MAX    64
#define WSINK_REQUESTS_MAX 4096
#define WSINK_STEPS_MAX    32
#define WSINK_HEAD_MAX     16384           /* bytes of a request's line and headers */
#define WSINK_BODY_MAX     (1024 * 1024)   /* bytes of a request's body */
#define WSINK_DELAY_MAX_MS (5 * 60 * 1000) /* a step's delay */
#define WSINK_VALUE_MAX    512             /* a recorded header's value (longer: cut) */

typedef struct wsink wsink;

/* One request as it came. */
typedef struct wsink_request {
        int n;         /* its place in arrival order, from 0 */
        int64_t at_ms; /* Unix ms when it had come whole */
        int status;    /* what the script answered it */
        char method[16];
        char target[256];
        char host[256];
        char content_type[128];
        char webhook_id[WSINK_VALUE_MAX];
        char webhook_timestamp[64];
        char webhook_signature[WSINK_VALUE_MAX];
        char *body; /* body_len bytes and a NUL; owned (wsink_request_free) */
        size_t body_len;
} wsink_request;

/* Starts a sink on 127.0.0.1, a free port: 0 with *out, or -1 (errno-style reason on stderr). */
int wsink_start(wsink **out);
/* Closes its connections, joins its threads, frees it and what it recorded. NULL is ignored. */
void wsink_stop(wsink *s);

int wsink_port(const wsink *s);
/* "http://<host>:<port>/hook" into out. */
void wsink_url(const wsink *s, const char *host, char *out, size_t out_len);

/*
 * Appends a step: the next count requests (after those of the steps before)
 * are answered status after delay_ms. 0, or -1 when the script is full or
 * an argument is out of bounds (status 100..599 but not 1xx, delay
 * 0..WSINK_DELAY_MAX_MS).
 */
int wsink_answer(wsink *s, int count, int status, int delay_ms);
/* What every request beyond the script is answered (200 at once until set). 0 or -1. */
int wsink_default(wsink *s, int status, int delay_ms);

/*
 * How many recorded requests match: webhook_id equal to theirs (NULL: any)
 * and needle in their body (NULL: any).
 */
int wsink_count(wsink *s, const char *webhook_id, const char *needle);
/*
 * Waits (at most timeout_ms) until k requests match; returns how many do
 * (k or more on success, fewer when the time ran out).
 */
int wsink_wait(wsink *s, const char *webhook_id, const char *needle, int k, long timeout_ms);
/* A copy of the i-th (from 0, arrival order) matching request: 0, or -1 when there is none. */
int wsink_get(wsink *s, const char *webhook_id, const char *needle, int i, wsink_request *out);
void wsink_request_free(wsink_request *r);
/*
 * The distinct webhook-ids of the requests whose body holds needle (NULL:
 * all), in order of first arrival, into ids (at most max): how many.
 */
int wsink_ids(wsink *s, const char *needle, char (*ids)[WSINK_VALUE_MAX], int max);

/* Unix ms now (the clock of at_ms). */
int64_t wsink_now_ms(void);

#endif
