/*
 * Unit tests of the gateway's rate-limit pieces that need no network:
 * limit specs, the in-process buckets (the same arithmetic as
 * ratelimit.lua, checked at the same instants as
 * test_gateway_ratelimit_lua.c), the configuration checks, KEELSON_REDIS_URL, and
 * the client address behind trusted proxies.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bucket.h"
#include "clientip.h"
#include "config.h"
#include "ratelimit.h"

#define SEC_US 1000000LL

/* ---- specs ------------------------------------------------------------------ */

static void assert_spec(const char *spec, int64_t cap, int64_t refill, int64_t period_us)
{
        gw_limit l;
        bool off = true;
        char err[256];
        if (gw_limit_parse(spec, &l, &off, err, sizeof(err)) != 0) {
                fail_msg("%s: %s", spec, err);
        }
        assert_false(off);
        assert_int_equal(l.capacity, cap);
        assert_int_equal(l.refill, refill);
        assert_int_equal(l.period_us, period_us);
}

/*
 * The in-process clock's tick, which every local refusal adds to its retry
 * time: at least 1 ms, at most the coarsest kernel tick, and the clock does
 * move by it when twice that much time passes.
 */
static void test_clock_tick(void **state)
{
        (void)state;
        int64_t tick = gw_bucket_clock_tick_ms();
        assert_true(tick >= 1 && tick <= 10);
        int64_t a = gw_bucket_now_us();
        struct timespec pause = {0, (long)(tick * 2 + 1) * 1000000L};
        nanosleep(&pause, NULL);
        int64_t b = gw_bucket_now_us();
        assert_true(b - a >= tick * 1000); /* 2 ticks slept: at least one seen */
}

static void test_spec_parse(void **state)
{
        (void)state;
        gw_limit l;
        bool off = false;
        char err[256];
        assert_spec("5:1/5s", 5, 1, 5 * SEC_US);
        assert_spec("500:500/1m", 500, 500, 60 * SEC_US);
        assert_spec("10:1/s", 10, 1, SEC_US);
        assert_spec("1:1/250ms", 1, 1, 250000);
        assert_spec("100:10/2h", 100, 10, 7200 * SEC_US);
        assert_int_equal(gw_limit_parse("off", &l, &off, err, sizeof(err)), 0);
        assert_true(off);
        const char *bad[] = {
            "",       "5",           "5:1",           "5:1/",    "5:1/5x",         "0:1/s",
            "5:0/s",  "1000001:1/s", "5:1/25h",       "-5:1/s",  "5:1/5 s",        "5 :1/5s",
            "5:1/0s", "OFF",         "1000000:1/24h", "5:1/5s,", "99999999999:1/s"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                err[0] = '\0';
                if (gw_limit_parse(bad[i], &l, &off, err, sizeof(err)) == 0) {
                        fail_msg("accepted \"%s\"", bad[i]);
                }
                assert_true(strlen(err) > 0);
        }
}

static void test_spec_share(void **state)
{
        (void)state;
        gw_limit api = gw_limit_make(500, 500, 60 * SEC_US);
        gw_limit s = gw_limit_share(&api, 2);
        assert_int_equal(s.capacity, 250);
        assert_int_equal(s.refill, 500);
        assert_int_equal(s.period_us, 120 * SEC_US); /* half the rate */
        gw_limit tiny = gw_limit_make(1, 1, SEC_US);
        s = gw_limit_share(&tiny, 4);
        assert_int_equal(s.capacity, 1); /* never 0: a replica always lets one through */
        assert_int_equal(s.period_us, 4 * SEC_US);
        s = gw_limit_share(&api, 1);
        assert_memory_equal(&s, &api, sizeof(s));
}

/* The reciprocals give floor(n / d) exactly, at the edges of their range too. */
static void test_recip_exact(void **state)
{
        (void)state;
        const int64_t n_max = (1LL << GW_RECIP_BITS) - 1;
        const int64_t divisors[] = {1,
                                    2,
                                    3,
                                    7,
                                    1000,
                                    999999,
                                    1000000,
                                    5 * SEC_US,
                                    60 * SEC_US,
                                    24LL * 3600 * SEC_US,
                                    1024LL * 24 * 3600 * SEC_US,
                                    (1LL << 47) - 1,
                                    1LL << 47};
        uint64_t x = 0x9e3779b97f4a7c15ULL;
        for (size_t i = 0; i < sizeof(divisors) / sizeof(divisors[0]); i++) {
                int64_t d = divisors[i];
                gw_recip r = gw_recip_make(d);
                assert_true(r.mul != 0);
                const int64_t edges[] = {0,
                                         1,
                                         d - 1,
                                         d,
                                         d + 1,
                                         2 * d - 1,
                                         n_max - 1,
                                         n_max,
                                         n_max - n_max % d,
                                         n_max - n_max % d - 1};
                for (size_t k = 0; k < sizeof(edges) / sizeof(edges[0]); k++) {
                        if (edges[k] >= 0 && edges[k] <= n_max) {
                                assert_int_equal(gw_recip_div(edges[k], r), edges[k] / d);
                        }
                }
                for (int k = 0; k < 100000; k++) {
                        x ^= x << 13; /* xorshift64 */
                        x ^= x >> 7;
                        x ^= x << 17;
                        int64_t n = (int64_t)(x & (uint64_t)n_max) >> (k % 40);
                        assert_int_equal(gw_recip_div(n, r), n / d);
                }
        }
}

