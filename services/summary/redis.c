/*
 * The shared cache level and the generation counters, over one synchronous
 * hiredis connection per thread (each RPC worker, the event listener): a
 * worker blocks on PostgreSQL anyway, and a connect and command timeout
 * bound how long Redis can hold it. A failed connection is dropped; the next
 * attempt waits retry_ms, so while Redis is down requests go straight to
 * PostgreSQL instead of each paying a connect timeout.
 */
#include "summary.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

void sm_redis_fini(sm_redis *r)
{
        if (r->ctx != NULL) {
                redisFree(r->ctx);
                r->ctx = NULL;
        }
}

/*
 * Connects (with AUTH and SELECT as the URL says) unless connected, or while
 * an earlier failure's retry_ms runs. A refused AUTH or SELECT is a
 * misconfiguration, not an outage: it is logged, at most once per retry.
 */
static int ensure(sm_redis *r)
{
        int64_t now = ks_mono_ms();
        char err[KS_REDIS_ERR_MAX];

        if (r->ctx != NULL) {
                return 0;
        }
        if (now < r->retry_at_ms) {
                return -1;
        }
        int rc =
            ks_redis_url_connect(&r->opts->url, r->opts->timeout_ms, &r->ctx, err, sizeof(err));
        if (rc != KS_OK) {
                if (rc == KS_FAILED_PRECONDITION) {
                        ks_log_warn(NULL, "redis refused the connection's setup", "{s:s}", "error",
                                    err);
                }
                r->retry_at_ms = now + r->opts->retry_ms;
                return -1;
        }
        return 0;
}

/* Runs one command; NULL (connection dropped) when Redis failed or answered an error. */
static redisReply *command(sm_redis *r, const char *fmt, ...)
{
        redisReply *rep;
        va_list ap;

        if (ensure(r) != 0) {
                return NULL;
        }
        va_start(ap, fmt);
        rep = redisvCommand(r->ctx, fmt, ap);
        va_end(ap);
        if (rep == NULL || rep->type == REDIS_REPLY_ERROR) {
                if (rep != NULL) {
                        freeReplyObject(rep);
                }
                sm_redis_fini(r);
                r->retry_at_ms = ks_mono_ms() + r->opts->retry_ms;
                return NULL;
        }
        return rep;
}

int sm_redis_gen(sm_redis *r, const char *tenant, int64_t *gen)
{
        redisReply *rep = command(r, "GET %sgen:%s", r->opts->prefix, tenant);
        char *end = NULL;
        int rc = 0;

        *gen = 0;
        if (rep == NULL) {
                return -1;
        }
        if (rep->type == REDIS_REPLY_STRING) {
                long long v = strtoll(rep->str, &end, 10);
                if (end == rep->str || *end != '\0' || v < 0) {
                        rc = -1; /* not ours: never trust it */
                } else {
                        *gen = (int64_t)v;
                }
        } else if (rep->type != REDIS_REPLY_NIL) {
                rc = -1;
        }
        freeReplyObject(rep);
        return rc;
}

int sm_redis_bump(sm_redis *r, const char *tenant)
{
        redisReply *rep = command(r, "INCR %sgen:%s", r->opts->prefix, tenant);
        int rc;

        if (rep == NULL) {
                return -1;
        }
        rc = rep->type == REDIS_REPLY_INTEGER ? 0 : -1;
        freeReplyObject(rep);
        return rc;
}

int sm_redis_get(sm_redis *r, const char *tenant, int64_t gen, sm_counts *out)
{
        redisReply *rep = command(r, "GET %sv:%s:%" PRId64, r->opts->prefix, tenant, gen);
        int rc = 1;

        if (rep == NULL) {
                return -1;
        }
        if (rep->type == REDIS_REPLY_STRING) {
                rc = sm_counts_parse(rep->str, out) == 0 ? 0 : 1;
        }
        freeReplyObject(rep);
        return rc;
}

int sm_redis_put(sm_redis *r, const char *tenant, int64_t gen, const sm_counts *c, int64_t ttl_ms)
{
        char val[SM_VALUE_MAX];
        redisReply *rep;

        if (ttl_ms <= 0 || sm_counts_format(c, val, sizeof(val)) != 0) {
                return ttl_ms <= 0 ? 0 : -1; /* nothing to store, or a bug: never half a value */
        }
        rep = command(r, "SET %sv:%s:%" PRId64 " %s PX %" PRId64, r->opts->prefix, tenant, gen, val,
                      ttl_ms);
        if (rep == NULL) {
                return -1;
        }
        freeReplyObject(rep);
        return 0;
}

/*
 * The value's text, one line of numbers separated by single spaces:
 *
 *   v2 computed active invited locked disabled owner admin member viewer pending keys
 *      billing-available sub-active sub-trialing sub-past-due sub-paused sub-canceled
 *      invoices-open  n (CUR amount)*n  n (CUR amount)*n  n (CUR amount)*n
 *
 * the three lists being MRR, open and past-due amounts (billing-available 0:
 * the billing numbers are 0 and the lists empty). "v1" was the same line up
 * to keys, before billing's figures: it is refused, so that a value written
 * by an older replica during a rolling deploy is a miss, computed again.
 * Counts are never negative; amounts may be (billing's own arithmetic says
 * what they are).
 */
