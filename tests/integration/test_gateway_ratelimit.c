/*
 * The gateway's rate limits as a client sees them: status codes and the
 * RateLimit-* headers, against real Redis, the broker, auth and gateways.
 *
 * The stack's own gateways run with generous limits (every test of the
 * suite comes from 127.0.0.1), so this file starts three gateways of its
 * own next to them, with small limits and a Redis key prefix of their own:
 *   A and B  two replicas (KEELSON_GATEWAY_REPLICAS=2) trusting 127.0.0.1 as
 *            a proxy, so each test picks its client address with
 *            X-Forwarded-For and gets buckets nobody else touches;
 *   C        the same limits, trusting nobody: X-Forwarded-For is ignored.
 * Limits: auth scope 3 per minute, api scope 6 per minute, and SignUp
 * overridden to 2 every 2 s. Users and sessions are made through the
 * stack's gateway, so they cost these buckets nothing.
 *
 * One test stops the stack's Redis; the group teardown starts it again
 * whatever happened.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "it_support.h"

#define TOKEN_MAX        512
#define ID_MAX           64
#define XFF_MAX          64
#define WAIT_MS          15000
#define AUTH_CAPACITY    3
#define API_CAPACITY     6
#define SIGNUP_CAPACITY  2
#define RESOLVE_CAPACITY 5
#define RESOLVE_SPEC     "5:1/1m"
#define LOGIN_BODY       "{\"email\":\"nobody@example.test\",\"password\":\"wrong password\"}"

static it_stack g_stack;
static it_gateway g_a, g_b, g_c;
static char g_prefix[80];

/* ---- helpers ------------------------------------------------------------------ */

/* A call from client address ip (sent as X-Forwarded-For; NULL: none). */
static long call_from(const it_gateway *gw, const char *method, const char *body, const char *token,
                      const char *ip, it_http_response *out)
{
        char xff[3 * XFF_MAX + 32];
        const char *headers[2] = {NULL, NULL};
        if (ip != NULL) {
                snprintf(xff, sizeof(xff), "X-Forwarded-For: %s", ip);
                headers[0] = xff;
        }
        assert_int_equal(it_auth_call(gw->url, method, body, token, headers, out), 0);
        return out->status;
}

/* Status only. */
static long status_of(const it_gateway *gw, const char *method, const char *body, const char *token,
                      const char *ip)
{
        it_http_response r;
        long status = call_from(gw, method, body, token, ip, &r);
        it_http_response_free(&r);
        return status;
}

static void assert_refused(const it_http_response *r)
{
        assert_int_equal(r->status, 429);
        assert_non_null(strstr(r->body, "\"code\":\"resource_exhausted\""));
        long retry = it_header_long(r, "Retry-After");
        assert_true(retry >= 1);
        assert_int_equal(it_header_long(r, "RateLimit-Remaining"), 0);
}

static void new_session(char token[TOKEN_MAX], char tenant[ID_MAX])
{
        assert_int_equal(it_new_session(g_stack.gateway_url, "rl", token, tenant, NULL), 0);
}

static void wait_redis_up(const it_gateway *gw, double want)
{
        double v = -1;
        for (int waited = 0; waited < WAIT_MS; waited += 50) {
                if (it_metric(gw->admin_url, "keelson_gateway_redis_up", &v) == 0 && v == want) {
                        return;
                }
                it_sleep_ms(50);
        }
        fail_msg("%s: keelson_gateway_redis_up stayed %g, expected %g", gw->url, v, want);
}

static size_t count_in_file(const char *path, const char *needle)
{
        return (size_t)it_file_lines_with(path, &needle, 1);
}

static void signup_body(char *out, size_t len)
{
        char email[128];
        it_unique_email("rl-signup", email, sizeof(email));
        snprintf(out, len,
                 "{\"email\":\"%s\",\"password\":\"correct horse battery staple\","
                 "\"tenantName\":\"rl\"}",
                 email);
}

/* ---- group ---------------------------------------------------------------------- */

