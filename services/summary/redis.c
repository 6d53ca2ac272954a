/*
 * The shared cache level and the generation counters, over one synchronous
 * hiredis connection per thread (each RPC worker, the event listener): a
 * worker blocks on PostgreSQL anyway, and a connect and command timeout
 * bound how long Redis can hold it. A failed connection is dropped; the next
 * attempt waits retry_ms, so while Redis is down requests go straight to
 * PostgreSQL instead of each paying a connect timeout.
 */
#include "summary.h"

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
        char val[512];
        redisReply *rep;

        if (sm_counts_format(c, val, sizeof(val)) != 0) {
                return -1;
        }
        rep = command(r, "SET %sv:%s:%" PRId64 " %s PX %" PRId64, r->opts->prefix, tenant, gen, val,
                      ttl_ms);
        if (rep == NULL) {
                return -1;
        }
        freeReplyObject(rep);
        return 0;
}

/* "v1 computed active invited locked disabled owner admin member viewer pending keys" */
#define FMT_N 11

int sm_counts_format(const sm_counts *c, char *out, size_t len)
{
        int w =
            snprintf(out, len,
                     "v1 %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
                     " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64,
                     c->computed_ms, c->active, c->invited, c->locked, c->disabled, c->owner,
                     c->admin, c->member, c->viewer, c->pending_invitations, c->active_api_keys);

        return w > 0 && (size_t)w < len ? 0 : -1;
}

int sm_counts_parse(const char *s, sm_counts *out)
{
        int64_t *f[FMT_N] = {&out->computed_ms,    &out->active,
                             &out->invited,        &out->locked,
                             &out->disabled,       &out->owner,
                             &out->admin,          &out->member,
                             &out->viewer,         &out->pending_invitations,
                             &out->active_api_keys};
        const char *p = s;
        char *end = NULL;

        if (strncmp(p, "v1 ", 3) != 0) {
                return -1;
        }
        p += 2;
        for (int i = 0; i < FMT_N; i++) {
                if (*p != ' ') {
                        return -1;
                }
                long long v = strtoll(p + 1, &end, 10);
                if (end == p + 1 || v < 0) {
                        return -1;
                }
                *f[i] = (int64_t)v;
                p = end;
        }
        return *p == '\0' ? 0 : -1;
}
