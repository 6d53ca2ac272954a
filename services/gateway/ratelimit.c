/*
 * Rate limits: which bucket a request takes a token from, and who decides.
 *
 * Scopes (KEELSON_GATEWAY_RATE_AUTH, KEELSON_GATEWAY_RATE_API):
 * - auth: every public method (sign-up, login, password reset, accepting an
 *   invitation: the calls an attacker can make without a session), keyed by
 *   client address and method. Default 5, refilling 1 every 5 s.
 * - api: every authenticated method, keyed by the caller's tenant, whether
 *   it came with a session or an API key. Default 500 per minute.
 * - resolve: every bearer token the context cache does not know, keyed by
 *   client address, taken before the ResolveContext call it would cost
 *   (KEELSON_GATEWAY_RATE_RESOLVE, default 100, refilling 10 per second). A
 *   made-up token is never cached, so without it every one would cost auth
 *   a call and PostgreSQL a lookup; cached tokens never touch this bucket.
 * - intake: webhooks a provider sends to /webhooks/<provider>/<id>, keyed
 *   by the intake endpoint (KEELSON_GATEWAY_RATE_INTAKE, default 400,
 *   refilling 200 per second): providers send from a few addresses, and
 *   one tenant's flood must not drain another's.
 * - KEELSON_GATEWAY_RATE_OVERRIDES gives single methods their own
 *   parameters (or "off"); an overridden method gets a bucket of its own
 *   (the method joins the key), so it never drains its scope's bucket.
 *
 * Who decides: Redis (redis.c, ratelimit.lua), so that every replica shares
 * one bucket per key. While Redis is unavailable, or a decision fails, the
 * in-process buckets (bucket.c) decide with this replica's share of the
 * parameters (divided by KEELSON_GATEWAY_REPLICAS), so the fleet as a whole
 * stays near the configured rate and no request fails because Redis is down.
 *
 * Leases. A request to Redis per request costs Redis and the gateway a
 * round trip each, which a busy tenant's bucket does not need: when a
 * bucket holds plenty, the gateway takes a lease of tokens at once (cost
 * lease, all or none, in the same script) and spends them itself, one per
 * request, for at most LEASE_TTL_MS. A route's lease is 1% of its bucket's
 * capacity, at most KEELSON_GATEWAY_RATE_LEASE_MAX; under 2 (a bucket
 * under 200, as for the auth scope's defaults) there is none and every
 * request is decided in Redis. A lease Redis refuses (fewer tokens left
 * than the lease) makes the key "low" for LEASE_TTL_MS: its requests are
 * then decided one by one, exactly, and the bucket's last tokens are
 * never held by one replica while another is refused them. The bounds:
 * every request let through took a token from the shared bucket, so no
 * more are admitted than the limit allows; at most lease - 1 tokens per
 * key and replica are held unspent, and those that expire are lost
 * (admission may fall short of the limit by that much per
 * LEASE_TTL_MS). RateLimit-Remaining is then what Redis said at the
 * lease plus what the lease still holds. A lease table slot is taken by
 * key hash; a collision drops the lease it replaces (its tokens are lost,
 * within the same bound).
 *
 * Keys are "a:<method>:<address>", "t:<tenant>", "m:<method>:<tenant>",
 * "r:<address>" and "w:<intake endpoint>"
 * (behind KEELSON_GATEWAY_REDIS_PREFIX in Redis). One longer than
 * GW_LIMIT_KEY_MAX becomes "h:" and the hex SHA-256 of it, so replicas still
 * agree on it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "clientip.h"
#include "config.h"
#include "ratelimit.h"
#include "redis.h"
#include "routes.h"
#include "ks_text.h"
#include "ks_crypto.h"
#include "ks_hmap.h"
#include "ks_log.h"

#define LEASE_SLOTS    4096 /* leases held at once (a power of two) */
#define LEASE_TTL_MS   250  /* a lease's tokens not spent by then are dropped */
#define LEASE_PERMILLE 10   /* a lease: 1% of the bucket's capacity ... */
#define DECISIONS_NAME "keelson_gateway_ratelimit_decisions_total"
#define DECISIONS_HELP "Rate-limit decisions by scope, result and where they were made"
#define ERR_MAX        256

typedef struct lease {
        char key[GW_LIMIT_KEY_MAX + 1];
        size_t key_len;       /* 0: empty */
        int64_t tokens;       /* left to spend */
        int64_t expires_us;   /* gw_bucket_now_us clock */
        int64_t low_until_us; /* a lease refused: decide one by one until then */
        gw_decision granted;  /* Redis's decision on the lease */
} lease;