static int setup(void **state)
{
        (void)state;
        char ip[XFF_MAX];
        if (it_stack_load(&g_stack) != 0) {
                return -1;
        }
        it_random_ip(ip, sizeof(ip)); /* random enough for a prefix of our own */
        snprintf(g_prefix, sizeof(g_prefix), "KEELSON_GATEWAY_REDIS_PREFIX=it-rl-%.32s:", ip);
        const char *trusted[] = {"KEELSON_GATEWAY_RATE_AUTH=3:1/1m",
                                 "KEELSON_GATEWAY_RATE_API=6:1/1m",
                                 "KEELSON_GATEWAY_RATE_OVERRIDES="
                                 "keelson.auth.v1.AuthService/SignUp=2:1/2s",
                                 "KEELSON_GATEWAY_REPLICAS=2",
                                 "KEELSON_GATEWAY_TRUSTED_PROXIES=127.0.0.1",
                                 g_prefix,
                                 NULL};
        const char *untrusted[] = {trusted[0], trusted[1], trusted[2], trusted[3], g_prefix, NULL};
        if (it_gateway_start(&g_stack, trusted, 1, &g_a) != 0 ||
            it_gateway_start(&g_stack, trusted, 1, &g_b) != 0 ||
            it_gateway_start(&g_stack, untrusted, 1, &g_c) != 0) {
                return -1;
        }
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        it_gateway_stop(&g_a);
        it_gateway_stop(&g_b);
        it_gateway_stop(&g_c);
        return it_stack_redis(&g_stack, 1); /* whatever the Redis test left */
}

/* ---- the tests -------------------------------------------------------------------- */

/* Capacity as the headers tell it, then 429 with Retry-After. */
static void test_capacity_and_headers(void **state)
{
        (void)state;
        char ip[XFF_MAX];
        it_http_response r;
        it_random_ip(ip, sizeof(ip));
        for (long i = 0; i < AUTH_CAPACITY; i++) {
                call_from(&g_a, "Login", LOGIN_BODY, NULL, ip, &r);
                assert_int_equal(r.status, 401); /* allowed through: auth said no */
                assert_int_equal(it_header_long(&r, "RateLimit-Limit"), AUTH_CAPACITY);
                assert_int_equal(it_header_long(&r, "RateLimit-Remaining"), AUTH_CAPACITY - 1 - i);
                long reset = it_header_long(&r, "RateLimit-Reset");
                assert_true(reset >= 1 && reset <= AUTH_CAPACITY * 60);
                it_http_response_free(&r);
        }
        call_from(&g_a, "Login", LOGIN_BODY, NULL, ip, &r);
        assert_refused(&r);
        assert_true(it_header_long(&r, "Retry-After") <= 60);
        assert_int_equal(it_header_long(&r, "RateLimit-Limit"), AUTH_CAPACITY);
        it_http_response_free(&r);
}

/*
 * A reply refused before the limit step (no bearer token) took no token and
 * carries no RateLimit-* headers. The body is read only after the limit
 * step, so a bad body pays its token like any call.
 */
static void test_no_headers_before_the_limit_step(void **state)
{
        (void)state;
        char ip[XFF_MAX];
        it_http_response r;
        it_random_ip(ip, sizeof(ip));
        call_from(&g_a, "WhoAmI", "{}", NULL, ip, &r); /* no bearer token */
        assert_int_equal(r.status, 401);
        assert_int_equal(it_header_long(&r, "RateLimit-Limit"), -1);
        assert_int_equal(it_header_long(&r, "RateLimit-Remaining"), -1);
        it_http_response_free(&r);
        /* The first request that reaches the limit finds the bucket full. */
        call_from(&g_a, "Login", "{\"remember\":true}", NULL, ip, &r); /* a field Login lacks */
        assert_int_equal(r.status, 400);
        assert_int_equal(it_header_long(&r, "RateLimit-Remaining"), AUTH_CAPACITY - 1);
        it_http_response_free(&r);
        call_from(&g_a, "Login", LOGIN_BODY, NULL, ip, &r);
        assert_int_equal(r.status, 401);
        assert_int_equal(it_header_long(&r, "RateLimit-Remaining"), AUTH_CAPACITY - 2);
        it_http_response_free(&r);
}

