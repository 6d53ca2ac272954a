/*
 * ks_gate: width holders per key at once and no more, even under threads
 * racing in and out; a key never counts against another; a place given
 * back is taken again; a full table or an over-long key lets the caller
 * through ungated instead of refusing it. (The order in which waiting calls
 * get their turn is the RPC server's queue: unit.test_rpc.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "ks_gate.h"

static const char *A = "7b0c3a58-3f0e-4d55-9a55-2a4f1c1e0001";
static const char *B = "7b0c3a58-3f0e-4d55-9a55-2a4f1c1e0002";

static void test_width_and_keys(void **state)
{
        (void)state;
        ks_gate *g;
        bool held;

        assert_int_equal(ks_gate_new(&g, 2, 8), KS_OK);
        assert_true(ks_gate_try_enter(g, A, &held));
        assert_true(held);
        assert_true(ks_gate_try_enter(g, A, &held));
        assert_true(held);
        assert_false(ks_gate_try_enter(g, A, &held)); /* a third of A must wait */
        assert_false(held);
        assert_int_equal(ks_gate_holders(g, A), 2);
        assert_true(ks_gate_try_enter(g, B, &held)); /* B does not wait for A */
        assert_true(held);
        ks_gate_leave(g, A);
        assert_true(ks_gate_try_enter(g, A, &held)); /* the place given back */
        assert_true(held);
        ks_gate_leave(g, A);
        ks_gate_leave(g, A);
        ks_gate_leave(g, B);
        assert_int_equal(ks_gate_holders(g, A), 0);
        assert_int_equal(ks_gate_holders(g, B), 0);
        ks_gate_free(g); /* asserts the table is empty */

        assert_int_not_equal(ks_gate_new(&g, 0, 8), KS_OK);
        assert_int_not_equal(ks_gate_new(&g, 1, 0), KS_OK);
}

static void test_full_table_and_long_key_pass_ungated(void **state)
{
        (void)state;
        ks_gate *g;
        bool held;
        char long_key[KS_GATE_KEY_MAX + 2];

        assert_int_equal(ks_gate_new(&g, 1, 1), KS_OK);
        assert_true(ks_gate_try_enter(g, A, &held));
        assert_true(held);
        assert_true(ks_gate_try_enter(g, B, &held)); /* no room for B's entry: through */
        assert_false(held);
        memset(long_key, 'k', sizeof(long_key) - 1);
        long_key[sizeof(long_key) - 1] = '\0';
        assert_true(ks_gate_try_enter(g, long_key, &held));
        assert_false(held);
        ks_gate_leave(g, A);
        assert_true(ks_gate_try_enter(g, B, &held)); /* A's slot given back: B gets it */
        assert_true(held);
        assert_false(ks_gate_try_enter(g, B, &held));
        ks_gate_leave(g, B);
        ks_gate_free(g);
}

typedef struct race_arg {
        ks_gate *g;
        const char *key;
        atomic_int *inside;
        atomic_int *most;
        atomic_int *entered;
} race_arg;

static void *race(void *p)
{
        race_arg *a = p;
        for (int i = 0; i < 5000; i++) {
                bool held;
                if (!ks_gate_try_enter(a->g, a->key, &held)) {
                        sched_yield();
                        continue;
                }
                assert_true(held);
                atomic_fetch_add(a->entered, 1);
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
        atomic_int inside[2] = {0, 0}, most[2] = {0, 0}, entered[2] = {0, 0};

        assert_int_equal(ks_gate_new(&g, 2, T), KS_OK);
        for (int i = 0; i < T; i++) {
                int k = i % 2;
                args[i] = (race_arg){.g = g,
                                     .key = k == 0 ? A : B,
                                     .inside = &inside[k],
                                     .most = &most[k],
                                     .entered = &entered[k]};
                assert_int_equal(pthread_create(&t[i], NULL, race, &args[i]), 0);
        }
        for (int i = 0; i < T; i++) {
                pthread_join(t[i], NULL);
        }
        for (int k = 0; k < 2; k++) {
                assert_true(atomic_load(&entered[k]) > 0);
                assert_true(atomic_load(&most[k]) >= 1);
                assert_true(atomic_load(&most[k]) <= 2);
        }
        assert_int_equal(ks_gate_holders(g, A), 0);
        assert_int_equal(ks_gate_holders(g, B), 0);
        ks_gate_free(g);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_width_and_keys),
            cmocka_unit_test(test_full_table_and_long_key_pass_ungated),
            cmocka_unit_test(test_never_more_than_width_under_races),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