struct gw_ratelimit {
        gw_redis *redis; /* NULL without KEELSON_REDIS_URL */
        lease *leases;   /* LEASE_SLOTS, by key hash */
        gw_buckets *local;
        gw_route resolve; /* the resolve scope's pseudo-route: its limits, no path */
        int64_t tick_ms;  /* the in-process buckets' clock resolution, rounded up */
        /* [scope][backend: redis, local, lease][limited] */
        ks_counter *decisions[GW_SCOPE_COUNT][3][2];
};

static const char *const scope_names[GW_SCOPE_COUNT] = {"auth", "api", "resolve", "intake"};

/* ---- configuration ---------------------------------------------------------- */

static int fail(char *err, size_t err_len, const char *var, const char *why)
{
        snprintf(err, err_len, "%s: %s", var, why);
        return -1;
}

/* One "Method=SPEC" of the override list. */
static int parse_override(const char *item, size_t len, gw_override *o, char *why, size_t why_len)
{
        char buf[GW_PATH_MAX + 64];
        if (len >= sizeof(buf)) {
                snprintf(why, why_len, "entry too long: \"%.48s...\"", item);
                return -1;
        }
        memcpy(buf, item, len);
        buf[len] = '\0';
        char *eq = strchr(buf, '=');
        if (eq == NULL) {
                snprintf(why, why_len, "\"%.64s\": expected Method=" GW_LIMIT_SPEC_HELP, buf);
                return -1;
        }
        *eq = '\0';
        size_t method_len = (size_t)(eq - buf);
        if (method_len >= sizeof(o->method) || !gw_method_routed(buf)) {
                snprintf(why, why_len,
                         "\"%.64s\" is not a routed method (write package.Service/Method, e.g. "
                         "keelson.auth.v1.AuthService/Login)",
                         buf);
                return -1;
        }
        memcpy(o->method, buf, method_len + 1);
        return gw_limit_parse(eq + 1, &o->limit, &o->off, why, why_len);
}

static int parse_overrides(const char *list, gw_rate_config *out, char *why, size_t why_len)
{
        for (const char *p = list; *p != '\0';) {
                size_t len = strcspn(p, ",");
                const char *item = p;
                while (len > 0 && (*item == ' ' || *item == '\t')) {
                        item++;
                        len--;
                }
                while (len > 0 && (item[len - 1] == ' ' || item[len - 1] == '\t')) {
                        len--;
                }
                if (len > 0) {
                        if (out->n_overrides == GW_OVERRIDES_MAX) {
                                snprintf(why, why_len, "more than %d entries", GW_OVERRIDES_MAX);
                                return -1;
                        }
                        gw_override *o = &out->overrides[out->n_overrides];
                        if (parse_override(item, len, o, why, why_len) != 0) {
                                return -1;
                        }
                        for (int i = 0; i < out->n_overrides; i++) {
                                if (strcmp(out->overrides[i].method, o->method) == 0) {
                                        snprintf(why, why_len, "%s is listed twice", o->method);
                                        return -1;
                                }
                        }
                        out->n_overrides++;
                }
                p += strcspn(p, ",");
                if (*p == ',') {
                        p++;
                }
        }
        return 0;
}

int gw_rate_config_parse(const gw_config *cfg, gw_rate_config *out, char *err, size_t err_len)
{
        char why[ERR_MAX];
        const char *specs[GW_SCOPE_COUNT] = {cfg->rate_auth, cfg->rate_api, cfg->rate_resolve,
                                             cfg->rate_intake};
        const char *vars[GW_SCOPE_COUNT] = {"KEELSON_GATEWAY_RATE_AUTH", "KEELSON_GATEWAY_RATE_API",
                                            "KEELSON_GATEWAY_RATE_RESOLVE",
                                            "KEELSON_GATEWAY_RATE_INTAKE"};
        memset(out, 0, sizeof(*out));
        for (int s = 0; s < GW_SCOPE_COUNT; s++) {
                if (gw_limit_parse(specs[s], &out->scope[s], &out->scope_off[s], why,
                                   sizeof(why)) != 0) {
                        return fail(err, err_len, vars[s], why);
                }
        }
        if (parse_overrides(cfg->rate_overrides, out, why, sizeof(why)) != 0) {
                return fail(err, err_len, "KEELSON_GATEWAY_RATE_OVERRIDES", why);
        }
        if (gw_proxies_parse(cfg->trusted_proxies, &out->proxies, why, sizeof(why)) != 0) {
                return fail(err, err_len, "KEELSON_GATEWAY_TRUSTED_PROXIES", why);
        }
        if (strlen(cfg->redis_prefix) > GW_REDIS_PREFIX_MAX) {
                return fail(err, err_len, "KEELSON_GATEWAY_REDIS_PREFIX", "at most 64 bytes");
        }
        out->has_redis = cfg->redis_url[0] != '\0';
        /* The message never repeats the value: it may hold a password. */
        if (out->has_redis &&
            ks_redis_url_parse(cfg->redis_url, &out->redis, why, sizeof(why)) != 0) {
                return fail(err, err_len, "KEELSON_REDIS_URL", why);
        }
        return 0;
}