/* ---- the arithmetic, at the instants of the Lua test -------------------------- */

static gw_decision take(gw_buckets *b, const char *key, gw_limit lim, int64_t now_us)
{
        gw_decision d;
        gw_buckets_take(b, key, strlen(key), &lim, now_us, &d);
        return d;
}

static void assert_decision(gw_decision d, bool allowed, int64_t remaining, int64_t retry_ms,
                            int64_t reset_ms)
{
        assert_int_equal(d.allowed, allowed);
        assert_int_equal(d.remaining, remaining);
        assert_int_equal(d.retry_ms, retry_ms);
        assert_int_equal(d.reset_ms, reset_ms);
}

static void test_bucket_arithmetic(void **state)
{
        (void)state;
        gw_buckets *b = NULL;
        gw_limit auth = gw_limit_make(3, 1, 5 * SEC_US);
        gw_limit one = gw_limit_make(1, 1, SEC_US);
        gw_limit frac = gw_limit_make(1, 1, 5 * SEC_US);
        int64_t t0 = 1000 * SEC_US;
        assert_int_equal(gw_buckets_new(&b, 64), 0);
        /* fresh, then empty */
        assert_decision(take(b, "e", auth, t0), true, 2, 0, 5000);
        assert_decision(take(b, "e", auth, t0), true, 1, 0, 10000);
        assert_decision(take(b, "e", auth, t0), true, 0, 0, 15000);
        assert_decision(take(b, "e", auth, t0), false, 0, 5000, 15000);
        assert_decision(take(b, "e", auth, t0 + 5 * SEC_US - 1), false, 0, 1, 10001);
        assert_decision(take(b, "e", auth, t0 + 5 * SEC_US), true, 0, 0, 15000);
        /* clock back: nothing minted, refill counts from the latest instant */
        assert_decision(take(b, "e", auth, t0), false, 0, 5000, 15000);
        /* long idle: full, not more */
        assert_decision(take(b, "e", auth, t0 + 3650LL * 24 * 3600 * SEC_US), true, 2, 0, 5000);
        /* capacity one */
        assert_decision(take(b, "one", one, t0), true, 0, 0, 1000);
        assert_decision(take(b, "one", one, t0 + 999999), false, 0, 1, 1);
        assert_decision(take(b, "one", one, t0 + SEC_US), true, 0, 0, 1000);
        /* partial refills add up exactly */
        assert_decision(take(b, "frac", frac, t0), true, 0, 0, 5000);
        assert_decision(take(b, "frac", frac, t0 + 1500000), false, 0, 3500, 3500);
        assert_decision(take(b, "frac", frac, t0 + 5 * SEC_US), true, 0, 0, 5000);
        gw_buckets_free(b);
}

/* Keys are isolated; past max_keys the least recently used is forgotten (full again). */
static void test_bucket_keys(void **state)
{
        (void)state;
        gw_buckets *b = NULL;
        gw_limit lim = gw_limit_make(1, 1, 3600 * SEC_US);
        char key[32];
        assert_int_equal(gw_buckets_new(&b, 16), 0);
        for (int i = 0; i < 16; i++) {
                snprintf(key, sizeof(key), "k%d", i);
                assert_true(take(b, key, lim, 0).allowed);
                assert_false(take(b, key, lim, 0).allowed);
        }
        assert_int_equal(gw_buckets_count(b), 16);
        assert_false(take(b, "k0", lim, 0).allowed); /* k0 is now the most recent */
        assert_true(take(b, "k16", lim, 0).allowed); /* evicts k1, the least recent */
        assert_int_equal(gw_buckets_count(b), 16);
        assert_true(take(b, "k1", lim, 0).allowed); /* forgotten: full again */
        assert_false(take(b, "k0", lim, 0).allowed);
        assert_false(take(b, "k16", lim, 0).allowed);
        /* a key that differs in its last byte only is another bucket */
        assert_true(take(b, "prefix-aaaaaaaaaaaaaaaa1", lim, 0).allowed);
        assert_true(take(b, "prefix-aaaaaaaaaaaaaaaa2", lim, 0).allowed);
        gw_buckets_free(b);
}

