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
 * - Indexed twice: by token hash, and by user id (a doubly linked chain per
 *   user), so an event naming a user and tenant evicts every context of that
 *   user there without a scan. API keys have no user and are indexed by
 *   token only.
 * - Generation: every eviction by event moves it on; a fill started before
 *   (gw_cache_generation, then ResolveContext, then gw_cache_put) is
 *   dropped, because the context it carries may be the one just revoked.
 *
 * The key is the token's SHA-256, never the token: nothing here can leak one.
 * Loop thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "gateway.h"
#include "ks_crypto.h"
#include "ks_metrics.h"

#define NONE              UINT32_MAX
#define CACHE_ENTRIES_MAX (1u << 24)
#define EVICTIONS_NAME    "keelson_gateway_context_cache_evictions_total"
#define EVICTIONS_HELP                                                                             \
        "Contexts dropped from the cache, by reason (lru, expired, revoked, replaced)"

/* replaced: a fresher resolution of the same token took the entry's place. */
enum { REASON_LRU, REASON_EXPIRED, REASON_REVOKED, REASON_REPLACED, REASON_COUNT };

typedef struct entry {
        uint8_t sha[KS_SHA256_BYTES];
        uint64_t hash;      /* of sha */
        uint64_t user_hash; /* of ctx.user_id; meaningful when indexed_by_user */
        int64_t expires_ms; /* monotonic */
        uint32_t chain;     /* next with the same token head; the free list */
        uint32_t user_prev, user_next;
        uint32_t lru_prev, lru_next;
        bool indexed_by_user;
        gw_context ctx;
} entry;

struct gw_cache {
        entry *v;
        uint32_t max, n_used, n_slots; /* n_slots: entries ever handed out */
        uint32_t free_head;
        uint32_t *heads, *user_heads;
        uint64_t mask;
        uint32_t lru_head, lru_tail;
        uint64_t seed;
        uint64_t generation;
        int64_t session_ttl_ms, api_key_ttl_ms;
        ks_counter *hits, *misses, *evictions[REASON_COUNT];
        ks_gauge *entries;
};

/* ---- lists ------------------------------------------------------------------- */

static void lru_unlink(gw_cache *c, uint32_t i)
{
        entry *e = &c->v[i];
        if (e->lru_prev != NONE) {
                c->v[e->lru_prev].lru_next = e->lru_next;
        } else {
                c->lru_head = e->lru_next;
        }
        if (e->lru_next != NONE) {
                c->v[e->lru_next].lru_prev = e->lru_prev;
        } else {
                c->lru_tail = e->lru_prev;
        }
}

static void lru_push_front(gw_cache *c, uint32_t i)
{
        entry *e = &c->v[i];
        e->lru_prev = NONE;
        e->lru_next = c->lru_head;
        if (c->lru_head != NONE) {
                c->v[c->lru_head].lru_prev = i;
        }
        c->lru_head = i;
        if (c->lru_tail == NONE) {
                c->lru_tail = i;
        }
}

static void user_link(gw_cache *c, uint32_t i)
{
        entry *e = &c->v[i];
        uint32_t *head = &c->user_heads[e->user_hash & c->mask];
        e->user_prev = NONE;
        e->user_next = *head;
        if (*head != NONE) {
                c->v[*head].user_prev = i;
        }
        *head = i;
}

static void user_unlink(gw_cache *c, uint32_t i)
{
        entry *e = &c->v[i];
        if (e->user_prev != NONE) {
                c->v[e->user_prev].user_next = e->user_next;
        } else {
                c->user_heads[e->user_hash & c->mask] = e->user_next;
        }
        if (e->user_next != NONE) {
                c->v[e->user_next].user_prev = e->user_prev;
        }
}

static void remove_entry(gw_cache *c, uint32_t i, int reason)
{
        entry *e = &c->v[i];
        uint32_t *link = &c->heads[e->hash & c->mask];
        while (*link != i) {
                link = &c->v[*link].chain;
        }
        *link = e->chain;
        lru_unlink(c, i);
        if (e->indexed_by_user) {
                user_unlink(c, i);
        }
        explicit_bzero(e, sizeof(*e));
        e->chain = c->free_head;
        c->free_head = i;
        c->n_used--;
        ks_counter_inc(c->evictions[reason]);
        ks_gauge_set(c->entries, c->n_used);
}