/* ---- routes ------------------------------------------------------------------- */

static const gw_override *override_of(const gw_rate_config *rc, const char *method)
{
        for (int i = 0; i < rc->n_overrides; i++) {
                if (strcmp(rc->overrides[i].method, method) == 0) {
                        return &rc->overrides[i];
                }
        }
        return NULL;
}

/* A route's lease: 1% of its capacity, at most max; none under 2. */
static int64_t lease_of(const gw_limit *lim, int64_t max)
{
        int64_t n = lim->capacity * LEASE_PERMILLE / 1000;
        n = n < max ? n : max;
        return n >= 2 ? n : 0;
}

static void route_limit(gw_route *r, const gw_config *cfg)
{
        const gw_rate_config *rc = &cfg->rate;
        r->scope = (r->flags & KS_M_INTAKE) != 0   ? GW_SCOPE_INTAKE
                   : (r->flags & KS_M_PUBLIC) != 0 ? GW_SCOPE_AUTH
                                                   : GW_SCOPE_API;
        r->key_method = r->scope == GW_SCOPE_AUTH;
        r->limited = !rc->scope_off[r->scope];
        r->limit = rc->scope[r->scope];
        const gw_override *o = override_of(rc, r->method);
        if (o != NULL) {
                r->limited = !o->off;
                r->limit = o->limit;
                r->key_method = true;
        }
        r->local = gw_limit_share(&r->limit, cfg->replicas);
        r->lease = lease_of(&r->limit, cfg->rate_lease_max);
}

/* ---- decisions ---------------------------------------------------------------- */

enum { BY_REDIS, BY_LOCAL, BY_LEASE };

static void count(gw_ratelimit *rl, const gw_route *route, int backend, const gw_decision *d)
{
        ks_counter_inc(rl->decisions[route->scope][backend][d->allowed ? 0 : 1]);
}

/*
 * A refusal's retry time gains one tick of the buckets' coarse clock: the
 * next request's reading may lag the real time by up to a tick, and a client
 * that waits exactly what it was told must find its token there.
 */
static void decide_locally(gw_limit_wait *w)
{
        gw_buckets_take(w->rl->local, w->key, w->key_len, &w->route->local, gw_bucket_now_us(),
                        &w->decision);
        if (!w->decision.allowed) {
                w->decision.retry_ms += w->rl->tick_ms;
        }
        count(w->rl, w->route, BY_LOCAL, &w->decision);
}

static void on_redis(void *arg, int rc, const gw_decision *d)
{
        gw_limit_wait *w = arg;
        if (rc == KS_OK) {
                w->decision = *d;
                count(w->rl, w->route, BY_REDIS, d);
        } else {
                decide_locally(w);
        }
        w->done(w);
}

/* The bucket key of a request; long ones are hashed down (see the top). */
static void make_key(gw_limit_wait *w, const char *subject)
{
        const gw_route *r = w->route;
        char full[GW_PATH_MAX + GW_IP_MAX + GW_ID_MAX + 8];
        int n;
        if (r->scope == GW_SCOPE_RESOLVE) {
                n = snprintf(full, sizeof(full), "r:%s", subject);
        } else if (r->scope == GW_SCOPE_INTAKE) {
                n = snprintf(full, sizeof(full), "w:%s", subject);
        } else if (r->scope == GW_SCOPE_AUTH) {
                n = snprintf(full, sizeof(full), "a:%s:%s", r->method, subject);
        } else if (r->key_method) {
                n = snprintf(full, sizeof(full), "m:%s:%s", r->method, subject);
        } else {
                n = snprintf(full, sizeof(full), "t:%s", subject);
        }
        size_t len = n < 0 ? 0 : (size_t)n < sizeof(full) ? (size_t)n : sizeof(full) - 1;
        if (len <= GW_LIMIT_KEY_MAX) {
                memcpy(w->key, full, len + 1);
                w->key_len = len;
                return;
        }
        char hex[2 * KS_SHA256_BYTES + 1];
        ks_sha256_hex(full, len, hex);
        w->key_len = (size_t)snprintf(w->key, sizeof(w->key), "h:%s", hex);
}

