/*
 * The gateway's Redis client: hiredis 0.14's asynchronous API on the
 * gateway's own libevent loop (hooks as in adapters/libevent.h, with a
 * persistent read event), one connection, many decisions in flight on it
 * (Redis answers in order).
 *
 * The script. Its SHA-1 is computed here from the embedded bytes; every
 * (re)connection sends SCRIPT LOAD once, and every decision is an EVALSHA.
 * A NOSCRIPT answer (SCRIPT FLUSH, a failover to a replica that never saw
 * the script) re-sends that decision as EVAL with the full text, which also
 * loads it for the next ones.
 *
 * Failure. Redis being down is a degraded mode, not an error: gw_redis_take
 * refuses at once while there is no usable connection, and every decision in
 * flight ends with KS_UNAVAILABLE when the connection drops or the oldest one
 * outlives KEELSON_GATEWAY_REDIS_TIMEOUT_MS (the connection is then dropped:
 * a Redis that stopped answering is treated as gone). The caller decides
 * locally instead. The switch is logged once each way and counted; the
 * client reconnects by itself with a backoff (50 ms doubling up to
 * KEELSON_GATEWAY_REDIS_RETRY_MS).
 *
 * hiredis 0.14 ownership rules this file follows:
 * - a reply belongs to hiredis and is freed after the callback returns;
 * - every command callback runs exactly once: with the reply, or with NULL
 *   when the context goes away (our privdata is freed there and only there);
 * - a failed connect calls the connect callback with REDIS_ERR and then
 *   frees the context itself; the disconnect callback runs only for a
 *   context that was connected, while it is being freed: neither may free it;
 * - redisAsyncFree from a reply callback is deferred until it returns;
 *   from a timer it runs at once.
 * r->ac is set to NULL before a context is let go of, whoever frees it, so
 * a late callback of an old context can always tell it is old (lost()).
 */
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ks_clock.h"
#include "ks_code.h"
#include "ks_log.h"
#include "ks_metrics.h"
#include "ratelimit_script.h"
#include "redis.h"

#define CONNECT_TIMEOUT_MS 2000
#define RETRY_FIRST_MS     50
#define NUM_MAX            24
#define ARGS_MAX           9
#define ERRORS_NAME        "keelson_gateway_redis_errors_total"
#define ERRORS_HELP        "Redis failures seen by the rate limiter, by kind"

enum { ERR_CONNECT, ERR_TIMEOUT, ERR_DISCONNECT, ERR_REPLY, ERR_COUNT };

typedef struct op {
        gw_redis *r;
        struct op *prev, *next; /* the pending list, in the order Redis answers */
        int64_t deadline_ns;
        gw_redis_done_fn done;
        void *arg;
        gw_limit lim;
        int64_t cost;   /* tokens taken: 1, or a lease (ratelimit.c) */
        int64_t now_us; /* < 0: Redis TIME */
        bool reloaded;  /* NOSCRIPT seen: sent again as EVAL */
        size_t key_len;
        char key[GW_REDIS_PREFIX_MAX + GW_LIMIT_KEY_MAX];
} op;

struct gw_redis {
        struct event_base *base;
        ks_redis_url url;
        char prefix[GW_REDIS_PREFIX_MAX + 1];
        size_t prefix_len;
        int timeout_ms, retry_max_ms, retry_ms, pending_max;
        bool server_time;
        char sha[41];
        redisAsyncContext *ac; /* NULL while there is no connection */
        bool up;               /* connected and the script loaded */
        bool closing;
        bool said_down;        /* the "unavailable" line was written for this outage */
        bool said_reply_error; /* one line per connection for refused commands */
        int64_t connect_deadline_ns;
        op *head, *tail;
        int n_pending;
        struct event *timer; /* deadlines: the oldest decision, the handshake */
        struct event *retry; /* the next connection attempt */
        ks_gauge *up_gauge;
        ks_counter *fallbacks, *returns, *loads, *errors[ERR_COUNT];
};

