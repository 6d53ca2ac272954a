/*
 * bench_sink: what the webhook delivery benchmarks share (bench_webhook_send,
 * bench_webhook_deliver) — a receiver of POSTs in the benchmark's own
 * process, and the baseline they are measured against: libcurl's multi
 * interface alone POSTing at it.
 *
 * The sink listens on a free port of 127.0.0.1, a thread per connection,
 * keep-alive: it reads each request whole (by Content-Length), hands it to
 * the hook if there is one, and answers 200 with an empty body.
 *
 *   bench_sink_options o = {.body_bytes_max = 1024, .hook = seen, .hook_arg = &table};
 *   bench_sink *s;
 *   if (bench_sink_start(&s, &o) != 0) { ... errno ... }
 *   ... POST to http://127.0.0.1:<bench_sink_port(s)>/... ...
 *   bench_sink_stop(s);
 */
#ifndef BENCH_SINK_H
#define BENCH_SINK_H

#include <stddef.h>
#include <stdint.h>

#define BENCH_SINK_HEAD_MAX  16384 /* a request's line and headers */
#define BENCH_SINK_CONNS_MAX 4096  /* connections at once; more are closed at accept */

/* One request as read: valid only during the hook's call. */
typedef struct bench_sink_request {
        const char *head; /* request line and headers, head_len bytes, CRLF CRLF included */
        size_t head_len;
        const char *body; /* body_len bytes, not NUL-terminated */
        size_t body_len;
        int64_t arrival_ns; /* CLOCK_MONOTONIC (bench_now_ns) once read whole */
} bench_sink_request;

/* Called on the connection's thread (so concurrently), before the 200 is sent. */
typedef void (*bench_sink_hook)(const bench_sink_request *r, void *arg);

typedef struct bench_sink_options {
        size_t body_bytes_max; /* a larger request closes its connection unanswered */
        bench_sink_hook hook;  /* NULL: none */
        void *hook_arg;
} bench_sink_options;

typedef struct bench_sink bench_sink;

/* Listens and accepts. 0 with *out, or -1 with errno (*out NULL). */
int bench_sink_start(bench_sink **out, const bench_sink_options *o);

/* The port it listens on. */
int bench_sink_port(const bench_sink *s);

/* Connections accepted since the start. */
long bench_sink_accepted(const bench_sink *s);

/*
 * Stops accepting, shuts the connections still open (a client's idle
 * keep-alive ones too) and waits up to 10 s for their threads; frees s
 * then (if some thread is still running, s is left to it). NULL is ignored.
 */
void bench_sink_stop(bench_sink *s);

/*
 * The value of header name (case-insensitive) in r, spaces around it
 * trimmed: its length with *value set, or 0 when absent or empty.
 */
size_t bench_sink_header(const bench_sink_request *r, const char *name, const char **value);

/* The request target of r ("/s1"): its length with *path set, or 0. */
size_t bench_sink_path(const bench_sink_request *r, const char **path);

/* ---- the baseline: POSTs through libcurl's multi interface and nothing else ---------------- */

/*
 * N POSTs, concurrency of them in flight, from the calling thread: an easy
 * handle each, with the webhook sender's hardening options (protocols,
 * no proxy, no signals, its timeouts) and nothing of the sender's own
 * (address policy, queue, copies, destination limits, thread hop). Needs
 * curl_global_init.
 */
typedef struct bench_posts {
        const char *const *urls; /* POST i goes to urls[i % urls_n] */
        size_t urls_n;
        const void *body;
        size_t body_len;
        const char *const *headers; /* "name: value" lines */
        size_t headers_n;
        long n;
        long concurrency;
        int64_t deadline_ns; /* bench_now_ns after which none is started; 0: none */
        int64_t *lat_ns;     /* n slots or NULL: start to end of each POST answered 200 */
} bench_posts;

typedef struct bench_posts_result {
        long done;       /* answered 200 */
        long failed;     /* anything else */
        int64_t wall_ns; /* the first start to the last end */
        int64_t cpu_ns;  /* the calling thread's CPU meanwhile */
} bench_posts_result;

/* 0, or -1 when out of memory or a handle could not be made (out holds what ran). */
int bench_curl_posts(const bench_posts *p, bench_posts_result *out);

/* The calling thread's CPU time in nanoseconds. */
int64_t bench_thread_cpu_ns(void);

#endif
