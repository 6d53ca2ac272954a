/*
 * Unit tests of the ledger's pure parts: the state machine (machine.c) on
 * rows loaded by hand, the u128 hash map (map.c) and the 128-bit text forms
 * (u128.c). The integration tests drive the same machine through the
 * database; these reach what a request cannot: overflows_timeout (a clock
 * near 2^63), the exact state after a rolled-back chain, and an imported
 * batch against a context loaded by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ledger.h"

#define TS 1000000000000000000ull /* a clock in 2001, in ns */

static lg_batch *g_b;

static lg_account account(u128 id, uint32_t flags)
{
        return (lg_account){.id = id, .ledger = 1, .code = 1, .flags = flags, .timestamp = 1};
}

static lg_transfer transfer(u128 id, u128 dr, u128 cr, u128 amount, uint32_t flags)
{
        return (lg_transfer){.id = id,
                             .debit_account_id = dr,
                             .credit_account_id = cr,
                             .amount = amount,
                             .ledger = 1,
                             .code = 1,
                             .flags = flags};
}

static const lg_account *acct(u128 id)
{
        int32_t i = lg_map_get(&g_b->account_ix, id);

        assert_true(i >= 0);
        return &g_b->accounts[i];
}

static int setup(void **state)
{
        (void)state;
        assert_int_equal(lg_batch_new(&g_b, 64), 0);
        lg_batch_reset(g_b);
        for (u128 id = 1; id <= 4; id++) {
                lg_account a = account(id, 0);
                assert_int_equal(lg_batch_load_account(g_b, &a), 0);
        }
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        lg_batch_free(g_b);
        g_b = NULL;
        return 0;
}

static void test_overflows_timeout(void **state)
{
        lg_transfer t = transfer(10, 1, 2, 5, LG_TF_PENDING);
        uint8_t r[2];
        (void)state;

        t.timeout = 10;
        /* 2^63 - 5 s: the expiry would pass 2^63 ns. */
        lg_create_transfers(g_b, &t, 1, (uint64_t)INT64_MAX - 5000000000ull, r, NULL);
        assert_int_equal(r[0], LG_TR(overflows_timeout));
        lg_create_transfers(g_b, &t, 1, TS, r, NULL);
        assert_int_equal(r[0], LG_TR(ok));
        assert_true(acct(1)->debits_pending == 5);
}

static void test_chain_rollback_restores_everything(void **state)
{
        lg_transfer ev[4];
        uint8_t r[4];
        (void)state;

        ev[0] = transfer(20, 1, 2, 7, LG_TF_PENDING);
        lg_create_transfers(g_b, ev, 1, TS, r, NULL);
        assert_int_equal(r[0], LG_TR(ok));
        /* A chain that posts 20, moves 3, then fails on an unknown account. */
        ev[0] = (lg_transfer){
            .id = 21, .pending_id = 20, .amount = U128_MAX, .flags = LG_TF_POST | LG_TF_LINKED};
        ev[1] = transfer(22, 3, 4, 3, LG_TF_LINKED);
        ev[2] = transfer(23, 3, 99, 3, 0);
        ev[3] = transfer(24, 3, 4, 1, 0);
        lg_create_transfers(g_b, ev, 4, TS + 10, r, NULL);
        assert_int_equal(r[0], LG_TR(linked_event_failed));
        assert_int_equal(r[1], LG_TR(linked_event_failed));
        assert_int_equal(r[2], LG_TR(credit_account_not_found));
        assert_int_equal(r[3], LG_TR(ok));
        /* 20 is pending again, 21 and 22 never happened, 23 is a failed id. */
        assert_true(acct(1)->debits_pending == 7 && acct(1)->debits_posted == 0);
        assert_true(acct(3)->debits_posted == 1 && acct(4)->credits_posted == 1);
        assert_int_equal(g_b->xfers[lg_map_get(&g_b->xfer_ix, 20)].status, LG_PENDING_PENDING);
        assert_int_equal(lg_map_get(&g_b->xfer_ix, 21), -1);
        assert_int_equal(lg_map_get(&g_b->xfer_ix, 22), -1);
        assert_true(lg_map_get(&g_b->failed_ix, 23) >= 0);
        /* The rolled-back post can be made again. */
        ev[0].flags = LG_TF_POST;
        lg_create_transfers(g_b, ev, 1, TS + 20, r, NULL);
        assert_int_equal(r[0], LG_TR(ok));
        assert_true(acct(1)->debits_pending == 0 && acct(1)->debits_posted == 7);
}

