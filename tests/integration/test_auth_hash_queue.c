/*
 * A full hash queue answers resource_exhausted, end to end, while cheap
 * calls keep answering.
 *
 * The test runs a broker of its own (in process), an auth replica behind it
 * with the smallest hash pool there is (KEELSON_AUTH_HASH_WORKERS=1,
 * KEELSON_AUTH_HASH_QUEUE_MAX=1: two password checks at a time, one hashing
 * and one waiting) on the stack's database, and a gateway of its own in
 * front of that broker, so that every call of this test reaches that
 * replica and no other. Storm threads send Logins for unknown addresses
 * (each a full scrypt against the dummy hash, and no lockout to trip) all
 * at once; meanwhile another thread calls WhoAmI back to back. Clients see:
 * some logins 429 resource_exhausted "too many password checks in
 * progress, retry later" (not the gateway's rate limit, which this gateway
 * sets out of reach), the others the usual 401, and every WhoAmI 200.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "auth_it.h"
#include "ks_broker.h"
#include "ks_code.h"

#define STORM_THREADS   16
#define LOGINS_PER      4 /* back to back per storm thread: the storm lasts a while */
#define CHEAP_CALLS_MAX 10000
#define REPLICA_WAIT_MS 15000
#define POOL_FULL_MSG   "too many password checks in progress, retry later"

static struct {
        ait_replica own;
        it_gateway gateway;
} fx;

static int teardown(void **state)
{
        (void)state;
        it_gateway_stop(&fx.gateway);
        ait_replica_stop(&fx.own);
        return 0;
}

/* The broker on free ports, the small-pool replica behind it, a gateway in front. */
static int setup(void **state)
{
        const char *replica_env[] = {"KEELSON_AUTH_HASH_WORKERS=1", "KEELSON_AUTH_HASH_QUEUE_MAX=1",
                                     NULL};

        if (ait_setup(state) != 0 || ait_replica_start(&fx.own, replica_env) != 0) {
                return -1;
        }
        const char *gateway_env[] = {fx.own.env_broker,
                                     "KEELSON_GATEWAY_RATE_AUTH=100000:100000/1s",
                                     "KEELSON_GATEWAY_RATE_API=100000:100000/1s", NULL};
        if (it_gateway_start(&ait_stack, gateway_env, 1, &fx.gateway) != 0) {
                teardown(state); /* cmocka runs no teardown after a failed setup */
                return -1;
        }
        return 0;
}

/* ---- the storm and the cheap calls --------------------------------------------- */

typedef struct storm {
        pthread_barrier_t *start;
        long unauthenticated, pool_full, other; /* this thread's replies */
        char other_reply[256];
} storm;

static void *storm_main(void *arg)
{
        storm *s = arg;
        char email[AIT_EMAIL_MAX], body[512];
        it_http_response r;

        pthread_barrier_wait(s->start);
        for (int i = 0; i < LOGINS_PER; i++) {
                it_unique_email("it-hashq-nobody", email, sizeof(email));
                snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"not a password\"}",
                         email);
                if (it_auth_call(fx.gateway.url, "Login", body, NULL, NULL, &r) != 0) {
                        s->other++;
                        continue;
                }
                if (r.status == 401) {
                        s->unauthenticated++;
                } else if (r.status == 429 && strstr(r.body, "\"resource_exhausted\"") != NULL &&
                           strstr(r.body, POOL_FULL_MSG) != NULL) {
                        s->pool_full++;
                } else {
                        s->other++;
                        snprintf(s->other_reply, sizeof(s->other_reply), "%ld %.200s", r.status,
                                 r.body);
                }
                it_http_response_free(&r);
        }
        return NULL;
}

typedef struct cheap {
        const char *token;
        atomic_bool stop;
        long calls, ok;
        char failed_reply[256];
} cheap;