#define AUTH_N    11 /* computed and the ten counts */
#define BILLING_N 6

typedef struct out_buf {
        char *p;
        size_t len, used;
        bool full;
} out_buf;

static void put(out_buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(out_buf *o, const char *fmt, ...)
{
        va_list ap;
        int w;

        if (o->full) {
                return;
        }
        va_start(ap, fmt);
        w = vsnprintf(o->p + o->used, o->len - o->used, fmt, ap);
        va_end(ap);
        if (w < 0 || (size_t)w >= o->len - o->used) {
                o->full = true;
                return;
        }
        o->used += (size_t)w;
}

static void put_amounts(out_buf *o, const sm_amounts *a)
{
        put(o, " %" PRIu32, a->n);
        for (uint32_t i = 0; i < a->n && i < SM_CURRENCIES_MAX; i++) {
                put(o, " %s %" PRId64, a->v[i].currency, a->v[i].amount);
        }
}

int sm_counts_format(const sm_counts *c, char *out, size_t len)
{
        const sm_billing *b = &c->billing;
        out_buf o = {.p = out, .len = len};

        if (len == 0 || b->mrr.n > SM_CURRENCIES_MAX || b->open_amount.n > SM_CURRENCIES_MAX ||
            b->past_due_amount.n > SM_CURRENCIES_MAX) {
                return -1;
        }
        put(&o,
            "v2 %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
            " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64,
            c->computed_ms, c->active, c->invited, c->locked, c->disabled, c->owner, c->admin,
            c->member, c->viewer, c->pending_invitations, c->active_api_keys);
        put(&o, " %d %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64,
            b->available ? 1 : 0, b->active, b->trialing, b->past_due, b->paused, b->canceled,
            b->invoices_open);
        put_amounts(&o, &b->mrr);
        put_amounts(&o, &b->open_amount);
        put_amounts(&o, &b->past_due_amount);
        return o.full ? -1 : 0;
}

/* " <integer>" at *p, advancing; min bounds it below. */
static bool take_int(const char **p, int64_t min, int64_t *out)
{
        char first, *end = NULL;
        long long v;

        if (**p != ' ') {
                return false; /* the end of the text too: nothing past it is read */
        }
        /* strtoll alone would take another space, a '+' or nothing at all */
        first = (*p)[1];
        if (!(first == '-' || (first >= '0' && first <= '9'))) {
                return false;
        }
        errno = 0;
        v = strtoll(*p + 1, &end, 10);
        if (end == *p + 1 || errno != 0 || v < min) {
                return false;
        }
        *out = (int64_t)v;
        *p = end;
        return true;
}

/* " <CUR>" at *p, advancing: exactly three upper-case letters. */
static bool take_currency(const char **p, char out[SM_CURRENCY_LEN + 1])
{
        const char *s = *p;

        if (s[0] != ' ') {
                return false;
        }
        for (int i = 1; i <= SM_CURRENCY_LEN; i++) {
                if (s[i] < 'A' || s[i] > 'Z') {
                        return false;
                }
        }
        memcpy(out, s + 1, SM_CURRENCY_LEN);
        out[SM_CURRENCY_LEN] = '\0';
        *p = s + 1 + SM_CURRENCY_LEN;
        return true;
}

static bool take_amounts(const char **p, sm_amounts *a)
{
        int64_t n;

        if (!take_int(p, 0, &n) || n > SM_CURRENCIES_MAX) {
                return false;
        }
        a->n = (uint32_t)n;
        for (uint32_t i = 0; i < a->n; i++) {
                if (!take_currency(p, a->v[i].currency) ||
                    !take_int(p, INT64_MIN, &a->v[i].amount)) {
                        return false;
                }
        }
        return true;
}

int sm_counts_parse(const char *s, sm_counts *out)
{
        int64_t *auth[AUTH_N] = {&out->computed_ms,    &out->active,
                                 &out->invited,        &out->locked,
                                 &out->disabled,       &out->owner,
                                 &out->admin,          &out->member,
                                 &out->viewer,         &out->pending_invitations,
                                 &out->active_api_keys};
        sm_billing *b = &out->billing;
        int64_t *billing[BILLING_N] = {&b->active, &b->trialing, &b->past_due,
                                       &b->paused, &b->canceled, &b->invoices_open};
        const char *p = s;
        int64_t available;

        memset(out, 0, sizeof(*out));
        if (strncmp(p, "v2 ", 3) != 0) {
                return -1; /* "v1" (before billing's figures) or not ours */
        }
        p += 2;
        for (int i = 0; i < AUTH_N; i++) {
                if (!take_int(&p, 0, auth[i])) {
                        return -1;
                }
        }
        if (!take_int(&p, 0, &available) || available > 1) {
                return -1;
        }
        b->available = available == 1;
        for (int i = 0; i < BILLING_N; i++) {
                if (!take_int(&p, 0, billing[i])) {
                        return -1;
                }
        }
        if (!take_amounts(&p, &b->mrr) || !take_amounts(&p, &b->open_amount) ||
            !take_amounts(&p, &b->past_due_amount)) {
                return -1;
        }
        return *p == '\0' ? 0 : -1;
}