/*
 * An imported batch against its context: the latest transfer at 500 and a
 * timestamp (700) an account holds. Accounts 1..4 are dated 1.
 */
static void test_imported_context(void **state)
{
        lg_transfer ev[5];
        uint8_t r[5];
        uint64_t ts[5];
        (void)state;

        assert_int_equal(lg_batch_load_import(g_b, 500, (uint64_t[]){700}, 1), 0);
        ev[0] = transfer(30, 1, 2, 5, LG_TF_IMPORTED);
        ev[0].timestamp = 500; /* the latest transfer's */
        ev[1] = transfer(31, 1, 2, 5, LG_TF_IMPORTED);
        ev[1].timestamp = 700; /* an account's */
        ev[2] = transfer(32, 1, 2, 5, LG_TF_IMPORTED | LG_TF_LINKED);
        ev[2].timestamp = 800;
        ev[3] = transfer(33, 1, 1, 5, LG_TF_IMPORTED); /* fails: the chain goes */
        ev[3].timestamp = 900;
        ev[4] = transfer(34, 1, 2, 5, LG_TF_IMPORTED);
        ev[4].timestamp = 600; /* after the chain's 800, which is undone */
        lg_create_transfers(g_b, ev, 5, TS, r, ts);
        assert_int_equal(r[0], LG_TR(imported_event_timestamp_must_not_regress));
        assert_int_equal(r[1], LG_TR(imported_event_timestamp_must_not_regress));
        assert_int_equal(r[2], LG_TR(linked_event_failed));
        assert_int_equal(r[3], LG_TR(accounts_must_be_different));
        assert_int_equal(r[4], LG_TR(ok));
        for (int i = 0; i < 5; i++) {
                assert_true(ts[i] == ev[i].timestamp); /* an imported event's own */
        }
        assert_true(g_b->import_ts_max == 600);
        /* The batch's time is its last event's: an import may not reach it. */
        ev[0] = transfer(35, 1, 2, 5, LG_TF_IMPORTED);
        ev[0].timestamp = TS + 1;
        ev[1] = transfer(36, 1, 2, 5, LG_TF_IMPORTED);
        ev[1].timestamp = TS;
        lg_create_transfers(g_b, ev, 2, TS, r, NULL);
        assert_int_equal(r[0], LG_TR(imported_event_timestamp_must_not_advance));
        assert_int_equal(r[1], LG_TR(ok));
}

static void test_exists_of_posts(void **state)
{
        lg_transfer ev[2];
        uint8_t r[2];
        (void)state;

        ev[0] = transfer(30, 1, 2, 10, LG_TF_PENDING);
        ev[1] = (lg_transfer){.id = 31, .pending_id = 30, .amount = 4, .flags = LG_TF_POST};
        lg_create_transfers(g_b, ev, 2, TS, r, NULL);
        assert_int_equal(r[1], LG_TR(ok));
        lg_create_transfers(g_b, &ev[1], 1, TS + 5, r, NULL);
        assert_int_equal(r[0], LG_TR(exists)); /* a partial post: the same amount */
        ev[1].amount = U128_MAX;
        lg_create_transfers(g_b, &ev[1], 1, TS + 6, r, NULL);
        assert_int_equal(r[0], LG_TR(exists_with_different_amount));
        ev[1].amount = 4;
        ev[1].debit_account_id = 1; /* named explicitly: the same as inherited */
        lg_create_transfers(g_b, &ev[1], 1, TS + 7, r, NULL);
        assert_int_equal(r[0], LG_TR(exists));
}

static void test_expire_reopens(void **state)
{
        lg_transfer t = transfer(40, 3, 4, 6, LG_TF_PENDING | LG_TF_CLOSING_CREDIT);
        u128 id = 40;
        uint8_t r[1];
        (void)state;

        t.timeout = 1;
        lg_create_transfers(g_b, &t, 1, TS, r, NULL);
        assert_int_equal(r[0], LG_TR(ok));
        assert_true(acct(4)->flags & LG_AF_CLOSED);
        assert_int_equal(lg_expire(g_b, &id, 1, TS + 2000000000ull), 1);
        assert_false(acct(4)->flags & LG_AF_CLOSED);
        assert_true(acct(3)->debits_pending == 0 && acct(4)->credits_pending == 0);
        assert_int_equal(lg_expire(g_b, &id, 1, TS + 3000000000ull), 0); /* once */
        t = (lg_transfer){.id = 41, .pending_id = 40, .flags = LG_TF_VOID};
        lg_create_transfers(g_b, &t, 1, TS + 4000000000ull, r, NULL);
        assert_int_equal(r[0], LG_TR(pending_transfer_expired));
}

