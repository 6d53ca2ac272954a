/*
 * Unit tests of the context cache (cache.c: bound, LRU, TTL, evictions by
 * token, user and API key, the generation that drops racing fills) and of
 * response compression (compress.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "cache.h"
#include "compress.h"
#include "ks_crypto.h"
#include "ks_metrics.h"

#define SESSION_TTL_MS 30000
#define API_KEY_TTL_MS 300000
#define NOW_UNIX_MS    1800000000000LL

static void sha_of(const char *token, uint8_t out[32])
{
        ks_sha256(token, strlen(token), out);
}

static gw_context ctx_of(const char *user, const char *tenant, const char *api_key)
{
        gw_context c;
        memset(&c, 0, sizeof(c));
        snprintf(c.user_id, sizeof(c.user_id), "%s", user);
        snprintf(c.tenant_id, sizeof(c.tenant_id), "%s", tenant);
        snprintf(c.api_key_id, sizeof(c.api_key_id), "%s", api_key);
        snprintf(c.role, sizeof(c.role), "member");
        return c;
}

static void put(gw_cache *c, const char *token, gw_context ctx, int64_t now_ms)
{
        uint8_t sha[32];
        sha_of(token, sha);
        gw_cache_put(c, sha, &ctx, gw_cache_generation(c), now_ms, NOW_UNIX_MS);
}

static bool has(gw_cache *c, const char *token, int64_t now_ms)
{
        uint8_t sha[32];
        gw_context out;
        sha_of(token, sha);
        return gw_cache_get(c, sha, now_ms, &out);
}

static void test_hit_copies_context(void **state)
{
        (void)state;
        gw_cache *c = NULL;
        uint8_t sha[32];
        gw_context out;
        assert_int_equal(gw_cache_new(&c, 8, SESSION_TTL_MS, API_KEY_TTL_MS), 0);
        put(c, "tok-a", ctx_of("u1", "t1", ""), 0);
        sha_of("tok-a", sha);
        assert_true(gw_cache_get(c, sha, 1, &out));
        assert_string_equal(out.user_id, "u1");
        assert_string_equal(out.tenant_id, "t1");
        assert_string_equal(out.role, "member");
        assert_false(has(c, "tok-b", 1));
        assert_int_equal(gw_cache_count(c), 1);
        gw_cache_free(c);
}

static void test_ttl(void **state)
{
        (void)state;
        gw_cache *c = NULL;
        assert_int_equal(gw_cache_new(&c, 8, SESSION_TTL_MS, API_KEY_TTL_MS), 0);
        put(c, "session", ctx_of("u1", "t1", ""), 0);
        put(c, "apikey", ctx_of("", "t1", "k1"), 0);
        assert_true(has(c, "session", SESSION_TTL_MS - 1));
        assert_false(has(c, "session", SESSION_TTL_MS)); /* 30 s for a session */
        assert_true(has(c, "apikey", API_KEY_TTL_MS - 1));
        assert_false(has(c, "apikey", API_KEY_TTL_MS)); /* 5 min for an API key */
        /* Never past the expiry auth gave: a session with 2 s left is kept 2 s. */
        gw_context soon = ctx_of("u2", "t1", "");
        soon.expires_at_unix_ms = NOW_UNIX_MS + 2000;
        put(c, "soon", soon, 0);
        assert_true(has(c, "soon", 1999));
        assert_false(has(c, "soon", 2000));
        /* Already expired: not cached at all. */
        soon.expires_at_unix_ms = NOW_UNIX_MS - 1;
        put(c, "gone", soon, 0);
        assert_false(has(c, "gone", 0));
        assert_int_equal(gw_cache_count(c), 0);
        gw_cache_free(c);
}

static void test_lru_bound(void **state)
{
        (void)state;
        gw_cache *c = NULL;
        char tok[16];
        assert_int_equal(gw_cache_new(&c, 4, SESSION_TTL_MS, API_KEY_TTL_MS), 0);
        for (int i = 0; i < 4; i++) {
                snprintf(tok, sizeof(tok), "t%d", i);
                put(c, tok, ctx_of("u", "t", ""), 0);
        }
        assert_true(has(c, "t0", 1)); /* t0 becomes the most recent; t1 the least */
        put(c, "t4", ctx_of("u", "t", ""), 1);
        assert_int_equal(gw_cache_count(c), 4);
        assert_false(has(c, "t1", 2));
        assert_true(has(c, "t0", 2));
        assert_true(has(c, "t4", 2));
        gw_cache_free(c);
}

