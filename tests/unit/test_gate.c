/*
 * ks_gate: width holders per key at once and no more, even under threads
 * racing in and out; the waiters admitted in the order they came; a key
 * never waits for another; a wait ends at its deadline with nothing held
 * and nothing left behind; a full table or an over-long key lets the call
 * through ungated instead of refusing it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ks_clock.h"
#include "ks_gate.h"

static const char *A = "7b0c3a58-3f0e-4d55-9a55-2a4f1c1e0001";
static const char *B = "7b0c3a58-3f0e-4d55-9a55-2a4f1c1e0002";

static void sleep_ms(int ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

/* Waits (bounded) until key has `waiters` waiting. */
static void await_waiters(ks_gate *g, const char *key, int waiters)
{
        for (int i = 0; i < 5000; i++) {
                int h, w;
                ks_gate_count(g, key, &h, &w);
                if (w == waiters) {
                        return;
                }
                sleep_ms(1);
        }
        fail_msg("never %d waiters", waiters);
}

static void expect_count(ks_gate *g, const char *key, int holders, int waiters)
{
        int h, w;
        ks_gate_count(g, key, &h, &w);
        assert_int_equal(h, holders);
        assert_int_equal(w, waiters);
}

static void test_width_and_keys(void **state)
{
        (void)state;
        ks_gate *g;
        bool held, waited;

        assert_int_equal(ks_gate_new(&g, 2, 8), KS_OK);
        assert_int_equal(ks_gate_enter(g, A, 0, &held, &waited), KS_OK);
        assert_true(held);
        assert_false(waited);
        assert_int_equal(ks_gate_enter(g, A, 0, &held, &waited), KS_OK);
        assert_true(held);
        expect_count(g, A, 2, 0);
        /* A third of A would wait; B does not wait for A. */
        assert_int_equal(ks_gate_enter(g, B, 0, &held, &waited), KS_OK);
        assert_true(held);
        expect_count(g, B, 1, 0);
        ks_gate_leave(g, B);
        ks_gate_leave(g, A);
        ks_gate_leave(g, A);
        expect_count(g, A, 0, 0);
        expect_count(g, B, 0, 0);
        ks_gate_free(g);

        assert_int_not_equal(ks_gate_new(&g, 0, 8), KS_OK);
        assert_int_not_equal(ks_gate_new(&g, 1, 0), KS_OK);
}

typedef struct fifo_arg {
        ks_gate *g;
        int id;
        int *order;
        atomic_int *n;
} fifo_arg;

static void *enter_and_note(void *p)
{
        fifo_arg *a = p;
        bool held, waited;
        int rc = ks_gate_enter(a->g, A, ks_wall_ms() + 10000, &held, &waited);
        if (rc == KS_OK && held && waited) {
                a->order[atomic_fetch_add(a->n, 1)] = a->id;
                ks_gate_leave(a->g, A);
        }
        return NULL;
}

static void test_waiters_in_arrival_order(void **state)
{
        (void)state;
        ks_gate *g;
        bool held, waited;
        enum { N = 6 };
        pthread_t t[N];
        fifo_arg args[N];
        int order[N] = {0};
        atomic_int n = 0;

        assert_int_equal(ks_gate_new(&g, 1, 8), KS_OK);
        assert_int_equal(ks_gate_enter(g, A, 0, &held, &waited), KS_OK);
        for (int i = 0; i < N; i++) {
                args[i] = (fifo_arg){.g = g, .id = i + 1, .order = order, .n = &n};
                assert_int_equal(pthread_create(&t[i], NULL, enter_and_note, &args[i]), 0);
                await_waiters(g, A, i + 1); /* each queued before the next comes */
        }
        expect_count(g, A, 1, N);
        ks_gate_leave(g, A);
        for (int i = 0; i < N; i++) {
                pthread_join(t[i], NULL);
        }
        assert_int_equal(atomic_load(&n), N);
        for (int i = 0; i < N; i++) {
                assert_int_equal(order[i], i + 1);
        }
        expect_count(g, A, 0, 0);
        ks_gate_free(g);
}