static void connect_now(gw_redis *r);

/* ---- the libevent hooks ----------------------------------------------------- */

/*
 * hiredis's own adapter (adapters/libevent.h, 0.14) makes the read event
 * one-shot: libevent then removes it after every read and hiredis adds it
 * back, two epoll_ctl calls per batch of replies. Here the read event is
 * persistent and both events remember whether they are added, so adding an
 * added event costs nothing.
 */
typedef struct ev_hooks {
        redisAsyncContext *ac;
        struct event *rev, *wev;
        bool reading, writing;
} ev_hooks;

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        redisAsyncHandleRead(((ev_hooks *)arg)->ac); /* may free arg (cleanup) */
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        ev_hooks *h = arg;
        h->writing = false; /* one-shot: libevent removed it before calling us */
        redisAsyncHandleWrite(h->ac);
}

static void add_read(void *arg)
{
        ev_hooks *h = arg;
        if (!h->reading && event_add(h->rev, NULL) == 0) {
                h->reading = true;
        }
}

static void del_read(void *arg)
{
        ev_hooks *h = arg;
        if (h->reading) {
                event_del(h->rev);
                h->reading = false;
        }
}

static void add_write(void *arg)
{
        ev_hooks *h = arg;
        if (!h->writing && event_add(h->wev, NULL) == 0) {
                h->writing = true;
        }
}

static void del_write(void *arg)
{
        ev_hooks *h = arg;
        if (h->writing) {
                event_del(h->wev);
                h->writing = false;
        }
}

static void cleanup(void *arg)
{
        ev_hooks *h = arg;
        event_free(h->rev);
        event_free(h->wev);
        free(h);
}

/* redisLibeventAttach, with the hooks above. Returns REDIS_OK or REDIS_ERR. */
static int attach(redisAsyncContext *ac, struct event_base *base)
{
        ev_hooks *h = calloc(1, sizeof(*h));
        if (h == NULL) {
                return REDIS_ERR;
        }
        h->ac = ac;
        h->rev = event_new(base, ac->c.fd, EV_READ | EV_PERSIST, on_readable, h);
        h->wev = event_new(base, ac->c.fd, EV_WRITE, on_writable, h);
        if (h->rev == NULL || h->wev == NULL) {
                if (h->rev != NULL) {
                        event_free(h->rev);
                }
                if (h->wev != NULL) {
                        event_free(h->wev);
                }
                free(h);
                return REDIS_ERR;
        }
        ac->ev.data = h;
        ac->ev.addRead = add_read;
        ac->ev.delRead = del_read;
        ac->ev.addWrite = add_write;
        ac->ev.delWrite = del_write;
        ac->ev.cleanup = cleanup;
        add_read(h);
        add_write(h); /* writable = connected (or failed): hiredis checks which */
        return REDIS_OK;
}

/* ---- the pending list and the timer ----------------------------------------- */

static void pending_push(gw_redis *r, op *o)
{
        o->next = NULL;
        o->prev = r->tail;
        if (r->tail != NULL) {
                r->tail->next = o;
        } else {
                r->head = o;
        }
        r->tail = o;
        r->n_pending++;
}

static void pending_unlink(gw_redis *r, op *o)
{
        if (o->prev != NULL) {
                o->prev->next = o->next;
        } else {
                r->head = o->next;
        }
        if (o->next != NULL) {
                o->next->prev = o->prev;
        } else {
                r->tail = o->prev;
        }
        o->prev = o->next = NULL;
        r->n_pending--;
}

static void arm_at(gw_redis *r, int64_t deadline_ns)
{
        int64_t wait_us = (deadline_ns - ks_mono_ns()) / 1000;
        if (wait_us < 0) {
                wait_us = 0;
        }
        struct timeval tv = {(time_t)(wait_us / 1000000), (suseconds_t)(wait_us % 1000000)};
        evtimer_add(r->timer, &tv);
}