static void test_evict_token_and_user(void **state)
{
        (void)state;
        gw_cache *c = NULL;
        uint8_t sha[32];
        assert_int_equal(gw_cache_new(&c, 16, SESSION_TTL_MS, API_KEY_TTL_MS), 0);
        put(c, "ann-t1-a", ctx_of("ann", "t1", ""), 0);
        put(c, "ann-t1-b", ctx_of("ann", "t1", ""), 0);
        put(c, "ann-t2", ctx_of("ann", "t2", ""), 0);
        put(c, "bob-t1", ctx_of("bob", "t1", ""), 0);
        put(c, "key-t1", ctx_of("", "t1", "k1"), 0);
        sha_of("ann-t1-a", sha);
        assert_int_equal(gw_cache_evict_token(c, sha), 1);
        assert_int_equal(gw_cache_evict_token(c, sha), 0);
        assert_false(has(c, "ann-t1-a", 1));
        /* user in one tenant */
        put(c, "ann-t1-a", ctx_of("ann", "t1", ""), 0);
        assert_int_equal(gw_cache_evict_user(c, "ann", "t1"), 2);
        assert_false(has(c, "ann-t1-b", 1));
        assert_true(has(c, "ann-t2", 1));
        assert_true(has(c, "bob-t1", 1));
        /* user in every tenant */
        put(c, "ann-t1-a", ctx_of("ann", "t1", ""), 0);
        assert_int_equal(gw_cache_evict_user(c, "ann", ""), 2);
        assert_false(has(c, "ann-t2", 1));
        assert_true(has(c, "bob-t1", 1));
        /* API key */
        assert_int_equal(gw_cache_evict_api_key(c, "k2"), 0);
        assert_int_equal(gw_cache_evict_api_key(c, "k1"), 1);
        assert_false(has(c, "key-t1", 1));
        assert_int_equal(gw_cache_clear(c), 1);
        assert_int_equal(gw_cache_count(c), 0);
        gw_cache_free(c);
}

/* A fill that started before an eviction is dropped: it may be the revoked context. */
static void test_generation_drops_racing_fill(void **state)
{
        (void)state;
        gw_cache *c = NULL;
        uint8_t sha[32], other[32];
        gw_context ctx = ctx_of("ann", "t1", "");
        assert_int_equal(gw_cache_new(&c, 16, SESSION_TTL_MS, API_KEY_TTL_MS), 0);
        sha_of("ann", sha);
        sha_of("someone-else", other);
        uint64_t gen = gw_cache_generation(c);           /* ResolveContext goes out... */
        gw_cache_evict_token(c, other);                  /* ...an event arrives... */
        gw_cache_put(c, sha, &ctx, gen, 0, NOW_UNIX_MS); /* ...the reply comes back */
        assert_false(has(c, "ann", 1));
        gw_cache_put(c, sha, &ctx, gw_cache_generation(c), 0, NOW_UNIX_MS);
        assert_true(has(c, "ann", 1));
        gw_cache_free(c);
}

static uint64_t evictions(const char *reason)
{
        char labels[64];
        snprintf(labels, sizeof(labels), "reason=\"%s\"", reason);
        return ks_counter_value(ks_counter_get(
            ks_metrics_default(), "keelson_gateway_context_cache_evictions_total", NULL, labels));
}

