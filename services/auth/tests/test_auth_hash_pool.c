/*
 * Unit tests of the auth service's hash pool (services/auth/hash_pool.c):
 * results match ks_crypto's, a full queue refuses at once instead of
 * growing, and a job whose deadline passes in the queue is dropped.
 *
 * Linked with keelson_auth_lib: the same hash_pool.o the service runs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include <cmocka.h>

#include "auth.h"

/* Fast parameters for the checks of results. */
static const ks_scrypt_params fast = {1u << 10, 8, 1, 64, 16};
/* Slow enough (tens of ms or more) to hold the only hash thread while the test looks. */
static const ks_scrypt_params slow = {1u << 16, 8, 1, 64, 16};

static void test_hash_then_verify(void **state)
{
        auth_hash_pool *p = NULL;
        char stored[KS_PASSWORD_HASH_MAX];
        bool ok = false, rehash = true;

        (void)state;
        assert_int_equal(auth_hash_pool_new(&p, 2, 4, 0), KS_OK);
        assert_int_equal(auth_hash_password(p, "correct horse", &fast, stored, 0), KS_OK);
        assert_int_equal(auth_verify_password(p, "correct horse", stored, &fast, &ok, &rehash, 0),
                         KS_OK);
        assert_true(ok);
        assert_false(rehash);
        assert_int_equal(auth_verify_password(p, "wrong horse", stored, &fast, &ok, NULL, 0),
                         KS_OK);
        assert_false(ok);
        /* A malformed stored string is a failed check, not a match. */
        assert_int_equal(auth_verify_password(p, "x", "$nonsense$", &fast, &ok, NULL, 0),
                         KS_INTERNAL);
        assert_false(ok);
        auth_hash_pool_free(p);
}

static void test_bad_sizes(void **state)
{
        auth_hash_pool *p = NULL;

        (void)state;
        assert_int_equal(auth_hash_pool_new(&p, 0, 1, 0), KS_INVALID_ARGUMENT);
        assert_int_equal(auth_hash_pool_new(&p, 1, 0, 0), KS_INVALID_ARGUMENT);
        assert_int_equal(auth_hash_pool_new(&p, 1, 1, 20), KS_INVALID_ARGUMENT);
        assert_null(p);
        auth_hash_pool_free(NULL);
}

typedef struct slow_job {
        auth_hash_pool *p;
        int rc;
        char out[KS_PASSWORD_HASH_MAX];
} slow_job;

static void *run_slow(void *arg)
{
        slow_job *j = arg;

        j->rc = auth_hash_password(j->p, "slow", &slow, j->out, 0);
        return NULL;
}

/* Waits until exactly `running` jobs are hashed and `queued` wait. */
static void wait_state(auth_hash_pool *p, int running, int queued)
{
        struct timespec pause = {0, 1000000};

        for (int i = 0; i < 10000 && (auth_hash_pool_running(p) != running ||
                                      auth_hash_pool_queued(p) != queued);
             i++) {
                nanosleep(&pause, NULL);
        }
        assert_int_equal(auth_hash_pool_running(p), running);
        assert_int_equal(auth_hash_pool_queued(p), queued);
}

static void test_full_queue_refuses_at_once(void **state)
{
        auth_hash_pool *p = NULL;
        slow_job a, b;
        pthread_t ta, tb;
        char out[KS_PASSWORD_HASH_MAX];

        (void)state;
        assert_int_equal(auth_hash_pool_new(&p, 1, 1, 0), KS_OK);
        memset(&a, 0, sizeof(a));
        memset(&b, 0, sizeof(b));
        a.p = b.p = p;
        assert_int_equal(pthread_create(&ta, NULL, run_slow, &a), 0);
        wait_state(p, 1, 0); /* a holds the only hash thread */
        assert_int_equal(pthread_create(&tb, NULL, run_slow, &b), 0);
        wait_state(p, 1, 1); /* b waits: the queue is full */
        assert_int_equal(auth_hash_password(p, "more", &fast, out, 0), KS_RESOURCE_EXHAUSTED);
        assert_true(auth_hash_pool_rejected(p) >= 1);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        assert_int_equal(a.rc, KS_OK);
        assert_int_equal(b.rc, KS_OK);
        /* Room again. */
        assert_int_equal(auth_hash_password(p, "more", &fast, out, 0), KS_OK);
        auth_hash_pool_free(p);
}

static void test_deadline_drops_a_queued_job(void **state)
{
        auth_hash_pool *p = NULL;
        slow_job a, b;
        pthread_t ta, tb;
        char out[KS_PASSWORD_HASH_MAX];

        (void)state;
        assert_int_equal(auth_hash_pool_new(&p, 1, 4, 0), KS_OK);
        memset(&a, 0, sizeof(a));
        memset(&b, 0, sizeof(b));
        a.p = b.p = p;
        assert_int_equal(pthread_create(&ta, NULL, run_slow, &a), 0);
        wait_state(p, 1, 0);
        assert_int_equal(pthread_create(&tb, NULL, run_slow, &b), 0);
        wait_state(p, 1, 1); /* one slow job runs, one waits */
        /* Already past: it cannot wait for the slow jobs ahead of it. */
        assert_int_equal(auth_hash_password(p, "late", &fast, out, ks_now_ms() - 1),
                         KS_DEADLINE_EXCEEDED);
        assert_int_equal(auth_hash_pool_queued(p), 1);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        assert_int_equal(a.rc, KS_OK);
        assert_int_equal(b.rc, KS_OK);
        auth_hash_pool_free(p);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_hash_then_verify),
            cmocka_unit_test(test_bad_sizes),
            cmocka_unit_test(test_full_queue_refuses_at_once),
            cmocka_unit_test(test_deadline_drops_a_queued_job),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
