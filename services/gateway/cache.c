/*
 * The context cache: SHA-256 of a bearer token -> the caller it resolved to,
 * so that a token costs one ResolveContext per TTL instead of one per request.
 *
 * - Bounded: a fixed array of max_entries; a new token past that evicts the
 *   least recently used one.
 * - TTL: KEELSON_GATEWAY_CACHE_SESSION_TTL_S for sessions, ..._API_KEY_TTL_S
 *   for API keys, and never past the expiry auth gave for the session or
 *   key. The TTL is only the floor for a lost event: logout, revocation and
 *   role changes arrive as auth.context_revoked (events.c) and evict at once.
 * - Indexed twice (two ks_hmap over the same slots, ordered by one ks_lru):
 *   by token hash, and by user id, so an event naming a user and tenant
 *   evicts every context of that user there without a scan. API keys have no user and are indexed
 * by token only.
 * - Generation: every eviction by event moves it on; a fill started before
 *   (gw_cache_generation, then ResolveContext, then gw_cache_put) is
 *   dropped, because the context it carries may be the one just revoked.
 *
 * The key is the token's SHA-256, never the token: nothing here can leak one.
 * Loop thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "ks_crypto.h"
#include "ks_hmap.h"
#include "ks_lru.h"
#include "ks_metrics.h"

#define NONE              KS_HMAP_NONE
#define CACHE_ENTRIES_MAX (1u << 24)
#define EVICTIONS_NAME    "keelson_gateway_context_cache_evictions_total"
#define EVICTIONS_HELP                                                                             \
        "Contexts dropped from the cache, by reason (lru, expired, revoked, replaced)"

/* replaced: a fresher resolution of the same token took the entry's place. */
enum { REASON_LRU, REASON_EXPIRED, REASON_REVOKED, REASON_REPLACED, REASON_COUNT };

typedef struct entry {
        uint8_t sha[KS_SHA256_BYTES];
        int64_t expires_ms; /* monotonic */
        bool indexed_by_user;
        gw_context ctx;
} entry;

struct gw_cache {
        entry *v;         /* max of them, indexed by slot */
        ks_hmap by_token; /* sha -> slot */
        ks_hmap by_user;  /* ctx.user_id -> its slots (many per user) */
        ks_lru lru;       /* slot order of use */
        uint32_t max;
        uint64_t generation;
        int64_t session_ttl_ms, api_key_ttl_ms;
        ks_counter *hits, *misses, *evictions[REASON_COUNT];
        ks_gauge *entries;
};

/* ---- the indexes ------------------------------------------------------------ */

static uint64_t user_hash(const gw_cache *c, const char *user_id)
{
        return ks_hmap_hash(&c->by_user, user_id, strlen(user_id));
}

/* Takes slot i out of both indexes and wipes it; the caller decides about the slot. */
static void forget(gw_cache *c, uint32_t i, int reason)
{
        ks_hmap_remove(&c->by_token, i);
        if (c->v[i].indexed_by_user) {
                ks_hmap_remove(&c->by_user, i);
        }
        explicit_bzero(&c->v[i], sizeof(c->v[i]));
        ks_counter_inc(c->evictions[reason]);
}

static void remove_entry(gw_cache *c, uint32_t i, int reason)
{
        forget(c, i, reason);
        ks_lru_release(&c->lru, i);
        ks_gauge_set(c->entries, ks_lru_count(&c->lru));
}

static uint32_t find(const gw_cache *c, const uint8_t sha[KS_SHA256_BYTES], uint64_t h)
{
        for (uint32_t i = ks_hmap_first(&c->by_token, h); i != NONE;
             i = ks_hmap_next(&c->by_token, i)) {
                if (memcmp(c->v[i].sha, sha, KS_SHA256_BYTES) == 0) {
                        return i;
                }
        }
        return NONE;
}

/* ---- life ---------------------------------------------------------------------- */

static void metrics_init(gw_cache *c)
{
        ks_metrics *m = ks_metrics_default();
        static const char *const reasons[REASON_COUNT] = {
            "reason=\"lru\"", "reason=\"expired\"", "reason=\"revoked\"", "reason=\"replaced\""};
        c->hits = ks_counter_get(m, "keelson_gateway_context_cache_hits_total",
                                 "Authenticated requests whose caller came from the cache", NULL);
        c->misses = ks_counter_get(m, "keelson_gateway_context_cache_misses_total",
                                   "Authenticated requests that had to resolve their token", NULL);
        for (int r = 0; r < REASON_COUNT; r++) {
                c->evictions[r] = ks_counter_get(m, EVICTIONS_NAME, EVICTIONS_HELP, reasons[r]);
        }
        c->entries =
            ks_gauge_get(m, "keelson_gateway_context_cache_entries", "Contexts in the cache", NULL);
}

int gw_cache_new(gw_cache **out, size_t max_entries, int64_t session_ttl_ms, int64_t api_key_ttl_ms)
{
        *out = NULL;
        if (max_entries == 0) {
                return 0;
        }
        if (max_entries > CACHE_ENTRIES_MAX) {
                return -1;
        }
        gw_cache *c = calloc(1, sizeof(*c));
        if (c == NULL) {
                return -1;
        }
        c->max = (uint32_t)max_entries;
        c->session_ttl_ms = session_ttl_ms;
        c->api_key_ttl_ms = api_key_ttl_ms;
        c->v = calloc(max_entries, sizeof(*c->v));
        if (c->v == NULL || ks_hmap_init(&c->by_token, c->max) != 0 ||
            ks_hmap_init(&c->by_user, c->max) != 0 || ks_lru_init(&c->lru, c->max) != 0) {
                gw_cache_free(c);
                return -1;
        }
        metrics_init(c);
        *out = c;
        return 0;
}