static void test_deadline_ends_the_wait(void **state)
{
        (void)state;
        ks_gate *g;
        bool held, held2 = true, waited;

        assert_int_equal(ks_gate_new(&g, 1, 8), KS_OK);
        assert_int_equal(ks_gate_enter(g, A, 0, &held, &waited), KS_OK);
        int64_t t0 = ks_mono_ms();
        assert_int_equal(ks_gate_enter(g, A, ks_wall_ms() + 60, &held2, &waited),
                         KS_DEADLINE_EXCEEDED);
        assert_false(held2);
        assert_true(waited);
        assert_true(ks_mono_ms() - t0 >= 50);
        expect_count(g, A, 1, 0); /* the one who gave up left nothing behind */
        /* A deadline already past, with the place taken: refused without a wait. */
        assert_int_equal(ks_gate_enter(g, A, ks_wall_ms() - 1000, &held2, &waited),
                         KS_DEADLINE_EXCEEDED);
        ks_gate_leave(g, A);
        expect_count(g, A, 0, 0);
        /* Free now: entered at once whatever the deadline. */
        assert_int_equal(ks_gate_enter(g, A, ks_wall_ms() - 1000, &held2, &waited), KS_OK);
        assert_true(held2);
        ks_gate_leave(g, A);
        ks_gate_free(g);
}

static void test_full_table_and_long_key_pass_ungated(void **state)
{
        (void)state;
        ks_gate *g;
        bool held, waited;
        char long_key[KS_GATE_KEY_MAX + 2];

        assert_int_equal(ks_gate_new(&g, 1, 1), KS_OK);
        assert_int_equal(ks_gate_enter(g, A, 0, &held, &waited), KS_OK);
        assert_true(held);
        assert_int_equal(ks_gate_enter(g, B, 0, &held, &waited), KS_OK);
        assert_false(held); /* no room for B's entry */
        memset(long_key, 'k', sizeof(long_key) - 1);
        long_key[sizeof(long_key) - 1] = '\0';
        assert_int_equal(ks_gate_enter(g, long_key, 0, &held, &waited), KS_OK);
        assert_false(held);
        ks_gate_leave(g, A);
        /* A's slot given back: B now gets it. */
        assert_int_equal(ks_gate_enter(g, B, 0, &held, &waited), KS_OK);
        assert_true(held);
        ks_gate_leave(g, B);
        ks_gate_free(g);
}

typedef struct race_arg {
        ks_gate *g;
        const char *key;
        atomic_int *inside;
        atomic_int *most;
        atomic_int *timeouts;
} race_arg;

static void *race(void *p)
{
        race_arg *a = p;
        for (int i = 0; i < 2000; i++) {
                bool held, waited;
                /* Every fourth call with a deadline short enough to pass now and then. */
                int64_t deadline = i % 4 == 0 ? ks_wall_ms() + 1 : 0;
                int rc = ks_gate_enter(a->g, a->key, deadline, &held, &waited);
                if (rc == KS_DEADLINE_EXCEEDED) {
                        assert_false(held);
                        atomic_fetch_add(a->timeouts, 1);
                        continue;
                }
                assert_int_equal(rc, KS_OK);
                assert_true(held);
                int now = atomic_fetch_add(a->inside, 1) + 1;
                int m = atomic_load(a->most);
                while (now > m && !atomic_compare_exchange_weak(a->most, &m, now)) {
                }
                if (i % 16 == 0) {
                        sched_yield();
                }
                atomic_fetch_sub(a->inside, 1);
                ks_gate_leave(a->g, a->key);
        }
        return NULL;
}

static void test_never_more_than_width_under_races(void **state)
{
        (void)state;
        ks_gate *g;
        enum { T = 8 };
        pthread_t t[T];
        race_arg args[T];
        atomic_int inside[2] = {0, 0}, most[2] = {0, 0}, timeouts = 0;

        assert_int_equal(ks_gate_new(&g, 2, T), KS_OK);
        for (int i = 0; i < T; i++) {
                int k = i % 2;
                args[i] = (race_arg){.g = g,
                                     .key = k == 0 ? A : B,
                                     .inside = &inside[k],
                                     .most = &most[k],
                                     .timeouts = &timeouts};
                assert_int_equal(pthread_create(&t[i], NULL, race, &args[i]), 0);
        }
        for (int i = 0; i < T; i++) {
                pthread_join(t[i], NULL);
        }
        for (int k = 0; k < 2; k++) {
                assert_true(atomic_load(&most[k]) >= 1);
                assert_true(atomic_load(&most[k]) <= 2);
        }
        expect_count(g, A, 0, 0);
        expect_count(g, B, 0, 0);
        ks_gate_free(g); /* asserts the table is empty */
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_width_and_keys),
            cmocka_unit_test(test_waiters_in_arrival_order),
            cmocka_unit_test(test_deadline_ends_the_wait),
            cmocka_unit_test(test_full_table_and_long_key_pass_ungated),
            cmocka_unit_test(test_never_more_than_width_under_races),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
