/*
 * sender: the HTTP attempts of keelson-webhook, one POST each.
 *
 * The delivery scheduler decides what to send, when, and what an outcome
 * means for the next try; the sender only performs one attempt and reports
 * how it ended. It owns one thread that drives libcurl's multi interface:
 * wh_sender_submit copies the attempt into a bounded queue and returns at
 * once; the thread starts it when a slot is free, and calls the attempt's
 * callback, on the sender's thread, exactly once.
 *
 *   wh_sender_options o;
 *   wh_sender_options_init(&o);          (the defaults; then the service's config)
 *   o.allow = &policy;                   (addrpolicy.h; NULL: nothing beyond the public Internet)
 *   if ((rc = wh_sender_new(&s, &o)) != KS_OK) { ... }
 *   wh_header h[] = {{"webhook-id", id}, {"webhook-timestamp", ts},
 *                    {"webhook-signature", sig}, {"content-type", "application/json"}};
 *   wh_attempt a = {.url = url, .body = json, .body_len = n, .headers = h, .headers_n = 4};
 *   rc = wh_sender_submit(s, &a, on_done, delivery);   (KS_RESOURCE_EXHAUSTED: busy, later)
 *   ...
 *   wh_sender_free(s);                   (what has not ended ends as WH_SHUTDOWN)
 *
 * Limits. At most attempts_max attempts run at once, and at most
 * destination_attempts_max of them to one destination, so that endpoints
 * that hang cannot take every slot. A destination is the URL's host (as
 * written, lowercased) and port: "hooks.example.com:443". Waiting attempts
 * start round-robin across destinations, in submission order within one.
 *
 * What it refuses to do (docs/security.md, "Outbound webhooks: request
 * forgery"): schemes other than http and https; credentials in the URL;
 * following a redirect (a 3xx is an outcome, WH_HTTP_ERROR); a proxy from
 * the environment; connecting to an address the address policy refuses.
 * That check runs on the very address libcurl is about to connect to, after
 * DNS, for every address it tries, so a name that resolves to a public
 * address when checked and to 127.0.0.1 when connected (DNS rebinding) gains
 * nothing: a refused address gets no socket and no byte. TLS certificates
 * and host names are verified against the system's CAs.
 */
#ifndef WH_SENDER_H
#define WH_SENDER_H

#include <stddef.h>
#include <stdint.h>

#include "addrpolicy.h"
#include "ks_code.h"
#include "ks_metrics.h"

#define WH_URL_BYTES_MAX            2048 /* a URL, NUL excluded */
#define WH_HOST_BYTES_MAX           253  /* a host in a URL: a DNS name's longest */
#define WH_HEADERS_MAX              16   /* headers of one attempt */
#define WH_HEADER_NAME_MAX          64   /* bytes of a header's name */
#define WH_ATTEMPT_HEADER_BYTES_MAX 2048 /* bytes of a header's name and value together */
#define WH_USER_AGENT_BYTES_MAX     128

/* How an attempt ended. */
typedef enum wh_outcome {
        WH_DELIVERED = 0,      /* a 2xx response */
        WH_HTTP_ERROR,         /* another status: 1xx, 3xx (never followed), 4xx, 5xx */
        WH_TIMEOUT,            /* connect_timeout_ms or timeout_ms passed first */
        WH_CONNECT_FAILED,     /* no TCP connection to any allowed address of the host */
        WH_DNS_FAILED,         /* the host name did not resolve */
        WH_REFUSED_ADDRESS,    /* every address tried is refused by the address policy */
        WH_TLS_FAILED,         /* TLS handshake, certificate or host name verification */
        WH_PROTOCOL_ERROR,     /* connected, but no valid response: closed, reset, garbage */
        WH_RESPONSE_TOO_LARGE, /* the response passed response_bytes_max (http_status says
                                * whether its head had come: a 2xx there was received) */
        WH_INVALID_URL,        /* unparsable, too long, not http(s), credentials in it */
        WH_SHUTDOWN,           /* wh_sender_free came first; it may have been received */
        WH_SEND_INTERNAL,      /* out of memory, a libcurl call of ours failed */
        WH_OUTCOME_COUNT
} wh_outcome;

/*
 * Whether the sender would attempt url, checked as every attempt is (an
 * attempt at a URL refused here ends WH_INVALID_URL): at most
 * WH_URL_BYTES_MAX bytes, parsed as libcurl parses it, http or https, no
 * credentials, no IPv6 zone, a host of at most WH_HOST_BYTES_MAX bytes. The
 * host is not resolved. KS_OK with the host, as libcurl reads it and
 * lowercased (an IPv6 address without its brackets), in host (host_len:
 * WH_HOST_BYTES_MAX + 1 always suffices); KS_INVALID_ARGUMENT with why set
 * (never quoting the URL); KS_INTERNAL when memory is out.
 */
int wh_url_check(const char *url, char *host, size_t host_len, char *why,
                 size_t why_len) KS_MUST_CHECK;

/* "delivered", "http_error", ...: the names used in metrics and logs. */
const char *wh_outcome_name(wh_outcome o);