/* ---- configuration ------------------------------------------------------------ */

static gw_config base_config(void)
{
        gw_config c;
        memset(&c, 0, sizeof(c));
        c.rate_auth = "5:1/5s";
        c.rate_api = "500:500/1m";
        c.rate_resolve = "100:10/1s";
        c.rate_intake = "400:200/1s";
        c.rate_overrides = "";
        c.trusted_proxies = "";
        c.redis_url = "redis://127.0.0.1:6379";
        c.redis_prefix = "keelson:rl:";
        c.replicas = 1;
        return c;
}

static int parse_with(const char *field, const char *value, gw_rate_config *out, char *err)
{
        gw_config c = base_config();
        if (strcmp(field, "overrides") == 0) {
                c.rate_overrides = (char *)value;
        } else if (strcmp(field, "auth") == 0) {
                c.rate_auth = (char *)value;
        } else if (strcmp(field, "proxies") == 0) {
                c.trusted_proxies = (char *)value;
        } else if (strcmp(field, "redis") == 0) {
                c.redis_url = (char *)value;
        }
        return gw_rate_config_parse(&c, out, err, 256);
}

static void test_config_overrides(void **state)
{
        (void)state;
        gw_rate_config *rc = calloc(1, sizeof(*rc));
        char err[256];
        assert_int_equal(parse_with("overrides",
                                    " keelson.auth.v1.AuthService/Login=10:1/5s ,"
                                    "keelson.auth.v1.AuthService/WhoAmI=off",
                                    rc, err),
                         0);
        assert_int_equal(rc->n_overrides, 2);
        assert_string_equal(rc->overrides[0].method, "keelson.auth.v1.AuthService/Login");
        assert_int_equal(rc->overrides[0].limit.capacity, 10);
        assert_true(rc->overrides[1].off);
        assert_false(rc->scope_off[GW_SCOPE_AUTH]);
        assert_int_equal(rc->scope[GW_SCOPE_API].capacity, 500);
        assert_int_equal(rc->scope[GW_SCOPE_INTAKE].capacity, 400);
        assert_true(rc->has_redis);
        const char *bad[] = {
            "keelson.auth.v1.AuthService/Nope=1:1/s",           /* unknown method */
            "keelson.auth.v1.AuthService/ResolveContext=1:1/s", /* internal: never routed */
            /* the intake has its scope (KEELSON_GATEWAY_RATE_INTAKE), keyed by endpoint */
            "keelson.webhook.v1.WebhookService/ReceiveWebhook=1:1/s",
            "/keelson.auth.v1.AuthService/Login=1:1/s", /* a path, not a method */
            "keelson.auth.v1.AuthService/Login",        /* no spec */
            "keelson.auth.v1.AuthService/Login=fast",
            "keelson.auth.v1.AuthService/Login=1:1/s,keelson.auth.v1.AuthService/Login=2:1/s",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                err[0] = '\0';
                if (parse_with("overrides", bad[i], rc, err) == 0) {
                        fail_msg("accepted %s", bad[i]);
                }
                assert_non_null(strstr(err, "KEELSON_GATEWAY_RATE_OVERRIDES"));
        }
        assert_int_equal(parse_with("auth", "5/5s", rc, err), -1);
        assert_non_null(strstr(err, "KEELSON_GATEWAY_RATE_AUTH"));
        assert_int_equal(parse_with("proxies", "10.0.0.0/33", rc, err), -1);
        assert_non_null(strstr(err, "KEELSON_GATEWAY_TRUSTED_PROXIES"));
        assert_int_equal(parse_with("redis", "http://x", rc, err), -1);
        assert_non_null(strstr(err, "KEELSON_REDIS_URL"));
        assert_int_equal(parse_with("redis", "", rc, err), 0);
        assert_false(rc->has_redis);
        free(rc);
}

static void test_redis_url(void **state)
{
        (void)state;
        ks_redis_url u; /* the gateway reads it with the shared parser (test_redis_url.c) */
        assert_int_equal(ks_redis_url_parse("redis://127.0.0.1:6380", &u, NULL, 0), 0);
        assert_string_equal(u.host, "127.0.0.1");
        assert_int_equal(u.port, 6380);
        assert_int_equal(u.db, 0);
        assert_int_equal(ks_redis_url_parse("redis://cache.internal", &u, NULL, 0), 0);
        assert_int_equal(u.port, 6379);
        assert_int_equal(ks_redis_url_parse("redis://:s3cr@t@[::1]:7000/2", &u, NULL, 0), 0);
        assert_string_equal(u.password, "s3cr@t");
        assert_string_equal(u.user, "");
        assert_string_equal(u.host, "::1");
        assert_int_equal(u.port, 7000);
        assert_int_equal(u.db, 2);
        assert_int_equal(ks_redis_url_parse("redis://gw:pw@h/", &u, NULL, 0), 0);
        assert_string_equal(u.user, "gw");
        assert_string_equal(u.password, "pw");
        const char *bad[] = {"",
                             "127.0.0.1:6379",
                             "redis://",
                             "redis://h:0",
                             "redis://h:65536",
                             "redis://h:x",
                             "redis://h/x",
                             "rediss://h",
                             "redis://[::1"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                if (ks_redis_url_parse(bad[i], &u, NULL, 0) == 0) {
                        fail_msg("accepted %s", bad[i]);
                }
        }
}