/* Two replicas, one bucket: Redis holds it. */
static void test_replicas_share_one_bucket(void **state)
{
        (void)state;
        char ip[XFF_MAX], token[TOKEN_MAX], tenant[ID_MAX];
        it_random_ip(ip, sizeof(ip));
        assert_int_equal(status_of(&g_a, "Login", LOGIN_BODY, NULL, ip), 401);
        assert_int_equal(status_of(&g_b, "Login", LOGIN_BODY, NULL, ip), 401);
        assert_int_equal(status_of(&g_a, "Login", LOGIN_BODY, NULL, ip), 401);
        assert_int_equal(status_of(&g_b, "Login", LOGIN_BODY, NULL, ip), 429);
        assert_int_equal(status_of(&g_a, "Login", LOGIN_BODY, NULL, ip), 429);
        /* The api scope too: one tenant's six calls, spread over both. */
        new_session(token, tenant);
        for (int i = 0; i < API_CAPACITY; i++) {
                assert_int_equal(status_of(i % 2 ? &g_b : &g_a, "WhoAmI", "{}", token, NULL), 200);
        }
        assert_int_equal(status_of(&g_a, "WhoAmI", "{}", token, NULL), 429);
        assert_int_equal(status_of(&g_b, "WhoAmI", "{}", token, NULL), 429);
}