/*
 * What the callback receives. Only during the call: the struct and the
 * strings it points to are the sender's, reused when the callback returns.
 */
typedef struct wh_result {
        wh_outcome outcome;
        int http_status;       /* the final response's status; 0 when none came */
        int64_t latency_us;    /* from the attempt's start to its end; 0 if it never started */
        int64_t retry_after_s; /* Retry-After in seconds (a date: from now); -1: none */
        const char *excerpt;   /* the body's first bytes, NUL-terminated (may hold NULs too) */
        size_t excerpt_len;    /* at most excerpt_bytes_max */
        const char *detail;    /* one line for a log or the tenant ("127.0.0.1: loopback",
                                * libcurl's message); never NULL, never secret */
} wh_result;

/* Runs on the sender's thread, once per accepted attempt. It may call wh_sender_submit. */
typedef void (*wh_done_fn)(const wh_result *r, void *user);

typedef struct wh_header {
        const char *name;  /* an HTTP token: "webhook-id" */
        const char *value; /* not empty; no CR, LF or other control character but tab */
} wh_header;

/*
 * One POST. Everything is copied by wh_sender_submit. Without a content-type
 * among the headers the request has none (not libcurl's form type).
 */
typedef struct wh_attempt {
        const char *url;          /* http:// or https://; at most WH_URL_BYTES_MAX bytes */
        const void *body;         /* body_len bytes (NULL when 0), sent as they are */
        size_t body_len;          /* at most the sender's body_bytes_max */
        const wh_header *headers; /* headers_n of them, at most WH_HEADERS_MAX */
        size_t headers_n;
} wh_attempt;

/*
 * Each numeric option has a unit in its name and bounds, checked by
 * wh_sender_new; wh_sender_options_init sets the defaults in brackets.
 */
typedef struct wh_sender_options {
        int64_t attempts_max;             /* running at once, overall: 1..4096 [64] */
        int64_t destination_attempts_max; /* running at once to one destination:
                                           * 1..attempts_max [4] */
        int64_t queue_max;                /* accepted, not yet started: 1..100000 [1024] */
        int64_t connect_timeout_ms;       /* DNS and TCP and TLS: 100..60000 [5000] */
        int64_t timeout_ms;               /* the whole attempt: connect_timeout_ms..300000
                                           * [15000] */
        int64_t body_bytes_max;           /* a request's body: 1..16 MiB [256 KiB] */
        int64_t excerpt_bytes_max;        /* of the response body, kept: 0..64 KiB [1 KiB] */
        int64_t response_bytes_max;       /* of the response, head and body, read before
                                           * giving up: max(1 KiB, excerpt_bytes_max)..16 MiB
                                           * [64 KiB] */
        const char *user_agent;           /* printable ASCII, 1..WH_USER_AGENT_BYTES_MAX bytes
                                           * ["keelson-webhook/1"]; copied */
        const wh_addr_policy *allow;      /* the operator's allow-list; NULL: empty. Copied. */
        ks_metrics *metrics;              /* where the sender's series go; NULL: nowhere.
                                           * Must outlive the sender. */
} wh_sender_options;

/* Fills *o with the defaults (allow and metrics NULL). */
void wh_sender_options_init(wh_sender_options *o);

typedef struct wh_sender wh_sender;

/*
 * Starts a sender (its thread runs until wh_sender_free). Returns KS_OK with
 * *out; KS_INVALID_ARGUMENT when an option is out of its bounds (logged with
 * the option's name and bounds); KS_INTERNAL when memory, libcurl or the
 * thread cannot be had. *out is NULL on error.
 */
int wh_sender_new(wh_sender **out, const wh_sender_options *o) KS_MUST_CHECK;

/*
 * Stops the sender: attempts not yet ended (running, waiting, just
 * submitted) end as WH_SHUTDOWN, each callback called once before this
 * returns; then joins the thread and frees everything. NULL is ignored. Not
 * from a callback, and with no wh_sender_submit running or to come.
 */
void wh_sender_free(wh_sender *s);

/*
 * Queues one attempt; any thread, a callback included. Copies what it needs
 * from *a (the caller keeps a and what it points to). Returns:
 *   KS_OK                  done(result, user) will be called exactly once, on the
 *                          sender's thread; a bad URL is such a result, WH_INVALID_URL;
 *   KS_RESOURCE_EXHAUSTED  busy: queue_max attempts are waiting; try later;
 *   KS_INVALID_ARGUMENT    a caller's mistake: too many headers, a header name not a
 *                          token or one the sender writes itself (host, content-length,
 *                          transfer-encoding, connection, expect, te, trailer, upgrade,
 *                          user-agent), a value with a control character, the body
 *                          longer than body_bytes_max;
 *   KS_UNAVAILABLE         the sender is stopping;
 *   KS_INTERNAL            out of memory.
 * done is never called unless KS_OK.
 */
int wh_sender_submit(wh_sender *s, const wh_attempt *a, wh_done_fn done, void *user) KS_MUST_CHECK;

#endif
