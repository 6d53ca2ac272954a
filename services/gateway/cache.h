/*
 * cache.c: the context cache, SHA-256 of a bearer token -> the caller it
 * resolved to, LRU + TTL, evicted by token, user or API key.
 */
#ifndef GW_CACHE_H
#define GW_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_ID_MAX 64 /* user, tenant, session and API key ids, and the role */

/* A resolved caller, in buffers of its own (copied in and out of the cache). */
typedef struct gw_context {
        char user_id[GW_ID_MAX + 1];
        char tenant_id[GW_ID_MAX + 1];
        char role[GW_ID_MAX + 1];
        char session_id[GW_ID_MAX + 1];
        char api_key_id[GW_ID_MAX + 1];
        int64_t expires_at_unix_ms; /* when the session or key expires; 0 = not said */
} gw_context;

typedef struct gw_cache gw_cache;

/*
 * At most max_entries contexts (0: no cache, *out = NULL), kept for ttl_ms
 * (session_ttl_ms, or api_key_ttl_ms for a context with an api_key_id) and
 * never past their own expiry. Loop thread only.
 */
int gw_cache_new(gw_cache **out, size_t max_entries, int64_t session_ttl_ms,
                 int64_t api_key_ttl_ms);
void gw_cache_free(gw_cache *c);
/* A hit copies the context into *out and returns true. now_ms: monotonic. */
bool gw_cache_get(gw_cache *c, const uint8_t sha[32], int64_t now_ms, gw_context *out);
/*
 * Every eviction by event moves the generation on. Read it before resolving
 * a token and hand it to gw_cache_put: a fill that raced a revocation is
 * dropped, so a context revoked while it was being resolved is never cached.
 */
uint64_t gw_cache_generation(const gw_cache *c);
void gw_cache_put(gw_cache *c, const uint8_t sha[32], const gw_context *ctx, uint64_t generation,
                  int64_t now_ms, int64_t now_unix_ms);
/* Evictions; each returns how many entries went. */
size_t gw_cache_evict_token(gw_cache *c, const uint8_t sha[32]);
/* Every context of user_id in tenant_id, or in every tenant when tenant_id is "". */
size_t gw_cache_evict_user(gw_cache *c, const char *user_id, const char *tenant_id);
/* Every context authenticated by the API key api_key_id (a scan: revocations are rare). */
size_t gw_cache_evict_api_key(gw_cache *c, const char *api_key_id);
size_t gw_cache_clear(gw_cache *c);
size_t gw_cache_count(const gw_cache *c);

#endif