/* Arms the timer for the earliest deadline; a later one re-arms when it fires. */
static void arm(gw_redis *r)
{
        int64_t at = INT64_MAX;
        if (r->ac != NULL && !r->up) {
                at = r->connect_deadline_ns;
        }
        if (r->head != NULL && r->head->deadline_ns < at) {
                at = r->head->deadline_ns;
        }
        if (at != INT64_MAX) {
                arm_at(r, at);
        }
}

/* ---- connection state ---------------------------------------------------------- */

static void schedule_retry(gw_redis *r)
{
        if (r->closing) {
                return;
        }
        struct timeval tv = {r->retry_ms / 1000, (r->retry_ms % 1000) * 1000};
        evtimer_add(r->retry, &tv);
        r->retry_ms = r->retry_ms * 2 < r->retry_max_ms ? r->retry_ms * 2 : r->retry_max_ms;
}

/*
 * The first failure of an outage: logged and counted once, whether Redis was
 * up before or has not answered since the gateway started (a gateway that
 * starts without Redis falls back too, and its recovery is counted later:
 * fallbacks and recoveries stay paired).
 */
static void outage_begins(gw_redis *r, const char *why)
{
        if (r->said_down || r->closing) {
                return;
        }
        r->said_down = true;
        ks_counter_inc(r->fallbacks);
        ks_log_warn(NULL, "redis unavailable: rate limits fall back to in-process buckets",
                    "{s:s,s:s,s:i}", "reason", why, "host", r->url.host, "port", r->url.port);
}

/* The connection ac is gone or going: log the switch once, count it, retry later. */
static void lost(gw_redis *r, const redisAsyncContext *ac, int kind, const char *why)
{
        if (ac == NULL || r->ac != ac) {
                return; /* an old context's last words */
        }
        r->ac = NULL;
        r->up = false;
        ks_counter_inc(r->errors[kind]);
        ks_gauge_set(r->up_gauge, 0);
        outage_begins(r, why);
        schedule_retry(r);
}

/* Lets go of the connection now (a timeout, a failed handshake). */
static void drop(gw_redis *r, int kind, const char *why)
{
        redisAsyncContext *ac = r->ac;
        lost(r, ac, kind, why);
        if (ac != NULL) {
                redisAsyncFree(ac); /* pending callbacks run now (or after the current one) */
        }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        gw_redis *r = arg;
        int64_t now = ks_mono_ns();
        if (r->ac != NULL && !r->up && now >= r->connect_deadline_ns) {
                drop(r, ERR_CONNECT, "no answer to the handshake");
        } else if (r->head != NULL && now >= r->head->deadline_ns) {
                drop(r, ERR_TIMEOUT, "a decision timed out");
        }
        arm(r);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        connect_now(arg);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
        if (status != REDIS_OK) {
                lost(ac->data, ac, ERR_CONNECT, ac->errstr); /* hiredis frees ac */
        }
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
        (void)status;
        lost(ac->data, ac, ERR_DISCONNECT, ac->err != 0 ? ac->errstr : "disconnected");
}

/* AUTH and SELECT: anything but OK ends the connection. */
static void on_setup_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
        redisReply *rep = reply;
        gw_redis *r = privdata;
        if (rep != NULL && rep->type == REDIS_REPLY_ERROR && r->ac == ac) {
                if (!r->said_down) { /* once per outage, not once per attempt */
                        /* The reply text (WRONGPASS, ...) names no secret. */
                        ks_log_error(NULL, "redis refused the connection setup", "{s:s}", "error",
                                     rep->str);
                }
                drop(r, ERR_CONNECT, "setup refused");
        }
}

