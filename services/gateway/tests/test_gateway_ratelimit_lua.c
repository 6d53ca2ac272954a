/*
 * The gateway's token-bucket script (services/gateway/ratelimit.lua, the
 * same bytes the gateway embeds) against a real redis-server that this test
 * starts on a free loopback port and stops at the end.
 *
 * Most cases pass the clock explicitly (the script's optional "now"), so the
 * arithmetic is checked at exact instants: a fresh bucket, an empty one, a
 * long idle, a clock that stands still or goes back, capacity 1, fractional
 * refills. One case uses Redis TIME, as the gateway does by default.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "ratelimit_script.h"

#define SEC_US         1000000LL
#define START_WAIT_MS  10000
#define REDIS_ARGS_MAX 16

typedef struct harness {
        pid_t pid;
        int port;
        redisContext *c;
        char sha[41];
} harness;

typedef struct decision {
        long long allowed, remaining, retry_ms, reset_ms;
} decision;

/* ---- the redis-server this test owns ------------------------------------- */

static int free_port(void)
{
        struct sockaddr_in sa = {.sin_family = AF_INET};
        socklen_t len = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int port = -1;

        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
                port = ntohs(sa.sin_port);
        }
        if (fd >= 0) {
                close(fd);
        }
        return port;
}

static pid_t spawn_redis(int port)
{
        char port_s[16];
        pid_t pid;

        snprintf(port_s, sizeof(port_s), "%d", port);
        pid = fork();
        if (pid == 0) {
                int devnull = open("/dev/null", O_RDWR);
                if (devnull >= 0) {
                        dup2(devnull, STDIN_FILENO);
                        dup2(devnull, STDOUT_FILENO);
                        dup2(devnull, STDERR_FILENO);
                }
                execlp("redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1",
                       "--save", "", "--appendonly", "no", "--daemonize", "no", (char *)NULL);
                _exit(127);
        }
        return pid;
}

static void sleep_ms(long ms)
{
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

static redisContext *connect_when_up(int port)
{
        struct timeval tv = {1, 0};

        for (int waited = 0; waited < START_WAIT_MS; waited += 50) {
                redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
                if (c != NULL && c->err == 0) {
                        redisReply *r = redisCommand(c, "PING");
                        bool up = r != NULL && r->type == REDIS_REPLY_STATUS;
                        freeReplyObject(r);
                        if (up) {
                                return c;
                        }
                }
                redisFree(c);
                sleep_ms(50);
        }
        return NULL;
}

static int setup(void **state)
{
        harness *h = calloc(1, sizeof(*h));
        redisReply *r;

        assert_non_null(h);
        h->port = free_port();
        assert_true(h->port > 0);
        h->pid = spawn_redis(h->port);
        assert_true(h->pid > 0);
        h->c = connect_when_up(h->port);
        if (h->c == NULL) {
                kill(h->pid, SIGKILL);
                waitpid(h->pid, NULL, 0);
                fail_msg("redis-server did not answer on port %d", h->port);
        }
        r = redisCommand(h->c, "SCRIPT LOAD %b", gw_ratelimit_lua, gw_ratelimit_lua_len);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        assert_int_equal(r->len, 40);
        memcpy(h->sha, r->str, 41);
        freeReplyObject(r);
        *state = h;
        return 0;
}

static int teardown(void **state)
{
        harness *h = *state;

        redisFree(h->c);
        kill(h->pid, SIGTERM);
        waitpid(h->pid, NULL, 0);
        free(h);
        return 0;
}

/* ---- calling the script ---------------------------------------------------- */

/* EVALSHA with now_us (< 0: Redis TIME). Returns the raw reply. */
static redisReply *eval(harness *h, const char *key, long long cap, long long refill,
                        long long period_us, long long cost, long long now_us)
{
        char nums[5][24];
        const char *argv[REDIS_ARGS_MAX] = {"EVALSHA", h->sha, "1", key};
        int argc = 4;

        snprintf(nums[0], sizeof(nums[0]), "%lld", cap);
        snprintf(nums[1], sizeof(nums[1]), "%lld", refill);
        snprintf(nums[2], sizeof(nums[2]), "%lld", period_us);
        snprintf(nums[3], sizeof(nums[3]), "%lld", cost);
        snprintf(nums[4], sizeof(nums[4]), "%lld", now_us);
        for (int i = 0; i < (now_us < 0 ? 4 : 5); i++) {
                argv[argc++] = nums[i];
        }
        return redisCommandArgv(h->c, argc, argv, NULL);
}

static decision decide(harness *h, const char *key, long long cap, long long refill,
                       long long period_us, long long now_us)
{
        decision d;
        redisReply *r = eval(h, key, cap, refill, period_us, 1, now_us);

        assert_non_null(r);
        if (r->type == REDIS_REPLY_ERROR) {
                fail_msg("script error: %s", r->str);
        }
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->elements, 4);
        for (size_t i = 0; i < 4; i++) {
                assert_int_equal(r->element[i]->type, REDIS_REPLY_INTEGER);
        }
        d.allowed = r->element[0]->integer;
        d.remaining = r->element[1]->integer;
        d.retry_ms = r->element[2]->integer;
        d.reset_ms = r->element[3]->integer;
        freeReplyObject(r);
        return d;
}