void gw_cache_free(gw_cache *c)
{
        if (c == NULL) {
                return;
        }
        if (c->v != NULL) {
                explicit_bzero(c->v, (size_t)c->max * sizeof(*c->v));
        }
        free(c->v);
        ks_hmap_fini(&c->by_token);
        ks_hmap_fini(&c->by_user);
        ks_lru_fini(&c->lru);
        free(c);
}

size_t gw_cache_count(const gw_cache *c)
{
        return c != NULL ? ks_lru_count(&c->lru) : 0;
}

uint64_t gw_cache_generation(const gw_cache *c)
{
        return c != NULL ? c->generation : 0;
}

/* ---- lookups and fills ------------------------------------------------------------ */

bool gw_cache_get(gw_cache *c, const uint8_t sha[KS_SHA256_BYTES], int64_t now_ms, gw_context *out)
{
        if (c == NULL) {
                return false;
        }
        uint32_t i = find(c, sha, ks_hmap_hash(&c->by_token, sha, KS_SHA256_BYTES));
        if (i != NONE && c->v[i].expires_ms <= now_ms) {
                remove_entry(c, i, REASON_EXPIRED);
                i = NONE;
        }
        if (i == NONE) {
                ks_counter_inc(c->misses);
                return false;
        }
        ks_lru_touch(&c->lru, i);
        *out = c->v[i].ctx;
        ks_counter_inc(c->hits);
        return true;
}

/* A free slot: a released one, a never-used one, or the least recently used. */
static uint32_t take_slot(gw_cache *c)
{
        bool evicted;
        uint32_t i = ks_lru_take(&c->lru, &evicted);
        if (evicted) {
                forget(c, i, REASON_LRU);
        }
        return i;
}

void gw_cache_put(gw_cache *c, const uint8_t sha[KS_SHA256_BYTES], const gw_context *ctx,
                  uint64_t generation, int64_t now_ms, int64_t now_unix_ms)
{
        if (c == NULL || generation != c->generation) {
                return; /* an eviction happened while this was being resolved */
        }
        int64_t ttl_ms = ctx->api_key_id[0] != '\0' ? c->api_key_ttl_ms : c->session_ttl_ms;
        if (ctx->expires_at_unix_ms > 0 && ctx->expires_at_unix_ms - now_unix_ms < ttl_ms) {
                ttl_ms = ctx->expires_at_unix_ms - now_unix_ms;
        }
        if (ttl_ms <= 0) {
                return;
        }
        uint64_t h = ks_hmap_hash(&c->by_token, sha, KS_SHA256_BYTES);
        uint32_t i = find(c, sha, h);
        if (i != NONE) {
                remove_entry(c, i, REASON_REPLACED); /* a fresher context of the same token */
        }
        i = take_slot(c);
        entry *e = &c->v[i];
        memcpy(e->sha, sha, KS_SHA256_BYTES);
        e->ctx = *ctx;
        e->expires_ms = now_ms + ttl_ms;
        ks_hmap_insert(&c->by_token, i, h);
        e->indexed_by_user = ctx->user_id[0] != '\0';
        if (e->indexed_by_user) {
                ks_hmap_insert(&c->by_user, i, user_hash(c, ctx->user_id));
        }
        ks_gauge_set(c->entries, ks_lru_count(&c->lru));
}

/* ---- evictions ---------------------------------------------------------------------- */

size_t gw_cache_evict_token(gw_cache *c, const uint8_t sha[KS_SHA256_BYTES])
{
        if (c == NULL) {
                return 0;
        }
        c->generation++;
        uint32_t i = find(c, sha, ks_hmap_hash(&c->by_token, sha, KS_SHA256_BYTES));
        if (i == NONE) {
                return 0;
        }
        remove_entry(c, i, REASON_REVOKED);
        return 1;
}

size_t gw_cache_evict_user(gw_cache *c, const char *user_id, const char *tenant_id)
{
        if (c == NULL || user_id[0] == '\0') {
                return 0;
        }
        c->generation++;
        size_t n = 0;
        uint32_t i = ks_hmap_first(&c->by_user, user_hash(c, user_id));
        while (i != NONE) {
                uint32_t next = ks_hmap_next(&c->by_user, i); /* remove_entry clears i */
                const gw_context *ctx = &c->v[i].ctx;
                if (strcmp(ctx->user_id, user_id) == 0 &&
                    (tenant_id[0] == '\0' || strcmp(ctx->tenant_id, tenant_id) == 0)) {
                        remove_entry(c, i, REASON_REVOKED);
                        n++;
                }
                i = next;
        }
        return n;
}

size_t gw_cache_evict_api_key(gw_cache *c, const char *api_key_id)
{
        if (c == NULL || api_key_id[0] == '\0') {
                return 0;
        }
        c->generation++;
        size_t n = 0;
        for (uint32_t i = ks_lru_newest(&c->lru); i != KS_LRU_NONE;) {
                uint32_t next = ks_lru_older(&c->lru, i);
                if (strcmp(c->v[i].ctx.api_key_id, api_key_id) == 0) {
                        remove_entry(c, i, REASON_REVOKED);
                        n++;
                }
                i = next;
        }
        return n;
}

size_t gw_cache_clear(gw_cache *c)
{
        if (c == NULL) {
                return 0;
        }
        c->generation++;
        size_t n = 0;
        while (ks_lru_newest(&c->lru) != KS_LRU_NONE) {
                remove_entry(c, ks_lru_newest(&c->lru), REASON_REVOKED);
                n++;
        }
        return n;
}