static void *cheap_main(void *arg)
{
        cheap *c = arg;
        it_http_response r;

        while (!atomic_load(&c->stop) && c->calls < CHEAP_CALLS_MAX) {
                c->calls++;
                if (it_auth_call(fx.gateway.url, "WhoAmI", "{}", c->token, NULL, &r) != 0) {
                        snprintf(c->failed_reply, sizeof(c->failed_reply), "no HTTP reply");
                        continue;
                }
                if (r.status == 200) {
                        c->ok++;
                } else {
                        snprintf(c->failed_reply, sizeof(c->failed_reply), "%ld %.200s", r.status,
                                 r.body);
                }
                it_http_response_free(&r);
        }
        return NULL;
}

/* WhoAmI through this test's gateway, until the replica answers it (it has just started). */
static void wait_replica_answers(const char *token)
{
        it_http_response r;
        long status = 0;

        for (int waited = 0; waited < REPLICA_WAIT_MS; waited += 50) {
                assert_int_equal(it_auth_call(fx.gateway.url, "WhoAmI", "{}", token, NULL, &r), 0);
                status = r.status;
                it_http_response_free(&r);
                if (status == 200) {
                        return;
                }
                it_sleep_ms(50);
        }
        fail_msg("the replica behind this test's broker never answered WhoAmI (HTTP %ld)", status);
}

static void test_full_hash_queue_is_resource_exhausted(void **state)
{
        storm s[STORM_THREADS];
        pthread_t t[STORM_THREADS], ct;
        pthread_barrier_t start;
        ait_user u;
        cheap c;
        long unauthenticated = 0, pool_full = 0;
        double rejected = 0;
        char metrics_url[64];

        (void)state;
        ait_signup("it-hashq", "Hash Queue", &u); /* through the stack: the same database */
        wait_replica_answers(u.token);

        memset(s, 0, sizeof(s));
        memset(&c, 0, sizeof(c));
        c.token = u.token;
        atomic_init(&c.stop, false);
        assert_int_equal(pthread_barrier_init(&start, NULL, STORM_THREADS), 0);
        assert_int_equal(pthread_create(&ct, NULL, cheap_main, &c), 0);
        for (int i = 0; i < STORM_THREADS; i++) {
                s[i].start = &start;
                assert_int_equal(pthread_create(&t[i], NULL, storm_main, &s[i]), 0);
        }
        for (int i = 0; i < STORM_THREADS; i++) {
                pthread_join(t[i], NULL);
        }
        atomic_store(&c.stop, true);
        pthread_join(ct, NULL);
        pthread_barrier_destroy(&start);

        for (int i = 0; i < STORM_THREADS; i++) {
                if (s[i].other != 0) {
                        fail_msg("a storm login got neither 401 nor a full pool: %s",
                                 s[i].other_reply);
                }
                unauthenticated += s[i].unauthenticated;
                pool_full += s[i].pool_full;
        }
        /* Two checks at a time: of 64 logins sent together, some were refused at once... */
        assert_true(pool_full > 0);
        /* ...and some were checked (and failed, as unknown addresses do). */
        assert_true(unauthenticated > 0);
        assert_int_equal(unauthenticated + pool_full, STORM_THREADS * LOGINS_PER);
        /* Cheap calls kept answering throughout. */
        if (c.ok != c.calls) {
                fail_msg("%ld of %ld WhoAmI calls during the storm failed, e.g. %s", c.calls - c.ok,
                         c.calls, c.failed_reply);
        }
        assert_true(c.calls > 0);
        /* The replica counted every refusal its clients got, whichever check refused. */
        snprintf(metrics_url, sizeof(metrics_url), "http://127.0.0.1:%d",
                 fx.own.replica.health_port);
        assert_int_equal(it_metric(metrics_url, "keelson_auth_hash_rejected_total", &rejected), 0);
        assert_int_equal((long)rejected, pool_full);
        fprintf(stderr, "storm: %ld refused (pool full), %ld checked; %ld WhoAmI, all 200\n",
                pool_full, unauthenticated, c.calls);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_full_hash_queue_is_resource_exhausted),
        };

        return cmocka_run_group_tests(tests, setup, teardown);
}