static void on_script_loaded(redisAsyncContext *ac, void *reply, void *privdata)
{
        redisReply *rep = reply;
        gw_redis *r = privdata;
        if (rep == NULL || r->ac != ac) {
                return;
        }
        if (rep->type != REDIS_REPLY_STRING) {
                if (!r->said_down) {
                        ks_log_error(
                            NULL, "redis did not load the rate-limit script", "{s:s}", "error",
                            rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
                }
                drop(r, ERR_CONNECT, "script not loaded");
                return;
        }
        if (strcmp(rep->str, r->sha) != 0) {
                ks_log_error(NULL, "redis hashed the script differently", "{s:s,s:s}", "ours",
                             r->sha, "redis", rep->str);
        }
        ks_counter_inc(r->loads);
        r->up = true;
        r->said_reply_error = false;
        r->retry_ms = RETRY_FIRST_MS;
        ks_gauge_set(r->up_gauge, 1);
        if (r->said_down) {
                r->said_down = false;
                ks_counter_inc(r->returns);
                ks_log_info(NULL, "redis is back: rate limits are shared again", "{s:s,s:i}",
                            "host", r->url.host, "port", r->url.port);
        } else {
                ks_log_info(NULL, "redis connected", "{s:s,s:i}", "host", r->url.host, "port",
                            r->url.port);
        }
}

static int send_setup(gw_redis *r, redisAsyncContext *ac)
{
        int rc = REDIS_OK;
        if (r->url.password[0] != '\0' && r->url.user[0] != '\0') {
                rc = redisAsyncCommand(ac, on_setup_reply, r, "AUTH %s %s", r->url.user,
                                       r->url.password);
        } else if (r->url.password[0] != '\0') {
                rc = redisAsyncCommand(ac, on_setup_reply, r, "AUTH %s", r->url.password);
        }
        if (rc == REDIS_OK && r->url.db != 0) {
                rc = redisAsyncCommand(ac, on_setup_reply, r, "SELECT %d", r->url.db);
        }
        if (rc == REDIS_OK) {
                rc = redisAsyncCommand(ac, on_script_loaded, r, "SCRIPT LOAD %b", gw_ratelimit_lua,
                                       gw_ratelimit_lua_len);
        }
        return rc;
}

static void connect_now(gw_redis *r)
{
        if (r->closing || r->ac != NULL) {
                return;
        }
        redisAsyncContext *ac = redisAsyncConnect(r->url.host, r->url.port);
        if (ac == NULL || ac->err != 0) {
                outage_begins(r, ac != NULL ? ac->errstr : "out of memory");
                ks_counter_inc(r->errors[ERR_CONNECT]);
                if (ac != NULL) {
                        redisAsyncFree(ac);
                }
                schedule_retry(r);
                return;
        }
        ac->data = r;
        r->ac = ac;
        r->connect_deadline_ns = ks_mono_ns() + (int64_t)CONNECT_TIMEOUT_MS * 1000000;
        if (attach(ac, r->base) != REDIS_OK ||
            redisAsyncSetConnectCallback(ac, on_connect) != REDIS_OK ||
            redisAsyncSetDisconnectCallback(ac, on_disconnect) != REDIS_OK ||
            send_setup(r, ac) != REDIS_OK) {
                drop(r, ERR_CONNECT, "cannot set the connection up");
                return;
        }
        arm(r);
}

/* ---- decisions --------------------------------------------------------------------- */

static void finish_op(op *o, int rc, const gw_decision *d)
{
        o->done(o->arg, rc, d);
        free(o);
}

static void on_decision(redisAsyncContext *ac, void *reply, void *privdata);

/* EVALSHA (or EVAL with the text, after NOSCRIPT) for o; REDIS_OK or REDIS_ERR. */
static int send_op(gw_redis *r, op *o)
{
        char nums[5][NUM_MAX];
        const char *argv[ARGS_MAX];
        size_t lens[ARGS_MAX];
        int argc = 0;
        snprintf(nums[0], NUM_MAX, "%lld", (long long)o->lim.capacity);
        snprintf(nums[1], NUM_MAX, "%lld", (long long)o->lim.refill);
        snprintf(nums[2], NUM_MAX, "%lld", (long long)o->lim.period_us);
        snprintf(nums[3], NUM_MAX, "%lld", (long long)o->cost);
        snprintf(nums[4], NUM_MAX, "%lld", (long long)o->now_us);
        argv[argc] = o->reloaded ? "EVAL" : "EVALSHA";
        lens[argc] = strlen(argv[argc]);
        argc++;
        argv[argc] = o->reloaded ? gw_ratelimit_lua : r->sha;
        lens[argc++] = o->reloaded ? gw_ratelimit_lua_len : strlen(r->sha);
        argv[argc] = "1";
        lens[argc++] = 1;
        argv[argc] = o->key;
        lens[argc++] = o->key_len;
        for (int i = 0; i < (o->now_us < 0 ? 4 : 5); i++) {
                argv[argc] = nums[i];
                lens[argc++] = strlen(nums[i]);
        }
        return redisAsyncCommandArgv(r->ac, on_decision, o, argc, argv, lens);
}

static int parse_decision(const redisReply *rep, const gw_limit *lim, gw_decision *d)
{
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 4) {
                return -1;
        }
        for (size_t i = 0; i < 4; i++) {
                if (rep->element[i]->type != REDIS_REPLY_INTEGER || rep->element[i]->integer < 0) {
                        return -1;
                }
        }
        d->allowed = rep->element[0]->integer == 1;
        d->limit = lim->capacity;
        d->remaining = rep->element[1]->integer;
        d->retry_ms = rep->element[2]->integer;
        d->reset_ms = rep->element[3]->integer;
        return 0;
}