/* Another address, another method, another tenant: other buckets. */
static void test_per_key_isolation(void **state)
{
        (void)state;
        char ip[XFF_MAX], other_ip[XFF_MAX], body[512];
        char t1[TOKEN_MAX], t2[TOKEN_MAX], tenant1[ID_MAX], tenant2[ID_MAX];
        it_http_response r;
        it_random_ip(ip, sizeof(ip));
        it_random_ip(other_ip, sizeof(other_ip));
        for (int i = 0; i < AUTH_CAPACITY; i++) {
                status_of(&g_a, "Login", LOGIN_BODY, NULL, ip);
        }
        assert_int_equal(status_of(&g_a, "Login", LOGIN_BODY, NULL, ip), 429);
        /* another client address */
        call_from(&g_a, "Login", LOGIN_BODY, NULL, other_ip, &r);
        assert_int_equal(r.status, 401);
        assert_int_equal(it_header_long(&r, "RateLimit-Remaining"), AUTH_CAPACITY - 1);
        it_http_response_free(&r);
        /* another method from the same address: SignUp, with its override */
        signup_body(body, sizeof(body));
        call_from(&g_a, "SignUp", body, NULL, ip, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(it_header_long(&r, "RateLimit-Limit"), SIGNUP_CAPACITY);
        it_http_response_free(&r);
        /* another tenant */
        new_session(t1, tenant1);
        new_session(t2, tenant2);
        assert_string_not_equal(tenant1, tenant2);
        for (int i = 0; i < API_CAPACITY; i++) {
                assert_int_equal(status_of(&g_a, "WhoAmI", "{}", t1, NULL), 200);
        }
        assert_int_equal(status_of(&g_a, "WhoAmI", "{}", t1, NULL), 429);
        call_from(&g_a, "WhoAmI", "{}", t2, NULL, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(it_header_long(&r, "RateLimit-Limit"), API_CAPACITY);
        assert_int_equal(it_header_long(&r, "RateLimit-Remaining"), API_CAPACITY - 1);
        it_http_response_free(&r);
}

/* Waiting the Retry-After a refusal gave is enough for the next call to pass. */
static void test_refill_after_retry_after(void **state)
{
        (void)state;
        char ip[XFF_MAX], body[512];
        it_http_response r;
        long retry = -1;
        it_random_ip(ip, sizeof(ip));
        for (int i = 0; i < 10 && retry < 0; i++) {
                signup_body(body, sizeof(body));
                call_from(&g_a, "SignUp", body, NULL, ip, &r);
                if (r.status == 429) {
                        assert_refused(&r);
                        retry = it_header_long(&r, "Retry-After");
                } else {
                        assert_int_equal(r.status, 200);
                }
                it_http_response_free(&r);
        }
        assert_true(retry >= 1 && retry <= 2); /* one token every 2 s */
        it_sleep_ms(retry * 1000 + 50);
        signup_body(body, sizeof(body));
        call_from(&g_b, "SignUp", body, NULL, ip, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(it_header_long(&r, "RateLimit-Remaining"), 0);
        it_http_response_free(&r);
}

/* From a peer that is not a trusted proxy, X-Forwarded-For changes nothing. */
static void test_untrusted_forwarded_for_is_ignored(void **state)
{
        (void)state;
        char ip[XFF_MAX];
        for (int i = 0; i < AUTH_CAPACITY; i++) {
                it_random_ip(ip, sizeof(ip));
                assert_int_equal(status_of(&g_c, "Login", LOGIN_BODY, NULL, ip), 401);
        }
        it_random_ip(ip, sizeof(ip));
        assert_int_equal(status_of(&g_c, "Login", LOGIN_BODY, NULL, ip), 429);
        /* The same fresh addresses through a gateway that trusts 127.0.0.1 each get a bucket. */
        for (int i = 0; i < AUTH_CAPACITY + 1; i++) {
                it_random_ip(ip, sizeof(ip));
                assert_int_equal(status_of(&g_a, "Login", LOGIN_BODY, NULL, ip), 401);
        }
        /* A client cannot escape by writing addresses on the left: the right-most counts. */
        char spoof[3 * XFF_MAX];
        it_random_ip(ip, sizeof(ip));
        for (int i = 0; i < AUTH_CAPACITY; i++) {
                char fake[XFF_MAX];
                it_random_ip(fake, sizeof(fake));
                snprintf(spoof, sizeof(spoof), "%s, %s", fake, ip);
                assert_int_equal(status_of(&g_a, "Login", LOGIN_BODY, NULL, spoof), 401);
        }
        snprintf(spoof, sizeof(spoof), "10.0.0.1, %s", ip);
        assert_int_equal(status_of(&g_a, "Login", LOGIN_BODY, NULL, spoof), 429);
}

/* The script vanished from Redis (SCRIPT FLUSH): the gateway loads it again. */
static void test_script_reloaded_after_flush(void **state)
{
        (void)state;
        char token[TOKEN_MAX], tenant[ID_MAX];
        double loads_before = 0, loads_after = 0;
        int port = atoi(strrchr(g_stack.redis_url, ':') + 1);
        new_session(token, tenant); /* first: its calls through the stack would reload it */
        redisContext *c = redisConnect("127.0.0.1", port);
        assert_non_null(c);
        assert_int_equal(c->err, 0);
        redisReply *rep = redisCommand(c, "SCRIPT FLUSH");
        assert_non_null(rep);
        freeReplyObject(rep);
        redisFree(c);
        assert_int_equal(
            it_metric(g_a.admin_url, "keelson_gateway_redis_script_loads_total", &loads_before), 0);
        it_http_response r;
        call_from(&g_a, "WhoAmI", "{}", token, NULL, &r);
        assert_int_equal(r.status, 200);
        assert_int_equal(it_header_long(&r, "RateLimit-Limit"), API_CAPACITY); /* from Redis */
        it_http_response_free(&r);
        assert_int_equal(
            it_metric(g_a.admin_url, "keelson_gateway_redis_script_loads_total", &loads_after), 0);
        assert_true(loads_after == loads_before + 1);
        assert_int_equal(status_of(&g_b, "WhoAmI", "{}", token, NULL), 200);
}

/* Redis stopped: every replica limits on its own share; Redis back: one bucket again. */
static void test_redis_down_then_back(void **state)
{
        (void)state;
        char token[TOKEN_MAX], tenant[ID_MAX];
        const it_gateway *gws[2] = {&g_a, &g_b};
        it_http_response r;
        double fallbacks = 0;
        new_session(token, tenant);
        assert_int_equal(it_stack_redis(&g_stack, 0), 0);
        wait_redis_up(&g_a, 0);
        wait_redis_up(&g_b, 0);
        for (int g = 0; g < 2; g++) {
                for (int i = 0; i < API_CAPACITY / 2; i++) { /* 6 shared by 2 replicas: 3 each */
                        call_from(gws[g], "WhoAmI", "{}", token, NULL, &r);
                        assert_int_equal(r.status, 200);
                        assert_int_equal(it_header_long(&r, "RateLimit-Limit"), API_CAPACITY / 2);
                        it_http_response_free(&r);
                }
                call_from(gws[g], "WhoAmI", "{}", token, NULL, &r);
                assert_refused(&r);
                it_http_response_free(&r);
        }
        assert_int_equal(
            it_metric(g_a.admin_url, "keelson_gateway_ratelimit_fallbacks_total", &fallbacks), 0);
        assert_true(fallbacks >= 1);
        /* The switch is logged once, however many requests were decided locally. */
        assert_int_equal(count_in_file(g_a.log_path, "redis unavailable"), 1);

        assert_int_equal(it_stack_redis(&g_stack, 1), 0);
        wait_redis_up(&g_a, 1);
        wait_redis_up(&g_b, 1);
        assert_int_equal(count_in_file(g_a.log_path, "redis is back"), 1);
        new_session(token, tenant);
        for (int i = 0; i < API_CAPACITY; i++) {
                call_from(gws[i % 2], "WhoAmI", "{}", token, NULL, &r);
                assert_int_equal(r.status, 200);
                assert_int_equal(it_header_long(&r, "RateLimit-Limit"), API_CAPACITY);
                it_http_response_free(&r);
        }
        assert_int_equal(status_of(&g_a, "WhoAmI", "{}", token, NULL), 429);
        assert_int_equal(status_of(&g_b, "WhoAmI", "{}", token, NULL), 429);
}

static double metric_of(const it_gateway *gw, const char *series)
{
        return it_metric_of(gw->admin_url, series);
}

/*
 * A gateway that starts while Redis is down is in fallback from its first
 * request: the outage is counted (and logged) once, and Redis coming back
 * is its one recovery.
 */
static void test_started_while_redis_down(void **state)
{
        (void)state;
        char token[TOKEN_MAX], tenant[ID_MAX];
        it_gateway gw;
        it_http_response r;
        const char *env[] = {"KEELSON_GATEWAY_RATE_API=6:1/1m", "KEELSON_GATEWAY_REPLICAS=1",
                             g_prefix, NULL};
        new_session(token, tenant);
        assert_int_equal(it_stack_redis(&g_stack, 0), 0);
        assert_int_equal(it_gateway_start(&g_stack, env, 1, &gw), 0);
        call_from(&gw, "WhoAmI", "{}", token, NULL, &r);
        assert_int_equal(r.status, 200); /* served, by the in-process bucket */
        assert_int_equal(it_header_long(&r, "RateLimit-Limit"), API_CAPACITY);
        it_http_response_free(&r);
        assert_true(metric_of(&gw, "keelson_gateway_redis_up") == 0);
        assert_true(metric_of(&gw, "keelson_gateway_ratelimit_fallbacks_total") == 1);
        assert_true(metric_of(&gw, "keelson_gateway_ratelimit_recoveries_total") == 0);
        assert_true(metric_of(&gw, "keelson_gateway_ratelimit_decisions_total{scope=\"api\","
                                   "decision=\"allowed\",backend=\"local\"}") >= 1);
        assert_int_equal(count_in_file(gw.log_path, "redis unavailable"), 1);

        assert_int_equal(it_stack_redis(&g_stack, 1), 0);
        wait_redis_up(&gw, 1);
        assert_true(metric_of(&gw, "keelson_gateway_ratelimit_fallbacks_total") == 1);
        assert_true(metric_of(&gw, "keelson_gateway_ratelimit_recoveries_total") == 1);
        assert_int_equal(count_in_file(gw.log_path, "redis is back"), 1);
        assert_int_equal(status_of(&gw, "WhoAmI", "{}", token, NULL), 200);
        assert_true(metric_of(&gw, "keelson_gateway_ratelimit_decisions_total{scope=\"api\","
                                   "decision=\"allowed\",backend=\"redis\"}") >= 1);
        it_gateway_stop(&gw);
}

/*
 * Leases: a bucket with plenty in it is spent from leases of 1% of its
 * capacity, so most decisions never reach Redis, and the headers still
 * count down.
 */
static void test_lease_spares_redis(void **state)
{
        (void)state;
        char token[TOKEN_MAX], tenant[ID_MAX];
        it_gateway gw;
        it_http_response r;
        const char *env[] = {"KEELSON_GATEWAY_RATE_API=20000:1/1h", g_prefix, NULL};
        new_session(token, tenant);
        assert_int_equal(it_gateway_start(&g_stack, env, 1, &gw), 0);
        wait_redis_up(&gw, 1);
        long last = 20000;
        for (int i = 0; i < 150; i++) {
                call_from(&gw, "WhoAmI", "{}", token, NULL, &r);
                assert_int_equal(r.status, 200);
                long remaining = it_header_long(&r, "RateLimit-Remaining");
                assert_true(remaining >= 0 && remaining < 20000);
                assert_true(remaining <
                            last); /* one bucket, counting down (no refill to speak of) */
                last = remaining;
                it_http_response_free(&r);
        }
        double leased = metric_of(&gw, "keelson_gateway_ratelimit_decisions_total{scope=\"api\","
                                       "decision=\"allowed\",backend=\"lease\"}");
        double redis = metric_of(&gw, "keelson_gateway_ratelimit_decisions_total{scope=\"api\","
                                      "decision=\"allowed\",backend=\"redis\"}");
        /* leases of 100: the calls took two or a few leases (one expires between slow calls) */
        assert_true(leased >= 100);
        assert_true(redis >= 1 && redis + leased >= 150 && redis <= 20);
        it_gateway_stop(&gw);
}

/*
 * Leases never let more through than the bucket holds: two gateways spend
 * one tenant's bucket of 300 (leases of 3) in turn, and exactly the
 * tokens it held are let through, less at most what the leases still held
 * unspent when the bucket ran low.
 */
static void test_lease_never_over_admits(void **state)
{
        (void)state;
        char token[TOKEN_MAX], tenant[ID_MAX];
        it_gateway a, b;
        const char *env[] = {"KEELSON_GATEWAY_RATE_API=300:1/1h", g_prefix, NULL};
        new_session(token, tenant);
        assert_int_equal(it_gateway_start(&g_stack, env, 1, &a), 0);
        assert_int_equal(it_gateway_start(&g_stack, env, 1, &b), 0);
        wait_redis_up(&a, 1);
        wait_redis_up(&b, 1);
        int allowed = 0, refused = 0;
        for (int i = 0; i < 340; i++) {
                long status = status_of(i % 2 ? &b : &a, "WhoAmI", "{}", token, NULL);
                assert_true(status == 200 || status == 429);
                allowed += status == 200;
                refused += status == 429;
        }
        assert_true(allowed <= 300);
        assert_true(allowed >= 300 - 2 * (3 - 1));
        assert_true(refused >= 40);
        assert_true(metric_of(&a, "keelson_gateway_ratelimit_decisions_total{scope=\"api\","
                                  "decision=\"allowed\",backend=\"lease\"}") >= 1);
        it_gateway_stop(&a);
        it_gateway_stop(&b);
}

/* ResolveContext calls every auth replica has handled, whatever their code. */
static double auth_resolves(void)
{
        double total = 0;
        for (int i = 0; i < g_stack.n_auth; i++) {
                total += it_metric_sum_at(g_stack.auth_health_ports[i],
                                          "keelson_rpc_requests_total", "/ResolveContext\"");
        }
        return total;
}

/*
 * Made-up bearer tokens are never cached, so each would cost auth a call and
 * PostgreSQL a lookup: the client address pays for every token the cache
 * does not know, and a flood is refused (429) before it reaches auth. A
 * token the cache holds never takes from that bucket and keeps working.
 */
static void test_bogus_token_flood_is_refused(void **state)
{
        (void)state;
        char ip[XFF_MAX], other_ip[XFF_MAX], token[TOKEN_MAX], tenant[ID_MAX];
        char bogus[XFF_MAX + 32];
        it_gateway gw;
        it_http_response r;
        const char *env[] = {"KEELSON_GATEWAY_RATE_RESOLVE=" RESOLVE_SPEC,
                             "KEELSON_GATEWAY_TRUSTED_PROXIES=127.0.0.1", g_prefix, NULL};
        assert_int_equal(it_gateway_start(&g_stack, env, 1, &gw), 0);
        it_random_ip(ip, sizeof(ip));
        it_random_ip(other_ip, sizeof(other_ip));
        new_session(token, tenant);
        assert_int_equal(status_of(&gw, "WhoAmI", "{}", token, ip), 200); /* resolved, cached */
        double resolves_before = auth_resolves();
        int unauthenticated = 0, refused = 0;
        for (int i = 0; i < 4 * RESOLVE_CAPACITY; i++) {
                snprintf(bogus, sizeof(bogus), "made-up-token-%d-%s", i, ip);
                call_from(&gw, "WhoAmI", "{}", bogus, ip, &r);
                if (r.status == 401) {
                        assert_int_equal(refused, 0); /* no 401 once the bucket is empty */
                        unauthenticated++;
                } else {
                        assert_refused(&r);
                        assert_int_equal(it_header_long(&r, "RateLimit-Limit"), RESOLVE_CAPACITY);
                        refused++;
                }
                it_http_response_free(&r);
        }
        /* The valid token spent one of the address's tokens; the flood the rest. */
        assert_int_equal(unauthenticated, RESOLVE_CAPACITY - 1);
        assert_int_equal(refused, 3 * RESOLVE_CAPACITY + 1);
        /* auth saw only the tokens that were let through */
        assert_true(auth_resolves() - resolves_before == RESOLVE_CAPACITY - 1);
        /* The cached token from the same address, many times over: still served. */
        for (int i = 0; i < RESOLVE_CAPACITY + 1; i++) {
                call_from(&gw, "WhoAmI", "{}", token, ip, &r);
                assert_int_equal(r.status, 200);
                assert_true(it_header_long(&r, "RateLimit-Limit") > RESOLVE_CAPACITY); /* api */
                it_http_response_free(&r);
        }
        /* Another address has a bucket of its own. */
        assert_int_equal(status_of(&gw, "WhoAmI", "{}", "made-up-elsewhere", other_ip), 401);
        double limited = -1;
        assert_int_equal(it_metric(gw.admin_url,
                                   "keelson_gateway_ratelimit_decisions_total{scope=\"resolve\","
                                   "decision=\"limited\",backend=\"redis\"}",
                                   &limited),
                         0);
        it_gateway_stop(&gw);
        assert_true(limited == 3 * RESOLVE_CAPACITY + 1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_capacity_and_headers),
            cmocka_unit_test(test_no_headers_before_the_limit_step),
            cmocka_unit_test(test_replicas_share_one_bucket),
            cmocka_unit_test(test_per_key_isolation),
            cmocka_unit_test(test_refill_after_retry_after),
            cmocka_unit_test(test_untrusted_forwarded_for_is_ignored),
            cmocka_unit_test(test_bogus_token_flood_is_refused),
            cmocka_unit_test(test_script_reloaded_after_flush),
            cmocka_unit_test(test_redis_down_then_back),
            cmocka_unit_test(test_started_while_redis_down),
            cmocka_unit_test(test_lease_spares_redis),
            cmocka_unit_test(test_lease_never_over_admits),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