static long long pttl(harness *h, const char *key)
{
        redisReply *r = redisCommand(h->c, "PTTL %s", key);
        long long v;

        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        v = r->integer;
        freeReplyObject(r);
        return v;
}

static void assert_decision(decision d, long long allowed, long long remaining, long long retry_ms,
                            long long reset_ms)
{
        assert_int_equal(d.allowed, allowed);
        assert_int_equal(d.remaining, remaining);
        assert_int_equal(d.retry_ms, retry_ms);
        assert_int_equal(d.reset_ms, reset_ms);
}

/* ---- the cases ------------------------------------------------------------- */

/* A bucket nobody used is full: capacity requests pass, each one less left. */
static void test_fresh_bucket(void **state)
{
        harness *h = *state;
        long long t0 = 1000 * SEC_US;

        assert_decision(decide(h, "fresh", 3, 1, 5 * SEC_US, t0), 1, 2, 0, 5000);
        assert_decision(decide(h, "fresh", 3, 1, 5 * SEC_US, t0), 1, 1, 0, 10000);
        assert_decision(decide(h, "fresh", 3, 1, 5 * SEC_US, t0), 1, 0, 0, 15000);
}

/* Empty: refused with the exact wait, and the wait is enough. */
static void test_empty_bucket(void **state)
{
        harness *h = *state;
        long long t0 = 2000 * SEC_US;

        for (int i = 0; i < 3; i++) {
                assert_int_equal(decide(h, "empty", 3, 1, 5 * SEC_US, t0).allowed, 1);
        }
        assert_decision(decide(h, "empty", 3, 1, 5 * SEC_US, t0), 0, 0, 5000, 15000);
        /* Refusals cost nothing: asking again changes no answer. */
        assert_decision(decide(h, "empty", 3, 1, 5 * SEC_US, t0), 0, 0, 5000, 15000);
        /* One microsecond early is still too early... */
        assert_decision(decide(h, "empty", 3, 1, 5 * SEC_US, t0 + 5 * SEC_US - 1), 0, 0, 1, 10001);
        /* ...and exactly the retry-after later the token is there. */
        assert_decision(decide(h, "empty", 3, 1, 5 * SEC_US, t0 + 5 * SEC_US), 1, 0, 0, 15000);
}

/* Idle for years: full, never more than capacity, no overflow. */
static void test_long_idle(void **state)
{
        harness *h = *state;
        long long t0 = 3000 * SEC_US;
        long long years = 10LL * 365 * 24 * 3600 * SEC_US;

        for (int i = 0; i < 5; i++) {
                decide(h, "idle", 5, 1, 5 * SEC_US, t0);
        }
        assert_int_equal(decide(h, "idle", 5, 1, 5 * SEC_US, t0).allowed, 0);
        assert_decision(decide(h, "idle", 5, 1, 5 * SEC_US, t0 + years), 1, 4, 0, 5000);
        /* A huge refill rate over a huge idle: still capped. */
        assert_decision(decide(h, "idle-fast", 1000000, 1000000, 1000, t0), 1, 999999, 0, 1);
        assert_decision(decide(h, "idle-fast", 1000000, 1000000, 1000, t0 + years), 1, 999999, 0,
                        1);
}

/* A clock that stands still refills nothing; one that goes back mints nothing. */
static void test_clock_not_advancing(void **state)
{
        harness *h = *state;
        long long t0 = 4000 * SEC_US;

        assert_int_equal(decide(h, "still", 2, 1, SEC_US, t0).allowed, 1);
        assert_int_equal(decide(h, "still", 2, 1, SEC_US, t0).allowed, 1);
        for (int i = 0; i < 10; i++) {
                assert_decision(decide(h, "still", 2, 1, SEC_US, t0), 0, 0, 1000, 2000);
        }
        /* Back by a minute: still refused, still one second to wait from t0. */
        assert_decision(decide(h, "still", 2, 1, SEC_US, t0 - 60 * SEC_US), 0, 0, 1000, 2000);
        /* The refill counts from the latest instant seen, t0. */
        assert_decision(decide(h, "still", 2, 1, SEC_US, t0 + SEC_US), 1, 0, 0, 2000);
}

/* Capacity 1: one request per period, exactly. */
static void test_capacity_one(void **state)
{
        harness *h = *state;
        long long t0 = 5000 * SEC_US;

        assert_decision(decide(h, "one", 1, 1, SEC_US, t0), 1, 0, 0, 1000);
        assert_decision(decide(h, "one", 1, 1, SEC_US, t0), 0, 0, 1000, 1000);
        assert_decision(decide(h, "one", 1, 1, SEC_US, t0 + 999999), 0, 0, 1, 1);
        assert_decision(decide(h, "one", 1, 1, SEC_US, t0 + SEC_US), 1, 0, 0, 1000);
        assert_decision(decide(h, "one", 1, 1, SEC_US, t0 + 3 * SEC_US), 1, 0, 0, 1000);
}