/* Each way out of the cache is counted under its own reason. */
static void test_eviction_reasons(void **state)
{
        (void)state;
        gw_cache *c = NULL;
        static const char *const reasons[] = {"lru", "expired", "revoked", "replaced"};
        uint64_t before[4], after[4];
        uint8_t sha[32];
        assert_int_equal(gw_cache_new(&c, 2, SESSION_TTL_MS, API_KEY_TTL_MS), 0);
        for (int i = 0; i < 4; i++) {
                before[i] = evictions(reasons[i]);
        }
        put(c, "a", ctx_of("u1", "t1", ""), 0);
        put(c, "a", ctx_of("u1", "t1", ""), 10); /* a fresh resolution of the same token */
        assert_int_equal(gw_cache_count(c), 1);
        assert_true(has(c, "a", SESSION_TTL_MS + 9)); /* the replacement's TTL counts */
        put(c, "b", ctx_of("u2", "t1", ""), 20);
        put(c, "c", ctx_of("u3", "t1", ""), 30);        /* "a" is the least recently used */
        assert_false(has(c, "b", SESSION_TTL_MS + 20)); /* expired */
        sha_of("c", sha);
        assert_int_equal(gw_cache_evict_token(c, sha), 1);
        for (int i = 0; i < 4; i++) {
                after[i] = evictions(reasons[i]);
        }
        assert_int_equal(after[0] - before[0], 1); /* lru: a */
        assert_int_equal(after[1] - before[1], 1); /* expired: b */
        assert_int_equal(after[2] - before[2], 1); /* revoked: c */
        assert_int_equal(after[3] - before[3], 1); /* replaced: the first a */
        gw_cache_free(c);
}

static void test_disabled(void **state)
{
        (void)state;
        gw_cache *c = (gw_cache *)1;
        uint8_t sha[32] = {0};
        gw_context ctx = ctx_of("u", "t", "");
        assert_int_equal(gw_cache_new(&c, 0, SESSION_TTL_MS, API_KEY_TTL_MS), 0);
        assert_null(c);
        gw_cache_put(c, sha, &ctx, 0, 0, NOW_UNIX_MS);
        assert_false(gw_cache_get(c, sha, 0, &ctx));
        assert_int_equal(gw_cache_evict_user(c, "u", ""), 0);
        gw_cache_free(c);
}

/* ---- compression ---------------------------------------------------------------- */

static void test_accepts_gzip(void **state)
{
        (void)state;
        assert_true(gw_accepts_gzip("gzip"));
        assert_true(gw_accepts_gzip("deflate, GZIP;q=0.5"));
        assert_true(gw_accepts_gzip("br;q=1.0, gzip;q=0.8, *;q=0.1"));
        assert_true(gw_accepts_gzip("*"));
        assert_true(gw_accepts_gzip("x-gzip"));
        assert_false(gw_accepts_gzip(NULL));
        assert_false(gw_accepts_gzip(""));
        assert_false(gw_accepts_gzip("identity"));
        assert_false(gw_accepts_gzip("gzip;q=0"));
        assert_false(gw_accepts_gzip("gzip; q=0.000"));
        assert_false(gw_accepts_gzip("*, gzip;q=0"));
        assert_false(gw_accepts_gzip("gzipx, br"));
        assert_false(gw_accepts_gzip("*;q=0"));
}

static void test_gzip_round_trip(void **state)
{
        (void)state;
        char json[4096];
        size_t len = 0;
        uint8_t *gz = NULL;
        size_t gz_len = 0;
        for (int i = 0; len < sizeof(json) - 64; i++) {
                len += (size_t)snprintf(json + len, sizeof(json) - len,
                                        "{\"userId\":\"u-%d\",\"role\":\"member\"},", i);
        }
        assert_int_equal(gw_gzip(json, len, 6, &gz, &gz_len), 0);
        assert_true(gz_len < len / 4);
        assert_int_equal(gz[0], 0x1f); /* the gzip magic */
        assert_int_equal(gz[1], 0x8b);
        char back[sizeof(json)];
        z_stream z;
        memset(&z, 0, sizeof(z));
        assert_int_equal(inflateInit2(&z, 15 + 16), Z_OK);
        z.next_in = gz;
        z.avail_in = (uInt)gz_len;
        z.next_out = (Bytef *)back;
        z.avail_out = sizeof(back);
        assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
        assert_int_equal(z.total_out, len);
        inflateEnd(&z);
        assert_memory_equal(back, json, len);
        free(gz);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_hit_copies_context),
            cmocka_unit_test(test_ttl),
            cmocka_unit_test(test_lru_bound),
            cmocka_unit_test(test_evict_token_and_user),
            cmocka_unit_test(test_generation_drops_racing_fill),
            cmocka_unit_test(test_eviction_reasons),
            cmocka_unit_test(test_disabled),
            cmocka_unit_test(test_accepts_gzip),
            cmocka_unit_test(test_gzip_round_trip),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