/* ---- leases ------------------------------------------------------------------- */

static lease *lease_slot(gw_ratelimit *rl, const char *key, size_t key_len)
{
        uint64_t h = ks_hash64(0x6b65656c736f6e, key, key_len);
        return &rl->leases[h & (LEASE_SLOTS - 1)];
}

static bool lease_is(const lease *l, const char *key, size_t key_len)
{
        return l->key_len == key_len && memcmp(l->key, key, key_len) == 0;
}

/* A token from the key's lease, when it holds one: the decision is made. */
static bool lease_spend(gw_limit_wait *w, int64_t now_us)
{
        lease *l = lease_slot(w->rl, w->key, w->key_len);
        if (!lease_is(l, w->key, w->key_len) || l->tokens < 1 || now_us >= l->expires_us) {
                return false;
        }
        l->tokens--;
        w->decision = l->granted;
        w->decision.remaining = l->granted.remaining + l->tokens;
        count(w->rl, w->route, BY_LEASE, &w->decision);
        return true;
}

/* Recently refused a lease: the bucket is low, decide one by one. */
static bool lease_low(gw_limit_wait *w, int64_t now_us)
{
        lease *l = lease_slot(w->rl, w->key, w->key_len);
        return lease_is(l, w->key, w->key_len) && now_us < l->low_until_us;
}

static void on_lease(void *arg, int rc, const gw_decision *d)
{
        gw_limit_wait *w = arg;
        gw_ratelimit *rl = w->rl;
        int64_t now_us = gw_bucket_now_us();
        if (rc != KS_OK) {
                decide_locally(w);
                w->done(w);
                return;
        }
        lease *l = lease_slot(rl, w->key, w->key_len);
        if (!lease_is(l, w->key, w->key_len)) {
                memset(l, 0, sizeof(*l));
                memcpy(l->key, w->key, w->key_len + 1);
                l->key_len = w->key_len;
        }
        if (!d->allowed) {
                /* Fewer tokens than a lease: this request, and the key's for a while, one by one.
                 */
                l->low_until_us = now_us + LEASE_TTL_MS * 1000;
                if (gw_redis_take(rl->redis, w->key, w->key_len, &w->route->limit, 1, on_redis,
                                  w) != KS_OK) {
                        decide_locally(w);
                        w->done(w);
                }
                return;
        }
        if (now_us >= l->expires_us) {
                l->tokens = 0;
        }
        l->tokens += w->route->lease - 1; /* one is this request's */
        l->expires_us = now_us + LEASE_TTL_MS * 1000;
        l->granted = *d;
        w->decision = *d;
        w->decision.remaining = d->remaining + l->tokens;
        count(rl, w->route, BY_REDIS, &w->decision);
        w->done(w);
}

int gw_ratelimit_take(gw_ratelimit *rl, const gw_route *route, const char *subject,
                      gw_limit_wait *w)
{
        if (rl == NULL || !route->limited) {
                return GW_LIMIT_OFF;
        }
        w->rl = rl;
        w->route = route;
        make_key(w, subject);
        if (route->lease > 0 && gw_redis_up(rl->redis)) {
                int64_t now_us = gw_bucket_now_us();
                if (lease_spend(w, now_us)) {
                        return GW_LIMIT_NOW;
                }
                if (!lease_low(w, now_us) &&
                    gw_redis_take(rl->redis, w->key, w->key_len, &route->limit, route->lease,
                                  on_lease, w) == KS_OK) {
                        return GW_LIMIT_LATER;
                }
        }
        if (gw_redis_take(rl->redis, w->key, w->key_len, &route->limit, 1, on_redis, w) == KS_OK) {
                return GW_LIMIT_LATER;
        }
        decide_locally(w);
        return GW_LIMIT_NOW;
}