/* Partial refills add up exactly: 1.5 s + 3.5 s of a 5 s period is one token. */
static void test_fractional_refill(void **state)
{
        harness *h = *state;
        long long t0 = 6000 * SEC_US;

        assert_int_equal(decide(h, "frac", 1, 1, 5 * SEC_US, t0).allowed, 1);
        assert_decision(decide(h, "frac", 1, 1, 5 * SEC_US, t0 + 1500000), 0, 0, 3500, 3500);
        assert_decision(decide(h, "frac", 1, 1, 5 * SEC_US, t0 + 5 * SEC_US), 1, 0, 0, 5000);
        /* 500 per minute: one token every 120 ms. */
        for (int i = 0; i < 500; i++) {
                assert_int_equal(decide(h, "api", 500, 500, 60 * SEC_US, t0).allowed, 1);
        }
        assert_decision(decide(h, "api", 500, 500, 60 * SEC_US, t0), 0, 0, 120, 60000);
        assert_decision(decide(h, "api", 500, 500, 60 * SEC_US, t0 + 120000), 1, 0, 0, 60000);
}

/* Every call leaves an expiry: capacity / rate plus the one-second margin. */
static void test_expiry_always(void **state)
{
        harness *h = *state;
        long long t0 = 7000 * SEC_US;
        long long ttl;

        decide(h, "ttl", 3, 1, 5 * SEC_US, t0);
        ttl = pttl(h, "ttl");
        assert_true(ttl > 14000 && ttl <= 16000);
        for (int i = 0; i < 3; i++) {
                decide(h, "ttl", 3, 1, 5 * SEC_US, t0); /* the last one is refused */
        }
        ttl = pttl(h, "ttl");
        assert_true(ttl > 14000 && ttl <= 16000);
        /* A bucket that refills in microseconds still gets the margin, never 0. */
        decide(h, "ttl-short", 1, 1, 1, t0);
        ttl = pttl(h, "ttl-short");
        assert_true(ttl > 0 && ttl <= 1001);
}

/* Without "now", Redis TIME is the clock: a fresh bucket still answers. */
static void test_redis_time(void **state)
{
        harness *h = *state;
        redisReply *r;
        long long now_us, stored;

        assert_decision(decide(h, "time", 2, 1, 5 * SEC_US, -1), 1, 1, 0, 5000);
        r = redisCommand(h->c, "TIME");
        assert_non_null(r);
        now_us = atoll(r->element[0]->str) * SEC_US + atoll(r->element[1]->str);
        freeReplyObject(r);
        r = redisCommand(h->c, "HGET time t");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        stored = atoll(r->str);
        freeReplyObject(r);
        assert_true(stored <= now_us && stored > now_us - 10 * SEC_US);
}

static void assert_error(harness *h, long long cap, long long refill, long long period_us,
                         long long cost)
{
        redisReply *r = eval(h, "bad", cap, refill, period_us, cost, 1);

        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        assert_non_null(strstr(r->str, "ratelimit: bad arguments"));
        freeReplyObject(r);
}

static void test_bad_arguments(void **state)
{
        harness *h = *state;
        redisReply *r;

        assert_error(h, 0, 1, SEC_US, 1);               /* no capacity */
        assert_error(h, 1, 0, SEC_US, 1);               /* no refill */
        assert_error(h, 1, 1, 0, 1);                    /* no period */
        assert_error(h, 2, 1, SEC_US, 3);               /* costs more than capacity */
        assert_error(h, 1000000000, 1, 10000000000, 1); /* beyond exact arithmetic */
        r = redisCommand(h->c, "EVALSHA %s 1 bad 1.5 1 1000 1", h->sha);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
        /* Nothing was written for a refused call. */
        r = redisCommand(h->c, "EXISTS bad");
        assert_int_equal(r->integer, 0);
        freeReplyObject(r);
}

/* After SCRIPT FLUSH, EVALSHA answers NOSCRIPT: the gateway's cue to reload. */
static void test_noscript(void **state)
{
        harness *h = *state;
        redisReply *r = redisCommand(h->c, "SCRIPT FLUSH");

        freeReplyObject(r);
        r = eval(h, "gone", 1, 1, SEC_US, 1, 1);
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        assert_int_equal(strncmp(r->str, "NOSCRIPT", 8), 0);
        freeReplyObject(r);
        r = redisCommand(h->c, "SCRIPT LOAD %b", gw_ratelimit_lua, gw_ratelimit_lua_len);
        assert_string_equal(r->str, h->sha);
        freeReplyObject(r);
        assert_int_equal(decide(h, "gone", 1, 1, SEC_US, 1).allowed, 1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_fresh_bucket),  cmocka_unit_test(test_empty_bucket),
            cmocka_unit_test(test_long_idle),     cmocka_unit_test(test_clock_not_advancing),
            cmocka_unit_test(test_capacity_one),  cmocka_unit_test(test_fractional_refill),
            cmocka_unit_test(test_expiry_always), cmocka_unit_test(test_redis_time),
            cmocka_unit_test(test_bad_arguments), cmocka_unit_test(test_noscript),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