static void test_expired_before_the_sweep(void **state)
{
        lg_transfer t = transfer(50, 1, 2, 6, LG_TF_PENDING);
        uint8_t r[1];
        (void)state;

        t.timeout = 1;
        lg_create_transfers(g_b, &t, 1, TS, r, NULL);
        /* Exactly at the expiry time, the sweeper not run yet: already expired. */
        t = (lg_transfer){.id = 51, .pending_id = 50, .amount = U128_MAX, .flags = LG_TF_POST};
        lg_create_transfers(g_b, &t, 1, TS + 1000000000ull, r, NULL);
        assert_int_equal(r[0], LG_TR(pending_transfer_expired));
        lg_create_transfers(g_b, &t, 1, TS + 999999999ull, r, NULL);
        assert_int_equal(r[0], LG_TR(ok));
}

static void test_u128_text(void **state)
{
        char s[64];
        u128 v;
        (void)state;

        lg_u128_to_uuid(lg_u128(0x0123456789abcdefull, 0xfedcba9876543210ull), s);
        assert_string_equal(s, "01234567-89ab-cdef-fedc-ba9876543210");
        assert_int_equal(lg_uuid_to_u128(s, &v), 0);
        assert_true(v == lg_u128(0x0123456789abcdefull, 0xfedcba9876543210ull));
        lg_u128_to_dec(U128_MAX, s);
        assert_string_equal(s, "340282366920938463463374607431768211455");
        assert_int_equal(lg_dec_to_u128(s, &v), 0);
        assert_true(v == U128_MAX);
        lg_u128_to_dec(0, s);
        assert_string_equal(s, "0");
        assert_int_equal(lg_dec_to_u128("340282366920938463463374607431768211456", &v), -1);
        assert_int_equal(lg_dec_to_u128("12a", &v), -1);
        assert_int_equal(lg_dec_to_u128("", &v), -1);
        assert_int_equal(lg_uuid_to_u128("01234567-89ab-cdef-fedc-ba987654321", &v), -1);
        assert_int_equal(lg_uuid_to_u128("01234567x89ab-cdef-fedc-ba9876543210", &v), -1);
        assert_false(lg_tenant_valid("'; DROP TABLE x; --------------------"));
}

static void test_map(void **state)
{
        lg_map m;
        (void)state;

        assert_int_equal(lg_map_init(&m, 100), 0);
        for (int i = 0; i < 100; i++) {
                assert_int_equal(lg_map_put(&m, lg_u128((uint64_t)i, 7), i), 0);
        }
        assert_int_equal(lg_map_get(&m, lg_u128(42, 7)), 42);
        assert_int_equal(lg_map_get(&m, lg_u128(42, 8)), -1);
        assert_int_equal(lg_map_put(&m, lg_u128(42, 7), -1), 0);
        assert_int_equal(lg_map_get(&m, lg_u128(42, 7)), -1);
        lg_map_clear(&m);
        assert_int_equal(lg_map_get(&m, lg_u128(1, 7)), -1);
        assert_int_equal(lg_map_put(&m, lg_u128(1, 7), 5), 0);
        assert_int_equal(lg_map_get(&m, lg_u128(1, 7)), 5);
        lg_map_fini(&m);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_overflows_timeout, setup, teardown),
            cmocka_unit_test_setup_teardown(test_chain_rollback_restores_everything, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_imported_context, setup, teardown),
            cmocka_unit_test_setup_teardown(test_exists_of_posts, setup, teardown),
            cmocka_unit_test_setup_teardown(test_expire_reopens, setup, teardown),
            cmocka_unit_test_setup_teardown(test_expired_before_the_sweep, setup, teardown),
            cmocka_unit_test(test_u128_text),
            cmocka_unit_test(test_map),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