/* NOSCRIPT: the same decision again as EVAL, which loads the script too. */
static bool resend_with_text(gw_redis *r, op *o)
{
        o->reloaded = true;
        o->deadline_ns = ks_mono_ns() + (int64_t)r->timeout_ms * 1000000;
        if (send_op(r, o) != REDIS_OK) {
                return false;
        }
        pending_push(r, o); /* a new command: it answers after those already sent */
        ks_counter_inc(r->loads);
        return true;
}

static void on_decision(redisAsyncContext *ac, void *reply, void *privdata)
{
        op *o = privdata;
        gw_redis *r = o->r;
        redisReply *rep = reply;
        gw_decision d;
        pending_unlink(r, o);
        if (rep == NULL) {
                finish_op(o, KS_UNAVAILABLE, NULL); /* the connection went away */
                return;
        }
        if (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOSCRIPT", 8) == 0 &&
            !o->reloaded && r->ac == ac && resend_with_text(r, o)) {
                return;
        }
        if (parse_decision(rep, &o->lim, &d) != 0) {
                ks_counter_inc(r->errors[ERR_REPLY]);
                if (!r->said_reply_error) {
                        r->said_reply_error = true;
                        ks_log_warn(NULL, "redis refused a rate-limit decision: decided locally",
                                    "{s:s}", "error",
                                    rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
                }
                finish_op(o, KS_UNAVAILABLE, NULL);
                return;
        }
        finish_op(o, KS_OK, &d);
}

int gw_redis_take(gw_redis *r, const char *key, size_t key_len, const gw_limit *lim, int64_t cost,
                  gw_redis_done_fn done, void *arg)
{
        if (r == NULL || !r->up || r->ac == NULL) {
                return KS_UNAVAILABLE;
        }
        if (r->n_pending >= r->pending_max || key_len > GW_LIMIT_KEY_MAX || cost < 1 ||
            cost > lim->capacity) {
                return KS_RESOURCE_EXHAUSTED;
        }
        op *o = calloc(1, sizeof(*o));
        if (o == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        o->r = r;
        o->done = done;
        o->arg = arg;
        o->lim = *lim;
        o->cost = cost;
        o->now_us = -1;
        if (!r->server_time) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                o->now_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
        }
        memcpy(o->key, r->prefix, r->prefix_len);
        memcpy(o->key + r->prefix_len, key, key_len);
        o->key_len = r->prefix_len + key_len;
        o->deadline_ns = ks_mono_ns() + (int64_t)r->timeout_ms * 1000000;
        if (send_op(r, o) != REDIS_OK) {
                free(o);
                return KS_UNAVAILABLE;
        }
        pending_push(r, o);
        if (r->n_pending == 1) {
                arm(r);
        }
        return KS_OK;
}

bool gw_redis_up(const gw_redis *r)
{
        return r != NULL && r->up;
}

/* ---- life ------------------------------------------------------------------------ */

static int script_sha1(char out[41])
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        if (EVP_Digest(gw_ratelimit_lua, gw_ratelimit_lua_len, md, &n, EVP_sha1(), NULL) != 1 ||
            n != 20) {
                return -1;
        }
        for (unsigned int i = 0; i < n; i++) {
                snprintf(out + 2 * i, 3, "%02x", md[i]);
        }
        return 0;
}