static uint32_t find(const gw_cache *c, const uint8_t sha[KS_SHA256_BYTES], uint64_t h)
{
        uint32_t i = c->heads[h & c->mask];
        while (i != NONE && (c->v[i].hash != h || memcmp(c->v[i].sha, sha, KS_SHA256_BYTES) != 0)) {
                i = c->v[i].chain;
        }
        return i;
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
        size_t n_heads = 1;
        while (n_heads < 2 * max_entries) {
                n_heads <<= 1;
        }
        c->max = (uint32_t)max_entries;
        c->mask = n_heads - 1;
        c->free_head = NONE;
        c->lru_head = c->lru_tail = NONE;
        c->session_ttl_ms = session_ttl_ms;
        c->api_key_ttl_ms = api_key_ttl_ms;
        c->v = calloc(max_entries, sizeof(*c->v));
        c->heads = malloc(n_heads * sizeof(*c->heads));
        c->user_heads = malloc(n_heads * sizeof(*c->user_heads));
        if (c->v == NULL || c->heads == NULL || c->user_heads == NULL ||
            ks_random_bytes(&c->seed, sizeof(c->seed)) != 0) {
                gw_cache_free(c);
                return -1;
        }
        memset(c->heads, 0xff, n_heads * sizeof(*c->heads));
        memset(c->user_heads, 0xff, n_heads * sizeof(*c->user_heads));
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
        free(c->heads);
        free(c->user_heads);
        free(c);
}

size_t gw_cache_count(const gw_cache *c)
{
        return c != NULL ? c->n_used : 0;
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
        uint32_t i = find(c, sha, gw_hash64(c->seed, sha, KS_SHA256_BYTES));
        if (i != NONE && c->v[i].expires_ms <= now_ms) {
                remove_entry(c, i, REASON_EXPIRED);
                i = NONE;
        }
        if (i == NONE) {
                ks_counter_inc(c->misses);
                return false;
        }
        if (c->lru_head != i) {
                lru_unlink(c, i);
                lru_push_front(c, i);
        }
        *out = c->v[i].ctx;
        ks_counter_inc(c->hits);
        return true;
}

/* A free slot: a released one, a never-used one, or the least recently used. */
static uint32_t take_slot(gw_cache *c)
{
        if (c->free_head != NONE) {
                uint32_t i = c->free_head;
                c->free_head = c->v[i].chain;
                return i;
        }
        if (c->n_slots < c->max) {
                return c->n_slots++;
        }
        remove_entry(c, c->lru_tail, REASON_LRU);
        return take_slot(c); /* the slot just freed */
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
        uint64_t h = gw_hash64(c->seed, sha, KS_SHA256_BYTES);
        uint32_t i = find(c, sha, h);
        if (i != NONE) {
                remove_entry(c, i, REASON_REPLACED); /* a fresher context of the same token */
        }
        i = take_slot(c);
        entry *e = &c->v[i];
        memcpy(e->sha, sha, KS_SHA256_BYTES);
        e->hash = h;
        e->ctx = *ctx;
        e->expires_ms = now_ms + ttl_ms;
        e->chain = c->heads[h & c->mask];
        c->heads[h & c->mask] = i;
        lru_push_front(c, i);
        e->indexed_by_user = ctx->user_id[0] != '\0';
        if (e->indexed_by_user) {
                e->user_hash = gw_hash64(c->seed, ctx->user_id, strlen(ctx->user_id));
                user_link(c, i);
        }
        c->n_used++;
        ks_gauge_set(c->entries, c->n_used);
}

/* ---- evictions ---------------------------------------------------------------------- */

size_t gw_cache_evict_token(gw_cache *c, const uint8_t sha[KS_SHA256_BYTES])
{
        if (c == NULL) {
                return 0;
        }
        c->generation++;
        uint32_t i = find(c, sha, gw_hash64(c->seed, sha, KS_SHA256_BYTES));
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
        uint32_t i = c->user_heads[gw_hash64(c->seed, user_id, strlen(user_id)) & c->mask];
        while (i != NONE) {
                uint32_t next = c->v[i].user_next; /* remove_entry clears i */
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
        for (uint32_t i = c->lru_head; i != NONE;) {
                uint32_t next = c->v[i].lru_next;
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
        while (c->lru_head != NONE) {
                remove_entry(c, c->lru_head, REASON_REVOKED);
                n++;
        }
        return n;
}