int gw_ratelimit_take_resolve(gw_ratelimit *rl, const char *client_ip, gw_limit_wait *w)
{
        return rl != NULL ? gw_ratelimit_take(rl, &rl->resolve, client_ip, w) : GW_LIMIT_OFF;
}

static int64_t ceil_s(int64_t ms)
{
        return (ms + 999) / 1000;
}

void gw_ratelimit_headers(const gw_decision *d, gw_req *req)
{
        char v[KS_DECIMAL_MAX];
        ks_fmt_i64(v, d->limit);
        gw_req_add_header(req, "RateLimit-Limit", v);
        ks_fmt_i64(v, d->remaining);
        gw_req_add_header(req, "RateLimit-Remaining", v);
        ks_fmt_i64(v, ceil_s(d->reset_ms));
        gw_req_add_header(req, "RateLimit-Reset", v);
        if (!d->allowed) {
                int64_t s = ceil_s(d->retry_ms);
                ks_fmt_i64(v, s > 0 ? s : 1);
                gw_req_add_header(req, "Retry-After", v);
        }
}

/* ---- life ------------------------------------------------------------------------ */

static void metrics_init(gw_ratelimit *rl)
{
        static const char *const backend[3] = {"redis", "local", "lease"};
        static const char *const result[2] = {"allowed", "limited"};
        for (int s = 0; s < GW_SCOPE_COUNT; s++) {
                for (int b = 0; b < 3; b++) {
                        for (int d = 0; d < 2; d++) {
                                char labels[96];
                                snprintf(labels, sizeof(labels),
                                         "scope=\"%s\",decision=\"%s\",backend=\"%s\"",
                                         scope_names[s], result[d], backend[b]);
                                rl->decisions[s][b][d] = ks_counter_get(
                                    ks_metrics_default(), DECISIONS_NAME, DECISIONS_HELP, labels);
                        }
                }
        }
}

int gw_ratelimit_new(gw_ratelimit **out, struct event_base *base, const gw_config *cfg,
                     gw_routes *routes)
{
        *out = NULL;
        gw_ratelimit *rl = calloc(1, sizeof(*rl));
        if (rl == NULL || (rl->leases = calloc(LEASE_SLOTS, sizeof(lease))) == NULL ||
            gw_buckets_new(&rl->local, (size_t)cfg->rate_local_keys) != 0) {
                if (rl != NULL) {
                        free(rl->leases);
                }
                free(rl);
                return -1;
        }
        metrics_init(rl);
        rl->tick_ms = gw_bucket_clock_tick_ms();
        for (size_t i = 0; i < gw_routes_count(routes); i++) {
                route_limit(gw_routes_at_mut(routes, i), cfg);
        }
        snprintf(rl->resolve.path, sizeof(rl->resolve.path), "resolve");
        rl->resolve.method = rl->resolve.path;
        rl->resolve.service = -1;
        rl->resolve.scope = GW_SCOPE_RESOLVE;
        rl->resolve.limited = !cfg->rate.scope_off[GW_SCOPE_RESOLVE];
        rl->resolve.limit = cfg->rate.scope[GW_SCOPE_RESOLVE];
        rl->resolve.local = gw_limit_share(&rl->resolve.limit, cfg->replicas);
        rl->resolve.lease = lease_of(&rl->resolve.limit, cfg->rate_lease_max);
        if (cfg->rate.has_redis) {
                gw_redis_options o = {
                    .url = cfg->rate.redis,
                    .prefix = cfg->redis_prefix,
                    .timeout_ms = (int)cfg->redis_timeout_ms,
                    .retry_max_ms = (int)cfg->redis_retry_ms,
                    .pending_max = (int)cfg->redis_pending_max,
                    .server_time = cfg->redis_server_time,
                };
                int rc = gw_redis_new(&rl->redis, base, &o);
                explicit_bzero(&o.url, sizeof(o.url));
                if (rc != 0) {
                        gw_ratelimit_free(rl);
                        return -1;
                }
        } else {
                ks_log_info(NULL, "no KEELSON_REDIS_URL: rate limits are per replica", NULL);
        }
        *out = rl;
        return 0;
}

void gw_ratelimit_free(gw_ratelimit *rl)
{
        if (rl == NULL) {
                return;
        }
        gw_redis_free(rl->redis); /* decisions in flight end here, decided locally */
        gw_buckets_free(rl->local);
        free(rl->leases);
        free(rl);
}