static void metrics_init(gw_redis *r)
{
        static const char *const kinds[ERR_COUNT] = {"kind=\"connect\"", "kind=\"timeout\"",
                                                     "kind=\"disconnect\"", "kind=\"reply\""};
        ks_metrics *m = ks_metrics_default();
        r->up_gauge = ks_gauge_get(m, "keelson_gateway_redis_up",
                                   "1 while rate limits are decided in Redis, else 0", NULL);
        r->fallbacks = ks_counter_get(m, "keelson_gateway_ratelimit_fallbacks_total",
                                      "Switches from Redis to the in-process buckets", NULL);
        r->returns = ks_counter_get(m, "keelson_gateway_ratelimit_recoveries_total",
                                    "Switches back from the in-process buckets to Redis", NULL);
        r->loads = ks_counter_get(m, "keelson_gateway_redis_script_loads_total",
                                  "Times the rate-limit script was loaded into Redis", NULL);
        for (int k = 0; k < ERR_COUNT; k++) {
                r->errors[k] = ks_counter_get(m, ERRORS_NAME, ERRORS_HELP, kinds[k]);
        }
}

int gw_redis_new(gw_redis **out, struct event_base *base, const gw_redis_options *o)
{
        *out = NULL;
        gw_redis *r = calloc(1, sizeof(*r));
        if (r == NULL) {
                return -1;
        }
        r->base = base;
        r->url = o->url;
        r->prefix_len = strlen(o->prefix);
        r->timeout_ms = o->timeout_ms;
        r->retry_max_ms = o->retry_max_ms > RETRY_FIRST_MS ? o->retry_max_ms : RETRY_FIRST_MS;
        r->retry_ms = RETRY_FIRST_MS;
        r->pending_max = o->pending_max;
        r->server_time = o->server_time;
        metrics_init(r);
        r->timer = evtimer_new(base, on_timer, r);
        r->retry = evtimer_new(base, on_retry, r);
        if (r->prefix_len > GW_REDIS_PREFIX_MAX || r->timer == NULL || r->retry == NULL ||
            script_sha1(r->sha) != 0) {
                gw_redis_free(r);
                return -1;
        }
        memcpy(r->prefix, o->prefix, r->prefix_len + 1);
        connect_now(r);
        *out = r;
        return 0;
}

void gw_redis_free(gw_redis *r)
{
        if (r == NULL) {
                return;
        }
        r->closing = true;
        redisAsyncContext *ac = r->ac;
        r->ac = NULL;
        r->up = false;
        if (ac != NULL) {
                redisAsyncFree(ac); /* every decision in flight ends with KS_UNAVAILABLE */
        }
        if (r->timer != NULL) {
                event_free(r->timer);
        }
        if (r->retry != NULL) {
                event_free(r->retry);
        }
        explicit_bzero(&r->url, sizeof(r->url));
        free(r);
}