/* ---- the client address ---------------------------------------------------------- */

static void assert_client(const char *proxies, const char *peer, const char *xff1, const char *xff2,
                          const char *want)
{
        gw_proxies p;
        char err[256], out[GW_IP_MAX];
        const char *xff[2] = {xff1, xff2};
        int n = xff2 != NULL ? 2 : xff1 != NULL ? 1 : 0;
        assert_int_equal(gw_proxies_parse(proxies, &p, err, sizeof(err)), 0);
        gw_client_ip(&p, peer, xff, n, out);
        assert_string_equal(out, want);
}

static void test_client_ip(void **state)
{
        (void)state;
        /* No trusted proxy: X-Forwarded-For is the client's own claim, ignored. */
        assert_client("", "198.51.100.7", "203.0.113.9", NULL, "198.51.100.7");
        /* An untrusted peer's header is ignored too. */
        assert_client("10.0.0.0/8", "198.51.100.7", "203.0.113.9", NULL, "198.51.100.7");
        /* Trusted peer: the right-most entry that is not a proxy. */
        assert_client("10.0.0.0/8", "10.1.2.3", "203.0.113.9", NULL, "203.0.113.9");
        assert_client("10.0.0.0/8", "10.1.2.3", "1.1.1.1, 203.0.113.9, 10.9.9.9", NULL,
                      "203.0.113.9");
        /* A spoofed left part does not help the client. */
        assert_client("10.0.0.0/8", "10.1.2.3", "10.0.0.1, 203.0.113.9", NULL, "203.0.113.9");
        /* Several header lines read as one list, in order. */
        assert_client("10.0.0.0/8", "10.1.2.3", "1.1.1.1", "203.0.113.9, 10.2.2.2", "203.0.113.9");
        /* All proxies: the left-most, as far as we know. */
        assert_client("10.0.0.0/8", "10.1.2.3", "10.0.0.5,10.0.0.6", NULL, "10.0.0.5");
        /* Garbage stops the walk at the hop that forwarded it. */
        assert_client("10.0.0.0/8", "10.1.2.3", "203.0.113.9, not-an-ip, 10.0.0.6", NULL,
                      "10.0.0.6");
        /* Ports and brackets, IPv6, canonical output. */
        assert_client("127.0.0.1, ::1", "127.0.0.1", "[2001:DB8::1]:443", NULL, "2001:db8::1");
        assert_client("127.0.0.1", "127.0.0.1", "203.0.113.9:5555", NULL, "203.0.113.9");
        assert_client("fd00::/8", "fd00::1", "2001:db8::7", NULL, "2001:db8::7");
        /* An IPv4 CIDR does not match IPv6 addresses, nor /31 the address next to it. */
        assert_client("198.51.100.6/31", "198.51.100.8", "203.0.113.9", NULL, "198.51.100.8");
        assert_client("198.51.100.6/31", "198.51.100.7", "203.0.113.9", NULL, "203.0.113.9");
        /* No header at all: the peer. */
        assert_client("127.0.0.1", "127.0.0.1", NULL, NULL, "127.0.0.1");
}

static void test_proxies_parse(void **state)
{
        (void)state;
        gw_proxies p;
        char err[256];
        assert_int_equal(
            gw_proxies_parse(" 10.0.0.0/8 ,192.168.1.1, fd00::/8,,", &p, err, sizeof(err)), 0);
        assert_int_equal(p.n, 3);
        assert_int_equal(p.v[0].bits, 96 + 8);
        assert_int_equal(p.v[1].bits, 128);
        assert_int_equal(p.v[2].bits, 8);
        const char *bad[] = {"10.0.0.0/", "10.0.0.0/x", "::/129", "10.0.0.256", "host.example"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_int_equal(gw_proxies_parse(bad[i], &p, err, sizeof(err)), -1);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_clock_tick),        cmocka_unit_test(test_spec_parse),
            cmocka_unit_test(test_spec_share),        cmocka_unit_test(test_recip_exact),
            cmocka_unit_test(test_bucket_arithmetic), cmocka_unit_test(test_bucket_keys),
            cmocka_unit_test(test_config_overrides),  cmocka_unit_test(test_redis_url),
            cmocka_unit_test(test_client_ip),         cmocka_unit_test(test_proxies_parse),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
