/*
 * The ledger's contract, scenario by scenario, through the gateway as a
 * Connect client in binary protobuf: every result code of CreateAccounts
 * and CreateTransfers is provoked on purpose and checked (the last test
 * asserts that none was missed), with the balances each scenario must
 * leave; then the reads (lookups, account transfers and balances, trial
 * balance, query filters), a batch of accounts that all exist answered
 * without the tenant's clock, imported events, the request-level errors and
 * tenant isolation, in the API and in the database's row-level security.
 *
 * overflows_timeout is the one code no request can reach before the year
 * 2216 (timeout is a u32 of seconds): the state machine's unit test
 * (services/ledger/tests) provokes it with a crafted clock.
 */
#include "ledger_it.h"

#include <time.h>

#define N_TR 68 /* CreateTransfersResponse results 0..67 */
#define N_AR 26 /* CreateAccountsResponse results 0..25 */

static it_stack g_stack;
static lt_tenant g_t;
static bool g_seen_tr[N_TR];
static bool g_seen_ar[N_AR];

/* ---- helpers -------------------------------------------------------------------- */

/* Each result as expected (named by name()); every result is marked in seen. */
static void check_results(const char *what, const uint64_t *ids, const int *got,
                          const int *expected, size_t n, const char *(*name)(int), bool *seen)
{
        for (size_t i = 0; i < n; i++) {
                if (got[i] != expected[i]) {
                        fail_msg("%s %zu (id %llu): expected %s, got %s", what, i,
                                 (unsigned long long)ids[i], name(expected[i]), name(got[i]));
                }
                seen[got[i]] = true;
        }
}

#define EXPECT_MAX 16

static void expect_transfers(lt_transfer_pb *x, size_t n, const int *expected)
{
        int got[EXPECT_MAX];
        uint64_t ids[EXPECT_MAX];

        assert_true(n <= EXPECT_MAX);
        for (size_t i = 0; i < n; i++) {
                ids[i] = x[i].id;
        }
        lt_create_transfers(&g_t, x, n, got);
        check_results("transfer", ids, got, expected, n, lt_tr_name, g_seen_tr);
}

static void expect_transfer(lt_transfer_pb *x, int expected)
{
        expect_transfers(x, 1, &expected);
}

static void expect_accounts(lt_account_pb *a, size_t n, const int *expected)
{
        int got[EXPECT_MAX];
        uint64_t ids[EXPECT_MAX];

        assert_true(n <= EXPECT_MAX);
        for (size_t i = 0; i < n; i++) {
                ids[i] = a[i].id;
        }
        lt_create_accounts(&g_t, a, n, got);
        check_results("account", ids, got, expected, n, lt_ar_name, g_seen_ar);
}

static void expect_account(lt_account_pb *a, int expected)
{
        expect_accounts(a, 1, &expected);
}

/* Creates plain accounts ids[0..n) on a ledger with flags; all must be ok. */
static void accounts(const u128 *ids, size_t n, uint32_t ledger, uint32_t flags)
{
        lt_account_pb a[16];
        int ok[16] = {0};

        for (size_t i = 0; i < n; i++) {
                lt_account_init(&a[i], ids[i], ledger, 7, flags);
        }
        expect_accounts(a, n, ok);
}

typedef struct balances {
        u128 dp, dpo, cp, cpo;
        uint32_t flags;
} balances;

static balances balances_of(const lt_tenant *t, u128 id)
{
        Keelson__Ledger__V1__LookupAccountsResponse *r = lt_lookup_accounts(t, &id, 1);
        balances b;

        assert_int_equal(r->n_accounts, 1);
        const lt_account_pb *a = r->accounts[0];
        b.dp = lt_u128(a->debits_pending_hi, a->debits_pending);
        b.dpo = lt_u128(a->debits_posted_hi, a->debits_posted);
        b.cp = lt_u128(a->credits_pending_hi, a->credits_pending);
        b.cpo = lt_u128(a->credits_posted_hi, a->credits_posted);
        b.flags = a->flags;
        protobuf_c_message_free_unpacked(&r->base, NULL);
        return b;
}

static void assert_balances_of(const lt_tenant *t, u128 id, u128 dp, u128 dpo, u128 cp, u128 cpo)
{
        balances b = balances_of(t, id);

        if (b.dp != dp || b.dpo != dpo || b.cp != cp || b.cpo != cpo) {
                fail_msg("account %llu: balances %llu/%llu/%llu/%llu, expected %llu/%llu/%llu/%llu",
                         (unsigned long long)id, (unsigned long long)b.dp,
                         (unsigned long long)b.dpo, (unsigned long long)b.cp,
                         (unsigned long long)b.cpo, (unsigned long long)dp, (unsigned long long)dpo,
                         (unsigned long long)cp, (unsigned long long)cpo);
        }
}

static void assert_balances(u128 id, u128 dp, u128 dpo, u128 cp, u128 cpo)
{
        assert_balances_of(&g_t, id, dp, dpo, cp, cpo);
}

static lt_transfer_pb xfer(u128 id, u128 dr, u128 cr, u128 amount, uint32_t flags)
{
        lt_transfer_pb t;

        lt_transfer_init(&t, id, dr, cr, amount, 1, 1, flags);
        return t;
}

/* A post or void of pending: everything else left at 0, to be inherited. */
static lt_transfer_pb resolve(u128 id, u128 pending, u128 amount, uint32_t flags)
{
        lt_transfer_pb t;

        lt_transfer_init(&t, id, 0, 0, amount, 0, 0, flags);
        t.pending_id = lt_lo(pending);
        t.pending_id_hi = lt_hi(pending);
        return t;
}

static int group_setup(void **state)
{
        (void)state;
        return lt_setup(&g_stack, "it-ledger-codes", &g_t);
}

/* ---- accounts -------------------------------------------------------------------- */

static void test_account_codes(void **state)
{
        lt_account_pb a[4];
        (void)state;

        lt_account_init(&a[0], 1000, 1, 7, AF_HISTORY);
        expect_account(a, AR(ok));
        expect_account(a, AR(exists));
        a[0].flags = 0;
        expect_account(a, AR(exists_with_different_flags));
        lt_account_init(&a[0], 1000, 1, 7, AF_HISTORY);
        a[0].user_data_128_hi = 1;
        expect_account(a, AR(exists_with_different_user_data_128));
        lt_account_init(&a[0], 1000, 1, 7, AF_HISTORY);
        a[0].user_data_64 = 1;
        expect_account(a, AR(exists_with_different_user_data_64));
        lt_account_init(&a[0], 1000, 1, 7, AF_HISTORY);
        a[0].user_data_32 = 1;
        expect_account(a, AR(exists_with_different_user_data_32));
        lt_account_init(&a[0], 1000, 2, 7, AF_HISTORY);
        expect_account(a, AR(exists_with_different_ledger));
        lt_account_init(&a[0], 1000, 1, 8, AF_HISTORY);
        expect_account(a, AR(exists_with_different_code));

        lt_account_init(&a[0], 1001, 1, 7, 0);
        a[0].timestamp = 1;
        expect_account(a, AR(timestamp_must_be_zero));
        lt_account_init(&a[0], 1001, 1, 7, 64); /* a bit TigerBeetle does not define */
        expect_account(a, AR(reserved_flag));
        lt_account_init(&a[0], 0, 1, 7, 0);
        expect_account(a, AR(id_must_not_be_zero));
        lt_account_init(&a[0], U128_MAX, 1, 7, 0);
        expect_account(a, AR(id_must_not_be_int_max));
        lt_account_init(&a[0], 1001, 1, 7,
                        AF_DEBITS_MUST_NOT_EXCEED_CREDITS | AF_CREDITS_MUST_NOT_EXCEED_DEBITS);
        expect_account(a, AR(flags_are_mutually_exclusive));
        lt_account_init(&a[0], 1001, 1, 7, 0);
        a[0].debits_pending = 1;
        expect_account(a, AR(debits_pending_must_be_zero));
        lt_account_init(&a[0], 1001, 1, 7, 0);
        a[0].debits_posted_hi = 1;
        expect_account(a, AR(debits_posted_must_be_zero));
        lt_account_init(&a[0], 1001, 1, 7, 0);
        a[0].credits_pending = 1;
        expect_account(a, AR(credits_pending_must_be_zero));
        lt_account_init(&a[0], 1001, 1, 7, 0);
        a[0].credits_posted = 1;
        expect_account(a, AR(credits_posted_must_be_zero));
        lt_account_init(&a[0], 1001, 0, 7, 0);
        expect_account(a, AR(ledger_must_not_be_zero));
        lt_account_init(&a[0], 1001, 1, 0, 0);
        expect_account(a, AR(code_must_not_be_zero));
}

static void test_account_chains(void **state)
{
        lt_account_pb a[3];
        (void)state;

        /* A chain with a failure creates nothing; the next event is independent. */
        lt_account_init(&a[0], 1010, 1, 7, AF_LINKED);
        lt_account_init(&a[1], 1011, 0, 7, 0); /* ledger 0: fails the chain */
        lt_account_init(&a[2], 1012, 1, 7, 0);
        expect_accounts(a, 3,
                        (int[]){AR(linked_event_failed), AR(ledger_must_not_be_zero), AR(ok)});
        /* 1010 was rolled back: creating it again is ok, not exists. */
        lt_account_init(&a[0], 1010, 1, 7, AF_LINKED);
        lt_account_init(&a[1], 1011, 1, 7, AF_LINKED);
        expect_accounts(a, 2, (int[]){AR(linked_event_failed), AR(linked_event_chain_open)});
        lt_account_init(&a[0], 1010, 1, 7, 0);
        expect_account(a, AR(ok));
}

/* ---- transfers ------------------------------------------------------------------- */

/* Accounts of the transfer tests: 1, 2 plain; 3 debits<=credits; 4 credits<=debits; 5 ledger 2. */
static void test_transfer_basics(void **state)
{
        lt_transfer_pb x[2];
        (void)state;

        accounts((u128[]){1, 2}, 2, 1, 0);
        accounts((u128[]){3}, 1, 1, AF_DEBITS_MUST_NOT_EXCEED_CREDITS);
        accounts((u128[]){4}, 1, 1, AF_CREDITS_MUST_NOT_EXCEED_DEBITS);
        accounts((u128[]){5}, 1, 2, 0);

        x[0] = xfer(100, 1, 2, 10, 0);
        expect_transfer(x, TR(ok));
        assert_balances(1, 0, 10, 0, 0);
        assert_balances(2, 0, 0, 0, 10);
        expect_transfer(x, TR(exists));
        assert_balances(1, 0, 10, 0, 0); /* exists changes nothing */

        x[0] = xfer(101, 3, 1, 1, 0);
        expect_transfer(x, TR(exceeds_credits));
        expect_transfer(x, TR(id_already_failed));
        x[0] = xfer(101, 1, 2, 1, 0); /* even when it could succeed now */
        expect_transfer(x, TR(id_already_failed));
        x[0] = xfer(102, 1, 4, 1, 0);
        expect_transfer(x, TR(exceeds_debits));
        x[0] = xfer(103, 1, 99, 1, 0);
        expect_transfer(x, TR(credit_account_not_found));
        x[0] = xfer(104, 99, 1, 1, 0);
        expect_transfer(x, TR(debit_account_not_found));
        x[0] = xfer(105, 1, 5, 1, 0);
        expect_transfer(x, TR(accounts_must_have_the_same_ledger));
        x[0] = xfer(105, 1, 2, 1, 0);
        x[0].ledger = 2;
        expect_transfer(x, TR(transfer_must_have_the_same_ledger_as_accounts));

        /* 3 may spend what it was credited, and no more. */
        x[0] = xfer(106, 1, 3, 30, 0);
        x[1] = xfer(107, 3, 2, 30, 0);
        expect_transfers(x, 2, (int[]){TR(ok), TR(ok)});
        assert_balances(3, 0, 30, 0, 30);
}

static void test_transfer_exists_with_different(void **state)
{
        lt_transfer_pb x[1];
        (void)state;

        /* 100 is 1 -> 2, amount 10, ledger 1, code 1, no flags (test_transfer_basics). */
        struct {
                int field;
                int result;
        } cases[] = {
            {0, TR(exists_with_different_flags)},
            {1, TR(exists_with_different_pending_id)},
            {2, TR(exists_with_different_timeout)},
            {3, TR(exists_with_different_debit_account_id)},
            {4, TR(exists_with_different_credit_account_id)},
            {5, TR(exists_with_different_amount)},
            {6, TR(exists_with_different_user_data_128)},
            {7, TR(exists_with_different_user_data_64)},
            {8, TR(exists_with_different_user_data_32)},
            {9, TR(exists_with_different_ledger)},
            {10, TR(exists_with_different_code)},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                x[0] = xfer(100, 1, 2, 10, 0);
                switch (cases[i].field) {
                case 0:
                        x[0].flags = TF_PENDING;
                        break;
                case 1:
                        x[0].pending_id = 5;
                        break;
                case 2:
                        x[0].timeout = 5;
                        break;
                case 3:
                        x[0].debit_account_id = 3;
                        break;
                case 4:
                        x[0].credit_account_id = 3;
                        break;
                case 5:
                        x[0].amount = 11;
                        break;
                case 6:
                        x[0].user_data_128 = 1;
                        break;
                case 7:
                        x[0].user_data_64 = 1;
                        break;
                case 8:
                        x[0].user_data_32 = 1;
                        break;
                case 9:
                        x[0].ledger = 2;
                        break;
                default:
                        x[0].code = 2;
                        break;
                }
                expect_transfer(x, cases[i].result);
        }
}

/*
 * A batch is first run on the guess that none of its ids is taken, the guess
 * checked when it writes; each wrong guess runs the batch again with every
 * id read (keelson_ledger_exact_reruns_total). What a client sees must be
 * the same either way.
 */
static void test_taken_ids_rerun_exactly(void **state)
{
        const char *series = "keelson_ledger_exact_reruns_total";
        lt_transfer_pb x[2];
        (void)state;

        accounts((u128[]){140, 141}, 2, 1, 0);
        double r0 = lt_ledger_metric(series);
        x[0] = xfer(150, 140, 141, 1, 0); /* new ids: the guess holds */
        x[1] = xfer(151, 141, 140, 1, 0);
        expect_transfers(x, 2, (int[]){TR(ok), TR(ok)});
        assert_true(lt_ledger_metric(series) == r0);

        /* A taken id the guessing run would have created: its insert finds it. */
        x[0] = xfer(152, 140, 141, 1, 0);
        x[1] = xfer(100, 1, 2, 11, 0); /* 100 is 1 -> 2, amount 10 */
        expect_transfers(x, 2, (int[]){TR(ok), TR(exists_with_different_amount)});
        assert_true(lt_ledger_metric(series) == r0 + 1);
        assert_balances(140, 0, 2, 0, 1); /* 150 and 152 debited it, 151 credited it */

        /* A taken id the guessing run would have failed: the write's check finds it. */
        x[0] = xfer(100, 1, 99, 10, 0);
        expect_transfer(x, TR(exists_with_different_credit_account_id));
        assert_true(lt_ledger_metric(series) == r0 + 2);
        x[0] = xfer(100, 1, 2, 10, 0);
        expect_transfer(x, TR(exists));
        assert_true(lt_ledger_metric(series) == r0 + 3);

        /* An id taken earlier in the same batch needs no rerun. */
        x[0] = xfer(153, 140, 141, 1, 0);
        x[1] = xfer(153, 140, 141, 1, 0);
        expect_transfers(x, 2, (int[]){TR(ok), TR(exists)});
        assert_true(lt_ledger_metric(series) == r0 + 3);
        assert_balances(140, 0, 3, 0, 1);
}

static void test_transfer_validation(void **state)
{
        lt_transfer_pb x[1];
        (void)state;

        x[0] = xfer(110, 1, 2, 1, 0);
        x[0].timestamp = 1;
        expect_transfer(x, TR(timestamp_must_be_zero));
        x[0] = xfer(110, 1, 2, 1, 512); /* a bit TigerBeetle does not define */
        expect_transfer(x, TR(reserved_flag));
        x[0] = xfer(0, 1, 2, 1, 0);
        expect_transfer(x, TR(id_must_not_be_zero));
        x[0] = xfer(U128_MAX, 1, 2, 1, 0);
        expect_transfer(x, TR(id_must_not_be_int_max));
        x[0] = xfer(110, 1, 2, 1, TF_PENDING | TF_POST);
        expect_transfer(x, TR(flags_are_mutually_exclusive));
        x[0] = xfer(110, 1, 2, 1, TF_POST | TF_BALANCING_DEBIT);
        expect_transfer(x, TR(flags_are_mutually_exclusive));
        x[0] = xfer(110, 0, 2, 1, 0);
        expect_transfer(x, TR(debit_account_id_must_not_be_zero));
        x[0] = xfer(110, U128_MAX, 2, 1, 0);
        expect_transfer(x, TR(debit_account_id_must_not_be_int_max));
        x[0] = xfer(110, 1, 0, 1, 0);
        expect_transfer(x, TR(credit_account_id_must_not_be_zero));
        x[0] = xfer(110, 1, U128_MAX, 1, 0);
        expect_transfer(x, TR(credit_account_id_must_not_be_int_max));
        x[0] = xfer(110, 1, 1, 1, 0);
        expect_transfer(x, TR(accounts_must_be_different));
        x[0] = xfer(110, 1, 2, 1, 0);
        x[0].pending_id = 100;
        expect_transfer(x, TR(pending_id_must_be_zero));
        x[0] = resolve(110, 0, 0, TF_POST);
        expect_transfer(x, TR(pending_id_must_not_be_zero));
        x[0] = resolve(110, U128_MAX, 0, TF_VOID);
        expect_transfer(x, TR(pending_id_must_not_be_int_max));
        x[0] = resolve(110, 110, 0, TF_VOID);
        expect_transfer(x, TR(pending_id_must_be_different));
        x[0] = xfer(110, 1, 2, 1, 0);
        x[0].timeout = 1;
        expect_transfer(x, TR(timeout_reserved_for_pending_transfer));
        x[0] = xfer(110, 1, 2, 1, TF_CLOSING_DEBIT);
        expect_transfer(x, TR(closing_transfer_must_be_pending));
        x[0] = xfer(110, 1, 2, 1, 0);
        x[0].ledger = 0;
        expect_transfer(x, TR(ledger_must_not_be_zero));
        x[0] = xfer(110, 1, 2, 1, 0);
        x[0].code = 0;
        expect_transfer(x, TR(code_must_not_be_zero));
        /* None of these were transient: 110 is still free. */
        x[0] = xfer(110, 1, 2, 1, 0);
        expect_transfer(x, TR(ok));
}

static void test_transfer_linked(void **state)
{
        lt_transfer_pb x[4];
        (void)state;

        balances b1 = balances_of(&g_t, 1), b2 = balances_of(&g_t, 2);
        /* The chain 120, 121 fails at 121; 122 stands alone and succeeds. */
        x[0] = xfer(120, 1, 2, 5, TF_LINKED);
        x[1] = xfer(121, 3, 2, 1000, 0);
        x[2] = xfer(122, 2, 1, 1, 0);
        expect_transfers(x, 3, (int[]){TR(linked_event_failed), TR(exceeds_credits), TR(ok)});
        assert_balances(1, b1.dp, b1.dpo, b1.cp, b1.cpo + 1);
        assert_balances(2, b2.dp, b2.dpo + 1, b2.cp, b2.cpo);
        /* 120 was rolled back, so its id is free; an open chain fails whole. */
        x[0] = xfer(123, 1, 2, 1, 0);
        x[1] = xfer(120, 1, 2, 5, TF_LINKED);
        x[2] = xfer(124, 1, 2, 5, TF_LINKED);
        expect_transfers(x, 3,
                         (int[]){TR(ok), TR(linked_event_failed), TR(linked_event_chain_open)});
        x[0] = xfer(120, 1, 2, 5, TF_LINKED);
        x[1] = xfer(124, 1, 2, 5, 0);
        expect_transfers(x, 2, (int[]){TR(ok), TR(ok)});
        /* Retrying a committed chain: exists breaks the chain, as in TigerBeetle. */
        expect_transfers(x, 2, (int[]){TR(exists), TR(linked_event_failed)});
}

static int pending_released(void *arg)
{
        return balances_of(&g_t, *(u128 *)arg).dp == 0;
}

static void test_two_phase(void **state)
{
        lt_transfer_pb x[2];
        (void)state;

        accounts((u128[]){20, 21}, 2, 1, 0);
        x[0] = xfer(200, 20, 21, 50, TF_PENDING);
        expect_transfer(x, TR(ok));
        assert_balances(20, 50, 0, 0, 0);
        assert_balances(21, 0, 0, 50, 0);
        x[0] = resolve(201, 999, 0, TF_POST);
        expect_transfer(x, TR(pending_transfer_not_found));
        x[0] = resolve(202, 100, 0, TF_POST);
        expect_transfer(x, TR(pending_transfer_not_pending));
        x[0] = resolve(203, 200, U128_MAX, TF_POST);
        x[0].debit_account_id = 21;
        expect_transfer(x, TR(pending_transfer_has_different_debit_account_id));
        x[0] = resolve(203, 200, U128_MAX, TF_POST);
        x[0].credit_account_id = 20;
        expect_transfer(x, TR(pending_transfer_has_different_credit_account_id));
        x[0] = resolve(203, 200, U128_MAX, TF_POST);
        x[0].ledger = 2;
        expect_transfer(x, TR(pending_transfer_has_different_ledger));
        x[0] = resolve(203, 200, U128_MAX, TF_POST);
        x[0].code = 9;
        expect_transfer(x, TR(pending_transfer_has_different_code));
        x[0] = resolve(203, 200, 51, TF_POST);
        expect_transfer(x, TR(exceeds_pending_transfer_amount));
        x[0] = resolve(203, 200, 49, TF_VOID);
        expect_transfer(x, TR(pending_transfer_has_different_amount));
        /* A partial post posts 20 and releases the other 30. */
        x[0] = resolve(203, 200, 20, TF_POST);
        expect_transfer(x, TR(ok));
        assert_balances(20, 0, 20, 0, 0);
        assert_balances(21, 0, 0, 0, 20);
        x[0] = resolve(203, 200, 20, TF_POST);
        expect_transfer(x, TR(exists));
        x[0] = resolve(203, 200, 21, TF_POST);
        expect_transfer(x, TR(exists_with_different_amount));
        x[0] = resolve(204, 200, 0, TF_VOID);
        expect_transfer(x, TR(pending_transfer_already_posted));

        x[0] = xfer(210, 20, 21, 7, TF_PENDING);
        x[1] = resolve(211, 210, 0, TF_VOID);
        expect_transfers(x, 2, (int[]){TR(ok), TR(ok)});
        assert_balances(20, 0, 20, 0, 0);
        x[0] = resolve(212, 210, U128_MAX, TF_POST);
        expect_transfer(x, TR(pending_transfer_already_voided));

        /* A post of the full amount: AMOUNT_MAX, then exists for any amount >= it. */
        x[0] = xfer(220, 20, 21, 5, TF_PENDING);
        x[1] = resolve(221, 220, U128_MAX, TF_POST);
        expect_transfers(x, 2, (int[]){TR(ok), TR(ok)});
        x[0] = resolve(221, 220, 5, TF_POST);
        expect_transfer(x, TR(exists));
        assert_balances(20, 0, 25, 0, 0);
}

static void test_expiry(void **state)
{
        lt_transfer_pb x[1];
        u128 debit = 30;
        (void)state;

        accounts((u128[]){30, 31}, 2, 1, 0);
        x[0] = xfer(300, 30, 31, 8, TF_PENDING);
        x[0].timeout = 1;
        expect_transfer(x, TR(ok));
        assert_balances(30, 8, 0, 0, 0);
        /* The sweeper releases it some time after one second. */
        assert_true(lt_wait_until(pending_released, &debit, 30000));
        assert_balances(31, 0, 0, 0, 0);
        x[0] = resolve(301, 300, U128_MAX, TF_POST);
        expect_transfer(x, TR(pending_transfer_expired));
        x[0] = resolve(302, 300, 0, TF_VOID);
        expect_transfer(x, TR(pending_transfer_expired));
}

static void test_closed_accounts(void **state)
{
        lt_transfer_pb x[2];
        lt_account_pb a[1];
        (void)state;

        lt_account_init(&a[0], 40, 1, 7, AF_CLOSED);
        expect_account(a, AR(ok));
        accounts((u128[]){41, 42}, 2, 1, 0);
        x[0] = xfer(400, 40, 41, 1, 0);
        expect_transfer(x, TR(debit_account_already_closed));
        x[0] = xfer(401, 41, 40, 1, 0);
        expect_transfer(x, TR(credit_account_already_closed));
        /* A closing pending transfer closes 42; voiding it reopens it. */
        x[0] = xfer(402, 42, 41, 3, TF_PENDING | TF_CLOSING_DEBIT);
        expect_transfer(x, TR(ok));
        assert_true((balances_of(&g_t, 42).flags & AF_CLOSED) != 0);
        x[0] = xfer(403, 42, 41, 1, 0);
        expect_transfer(x, TR(debit_account_already_closed));
        x[0] = resolve(404, 402, 0, TF_VOID);
        x[1] = xfer(405, 42, 41, 1, 0);
        expect_transfers(x, 2, (int[]){TR(ok), TR(ok)});
        assert_true((balances_of(&g_t, 42).flags & AF_CLOSED) == 0);
        assert_balances(42, 0, 1, 0, 0);
}

/*
 * Where keelson followed TigerBeetle's wording and not its code (0.17):
 * each case is a TigerBeetle answer, with the state it must leave.
 */
static void test_matches_tigerbeetle_0_17(void **state)
{
        lt_transfer_pb x[2];
        lt_account_pb a[1];
        (void)state;

        /* 1. A closing transfer cannot be posted: only a void touches the closed account. */
        accounts((u128[]){170, 171}, 2, 1, 0);
        x[0] = xfer(1700, 170, 171, 4, TF_PENDING | TF_CLOSING_DEBIT);
        expect_transfer(x, TR(ok));
        x[0] = resolve(1701, 1700, U128_MAX, TF_POST);
        expect_transfer(x, TR(debit_account_already_closed));
        assert_true((balances_of(&g_t, 170).flags & AF_CLOSED) != 0);
        assert_balances(170, 4, 0, 0, 0); /* still pending */
        x[0] = resolve(1702, 1700, 0, TF_VOID);
        expect_transfer(x, TR(ok));
        assert_true((balances_of(&g_t, 170).flags & AF_CLOSED) == 0);
        assert_balances(170, 0, 0, 0, 0);

        /* 2. An existing id is judged before the fields a new account is checked for. */
        lt_account_init(&a[0], 170, 0, 7, 0);
        expect_account(a, AR(exists_with_different_ledger));
        lt_account_init(&a[0], 170, 1, 0, 0);
        expect_account(a, AR(exists_with_different_code));
        lt_account_init(&a[0], 170, 1, 7,
                        AF_DEBITS_MUST_NOT_EXCEED_CREDITS | AF_CREDITS_MUST_NOT_EXCEED_DEBITS);
        expect_account(a, AR(exists_with_different_flags));
        lt_account_init(&a[0], 170, 1, 7, 0);
        a[0].credits_posted = 1; /* balances are not compared */
        expect_account(a, AR(exists));

        /* 3. Voiding more than is pending. */
        x[0] = xfer(1710, 170, 171, 6, TF_PENDING);
        expect_transfer(x, TR(ok));
        x[0] = resolve(1711, 1710, 7, TF_VOID);
        expect_transfer(x, TR(exceeds_pending_transfer_amount));
        x[0] = resolve(1711, 1710, 5, TF_VOID);
        expect_transfer(x, TR(pending_transfer_has_different_amount));

        /* 4. A post's accounts are compared with its pending transfer's, not checked
         * as an ordinary transfer's. */
        x[0] = resolve(1712, 1710, U128_MAX, TF_POST);
        x[0].debit_account_id = 170;
        x[0].credit_account_id = 170;
        expect_transfer(x, TR(pending_transfer_has_different_credit_account_id));
        x[0] = resolve(1712, 1710, U128_MAX, TF_POST);
        x[0].debit_account_id = lt_lo(U128_MAX);
        x[0].debit_account_id_hi = lt_hi(U128_MAX);
        expect_transfer(x, TR(pending_transfer_has_different_debit_account_id));

        /* 5. A resent post that leaves user data out asks for the pending's (0 here). */
        x[0] = resolve(1712, 1710, U128_MAX, TF_POST);
        x[0].user_data_128 = 5;
        expect_transfer(x, TR(ok));
        assert_balances(170, 0, 6, 0, 0);
        x[0] = resolve(1712, 1710, U128_MAX, TF_POST);
        expect_transfer(x, TR(exists_with_different_user_data_128));
        x[0].user_data_128 = 5;
        expect_transfer(x, TR(exists));

        /* 6. A full post resent with more than the pending amount differs. */
        x[0] = resolve(1712, 1710, 7, TF_POST);
        x[0].user_data_128 = 5;
        expect_transfer(x, TR(exists_with_different_amount));
        x[0] = resolve(1712, 1710, 6, TF_POST);
        x[0].user_data_128 = 5;
        expect_transfer(x, TR(exists));
        assert_balances(170, 0, 6, 0, 0);
}

/* CreateAccounts of n accounts: the reply, which the caller frees. */
static Keelson__Ledger__V1__CreateAccountsResponse *
create_accounts_reply_of(const lt_tenant *t, lt_account_pb *a, size_t n)
{
        Keelson__Ledger__V1__CreateAccountsRequest req =
            KEELSON__LEDGER__V1__CREATE_ACCOUNTS_REQUEST__INIT;
        lt_account_pb *p[EXPECT_MAX];
        for (size_t i = 0; i < n; i++) {
                p[i] = &a[i];
        }
        req.n_accounts = n;
        req.accounts = p;
        return lt_call(t, "CreateAccounts", &req.base,
                       &keelson__ledger__v1__create_accounts_response__descriptor);
}

static Keelson__Ledger__V1__CreateTransfersResponse *
create_transfers_reply_of(const lt_tenant *t, lt_transfer_pb *x, size_t n)
{
        Keelson__Ledger__V1__CreateTransfersRequest req =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;
        lt_transfer_pb *p[EXPECT_MAX];
        for (size_t i = 0; i < n; i++) {
                p[i] = &x[i];
        }
        req.n_transfers = n;
        req.transfers = p;
        return lt_call(t, "CreateTransfers", &req.base,
                       &keelson__ledger__v1__create_transfers_response__descriptor);
}

static Keelson__Ledger__V1__CreateAccountsResponse *create_accounts_reply(lt_account_pb *a,
                                                                          size_t n)
{
        return create_accounts_reply_of(&g_t, a, n);
}

static Keelson__Ledger__V1__CreateTransfersResponse *create_transfers_reply(lt_transfer_pb *x,
                                                                            size_t n)
{
        return create_transfers_reply_of(&g_t, x, n);
}

/*
 * Every result carries a timestamp (TigerBeetle 0.17): a created object's
 * own, an existing one's for exists, and the time it was judged for any
 * other result.
 */
static void test_result_timestamps(void **state)
{
        lt_account_pb a[3];
        lt_transfer_pb x[3];
        (void)state;

        lt_account_init(&a[0], 180, 1, 7, 0);
        lt_account_init(&a[1], 181, 1, 7, 0);
        Keelson__Ledger__V1__CreateAccountsResponse *ar = create_accounts_reply(a, 2);
        assert_int_equal(ar->n_timestamps, 2);
        uint64_t t180 = ar->timestamps[0], t181 = ar->timestamps[1];
        assert_true(t180 != 0 && t181 > t180);
        protobuf_c_message_free_unpacked(&ar->base, NULL);
        Keelson__Ledger__V1__LookupAccountsResponse *la =
            lt_lookup_accounts(&g_t, (u128[]){180}, 1);
        assert_int_equal(la->accounts[0]->timestamp, t180); /* the account's own */
        protobuf_c_message_free_unpacked(&la->base, NULL);

        lt_account_init(&a[0], 180, 1, 7, 0); /* exists: the existing account's */
        lt_account_init(&a[1], 182, 0, 7, 0); /* refused: when it was judged */
        lt_account_init(&a[2], 181, 1, 8, 0); /* exists_with_different_code: likewise */
        ar = create_accounts_reply(a, 3);
        assert_int_equal(ar->n_results, 3);
        assert_int_equal(ar->results[0], AR(exists));
        assert_int_equal(ar->results[1], AR(ledger_must_not_be_zero));
        assert_int_equal(ar->results[2], AR(exists_with_different_code));
        assert_int_equal(ar->timestamps[0], t180);
        assert_true(ar->timestamps[1] > t181 && ar->timestamps[2] == ar->timestamps[1] + 1);
        protobuf_c_message_free_unpacked(&ar->base, NULL);

        x[0] = xfer(1800, 180, 181, 3, 0);
        x[1] = xfer(1801, 180, 999, 3, 0); /* credit_account_not_found */
        Keelson__Ledger__V1__CreateTransfersResponse *tr = create_transfers_reply(x, 2);
        assert_int_equal(tr->n_timestamps, 2);
        assert_int_equal(tr->results[0], TR(ok));
        assert_int_equal(tr->results[1], TR(credit_account_not_found));
        uint64_t t1800 = tr->timestamps[0];
        assert_true(tr->timestamps[1] == t1800 + 1);
        protobuf_c_message_free_unpacked(&tr->base, NULL);
        Keelson__Ledger__V1__LookupTransfersResponse *lx =
            lt_lookup_transfers(&g_t, (u128[]){1800}, 1);
        assert_int_equal(lx->transfers[0]->timestamp, t1800);
        protobuf_c_message_free_unpacked(&lx->base, NULL);
        tr = create_transfers_reply(x, 1); /* resent: exists, the transfer's timestamp */
        assert_int_equal(tr->results[0], TR(exists));
        assert_int_equal(tr->timestamps[0], t1800);
        protobuf_c_message_free_unpacked(&tr->base, NULL);
}

/* The tenant's clock (ledger.clocks.last_ns), read as the superuser. */
static uint64_t clock_ns(const lt_tenant *t)
{
        PGconn *c = it_pg_connect(&g_stack);
        const char *p[1] = {t->tenant_id};
        PGresult *r =
            it_sql(c, "SELECT last_ns FROM ledger.clocks WHERE tenant_id = $1::uuid", 1, p);
        assert_int_equal(PQntuples(r), 1);
        uint64_t ns = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
        PQfinish(c);
        return ns;
}

/*
 * A batch of accounts that all exist as asked is answered without the
 * tenant's clock (accounts.c): exists, each with the account's own
 * timestamp, and the clock not moved. A batch with anything else in it
 * still takes the clock: a refusal's timestamp comes after the last one
 * given. A tenant of its own, so that no other writer moves its clock.
 */
static void test_accounts_that_exist_take_no_clock(void **state)
{
        lt_tenant t;
        lt_account_pb a[2];
        (void)state;

        lt_tenant_new(&g_stack, "ledger-exist", &t);
        lt_account_init(&a[0], 190, 1, 7, 0);
        lt_account_init(&a[1], 191, 1, 7, 0);
        Keelson__Ledger__V1__CreateAccountsResponse *ar = create_accounts_reply_of(&t, a, 2);
        assert_int_equal(ar->results[0], AR(ok));
        assert_int_equal(ar->results[1], AR(ok));
        uint64_t t190 = ar->timestamps[0], t191 = ar->timestamps[1];
        protobuf_c_message_free_unpacked(&ar->base, NULL);
        uint64_t c0 = clock_ns(&t);
        assert_true(c0 >= t191 && t191 > t190);

        for (int round = 0; round < 2; round++) {
                ar = create_accounts_reply_of(&t, a, 2);
                assert_int_equal(ar->n_results, 2);
                assert_int_equal(ar->results[0], AR(exists));
                assert_int_equal(ar->results[1], AR(exists));
                assert_int_equal(ar->timestamps[0], t190);
                assert_int_equal(ar->timestamps[1], t191);
                protobuf_c_message_free_unpacked(&ar->base, NULL);
                assert_int_equal(clock_ns(&t), c0);
        }

        lt_account_init(&a[1], 191, 1, 8, 0); /* exists_with_different_code: judged in time */
        ar = create_accounts_reply_of(&t, a, 2);
        assert_int_equal(ar->results[0], AR(exists));
        assert_int_equal(ar->results[1], AR(exists_with_different_code));
        assert_int_equal(ar->timestamps[0], t190);
        assert_true(ar->timestamps[1] > c0);
        protobuf_c_message_free_unpacked(&ar->base, NULL);
        assert_true(clock_ns(&t) > c0);
}

/* ---- imported events -------------------------------------------------------------- */

static lt_tenant g_imp; /* a tenant of its own: its history starts near the epoch */

static lt_account_pb imp_account(u128 id, uint64_t ts, uint32_t flags)
{
        lt_account_pb a;

        lt_account_init(&a, id, 1, 7, flags | AF_IMPORTED);
        a.timestamp = ts;
        return a;
}

static lt_transfer_pb imp_xfer(u128 id, u128 dr, u128 cr, u128 amount, uint32_t flags, uint64_t ts)
{
        lt_transfer_pb t = xfer(id, dr, cr, amount, flags | TF_IMPORTED);

        t.timestamp = ts;
        return t;
}

static lt_transfer_pb imp_resolve(u128 id, u128 pending, u128 amount, uint32_t flags, uint64_t ts)
{
        lt_transfer_pb t = resolve(id, pending, amount, flags | TF_IMPORTED);

        t.timestamp = ts;
        return t;
}

/* Now, and an hour ahead: a time no import may claim yet. */
static uint64_t ns_from_now(int64_t seconds)
{
        return ((uint64_t)time(NULL) + (uint64_t)seconds) * 1000000000ull;
}

/*
 * Imports into t: each result as expected, and each created one answered
 * with its own timestamp (an imported event's result timestamp is the one
 * it carries, whatever its result, but for exists: the existing one's).
 */
static void import_accounts(const lt_tenant *t, lt_account_pb *a, size_t n, const int *expected)
{
        Keelson__Ledger__V1__CreateAccountsResponse *r = create_accounts_reply_of(t, a, n);

        assert_int_equal(r->n_results, n);
        assert_int_equal(r->n_timestamps, n);
        for (size_t i = 0; i < n; i++) {
                if ((int)r->results[i] != expected[i]) {
                        fail_msg("account %zu (id %llu): expected %s, got %s", i,
                                 (unsigned long long)a[i].id, lt_ar_name(expected[i]),
                                 lt_ar_name((int)r->results[i]));
                }
                g_seen_ar[r->results[i]] = true;
                if ((a[i].flags & AF_IMPORTED) && r->results[i] != AR(exists)) {
                        assert_int_equal(r->timestamps[i], a[i].timestamp);
                }
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* The same for transfers; returns the result timestamp of the last one. */
static uint64_t import_transfers(const lt_tenant *t, lt_transfer_pb *x, size_t n,
                                 const int *expected)
{
        Keelson__Ledger__V1__CreateTransfersResponse *r = create_transfers_reply_of(t, x, n);
        uint64_t last;

        assert_int_equal(r->n_results, n);
        assert_int_equal(r->n_timestamps, n);
        for (size_t i = 0; i < n; i++) {
                if ((int)r->results[i] != expected[i]) {
                        fail_msg("transfer %zu (id %llu): expected %s, got %s", i,
                                 (unsigned long long)x[i].id, lt_tr_name(expected[i]),
                                 lt_tr_name((int)r->results[i]));
                }
                g_seen_tr[r->results[i]] = true;
                if ((x[i].flags & TF_IMPORTED) && r->results[i] != TR(exists)) {
                        assert_int_equal(r->timestamps[i], x[i].timestamp);
                }
        }
        last = r->timestamps[n - 1];
        protobuf_c_message_free_unpacked(&r->base, NULL);
        return last;
}

static uint64_t stored_timestamp(const lt_tenant *t, u128 id, bool transfer, uint32_t *flags)
{
        uint64_t ts;

        if (transfer) {
                Keelson__Ledger__V1__LookupTransfersResponse *r = lt_lookup_transfers(t, &id, 1);
                assert_int_equal(r->n_transfers, 1);
                ts = r->transfers[0]->timestamp;
                *flags = r->transfers[0]->flags;
                protobuf_c_message_free_unpacked(&r->base, NULL);
        } else {
                Keelson__Ledger__V1__LookupAccountsResponse *r = lt_lookup_accounts(t, &id, 1);
                assert_int_equal(r->n_accounts, 1);
                ts = r->accounts[0]->timestamp;
                *flags = r->accounts[0]->flags;
                protobuf_c_message_free_unpacked(&r->base, NULL);
        }
        return ts;
}

static void test_imported_accounts(void **state)
{
        lt_account_pb a[3];
        uint32_t flags;
        (void)state;

        lt_tenant_new(&g_stack, "it-ledger-import", &g_imp);
        /* Accounts with their original timestamps, in order. */
        a[0] = imp_account(1, 1000, 0);
        a[1] = imp_account(2, 2000, 0);
        a[2] = imp_account(3, 3000, AF_HISTORY);
        import_accounts(&g_imp, a, 3, (int[]){AR(ok), AR(ok), AR(ok)});
        assert_int_equal(stored_timestamp(&g_imp, 3, false, &flags), 3000);
        assert_int_equal(flags, AF_HISTORY | AF_IMPORTED);

        /* A resent import answers exists (before any rule on its timestamp). */
        a[0] = imp_account(1, 1, 0);
        a[1] = imp_account(4, 2500, 0); /* before account 3 */
        a[2] = imp_account(4, 3000, 0); /* account 3's own */
        import_accounts(&g_imp, a, 3,
                        (int[]){AR(exists), AR(imported_event_timestamp_must_not_regress),
                                AR(imported_event_timestamp_must_not_regress)});
        a[0] = imp_account(4, 0, 0);
        a[1] = imp_account(4, (uint64_t)INT64_MAX + 1, 0);
        a[2] = imp_account(4, ns_from_now(3600), 0);
        import_accounts(&g_imp, a, 3,
                        (int[]){AR(imported_event_timestamp_out_of_range),
                                AR(imported_event_timestamp_out_of_range),
                                AR(imported_event_timestamp_must_not_advance)});

        /* The first event decides whether a batch imports. */
        a[0] = imp_account(4, 4000, 0);
        lt_account_init(&a[1], 5, 1, 7, 0);
        import_accounts(&g_imp, a, 2, (int[]){AR(ok), AR(imported_event_expected)});
        lt_account_init(&a[0], 5, 0, 7, 0); /* refused: it creates nothing */
        a[1] = imp_account(6, 5000, 0);
        import_accounts(&g_imp, a, 2,
                        (int[]){AR(ledger_must_not_be_zero), AR(imported_event_not_expected)});
        lt_account_init(&a[0], 5, 1, 7, AF_IMPORTED); /* imported with no timestamp */
        import_accounts(&g_imp, a, 1, (int[]){AR(imported_event_timestamp_out_of_range)});
}

static void test_imported_transfers(void **state)
{
        lt_transfer_pb x[4];
        uint32_t flags;
        (void)state;

        /* After every transfer, on no account's timestamp, after both accounts, no timeout. */
        x[0] = imp_xfer(10, 1, 2, 10, 0, 4000); /* account 4's timestamp */
        x[1] = imp_xfer(10, 3, 1, 10, 0, 2500); /* before account 3, the debit */
        x[2] = imp_xfer(10, 1, 3, 10, 0, 2500); /* before account 3, the credit */
        x[3] = imp_xfer(10, 1, 2, 10, TF_PENDING, 4500);
        x[3].timeout = 60;
        import_transfers(&g_imp, x, 4,
                         (int[]){TR(imported_event_timestamp_must_not_regress),
                                 TR(imported_event_timestamp_must_postdate_debit_account),
                                 TR(imported_event_timestamp_must_postdate_credit_account),
                                 TR(imported_event_timeout_must_be_zero)});

        x[0] = imp_xfer(11, 1, 2, 10, 0, 5000);
        x[0].user_data_128 = 77;
        x[0].user_data_64 = 5;
        x[1] = imp_xfer(12, 1, 3, 5, TF_PENDING, 6000);
        x[1].code = 2;
        x[2] = imp_resolve(13, 12, U128_MAX, TF_POST, 7000);
        import_transfers(&g_imp, x, 3, (int[]){TR(ok), TR(ok), TR(ok)});
        assert_int_equal(stored_timestamp(&g_imp, 13, true, &flags), 7000);
        assert_int_equal(flags, TF_POST | TF_IMPORTED);

        /* The history of account 3 carries the imported times. */
        Keelson__Ledger__V1__AccountFilter f = KEELSON__LEDGER__V1__ACCOUNT_FILTER__INIT;
        f.account_id = 3;
        f.limit = 10;
        f.flags = 1 | 2;
        Keelson__Ledger__V1__GetAccountBalancesResponse *gb =
            lt_call(&g_imp, "GetAccountBalances", &f.base,
                    &keelson__ledger__v1__get_account_balances_response__descriptor);
        assert_int_equal(gb->n_balances, 2);
        assert_int_equal(gb->balances[0]->timestamp, 6000);
        assert_int_equal(gb->balances[0]->credits_pending, 5);
        assert_int_equal(gb->balances[1]->timestamp, 7000);
        assert_int_equal(gb->balances[1]->credits_posted, 5);
        protobuf_c_message_free_unpacked(&gb->base, NULL);

        x[0] = imp_xfer(14, 2, 1, 1, 0, 6500); /* before transfer 13 */
        x[1] = imp_xfer(11, 1, 2, 10, 0, 1);   /* resent: exists, whatever its timestamp */
        x[1].user_data_128 = 77;
        x[1].user_data_64 = 5;
        Keelson__Ledger__V1__CreateTransfersResponse *tr = create_transfers_reply_of(&g_imp, x, 2);
        assert_int_equal(tr->results[0], TR(imported_event_timestamp_must_not_regress));
        assert_int_equal(tr->results[1], TR(exists));
        assert_int_equal(tr->timestamps[1], 5000);
        protobuf_c_message_free_unpacked(&tr->base, NULL);

        /* A chain that fails leaves nothing behind, not even its timestamps. */
        x[0] = imp_xfer(15, 1, 2, 1, TF_LINKED, 8100);
        x[1] = imp_xfer(16, 2, 2, 1, 0, 8200);
        import_transfers(&g_imp, x, 2,
                         (int[]){TR(linked_event_failed), TR(accounts_must_be_different)});
        x[0] = imp_xfer(17, 1, 2, 1, 0, 8050);
        x[0].user_data_32 = 9;
        x[1] = xfer(18, 1, 2, 1, 0);
        import_transfers(&g_imp, x, 2, (int[]){TR(ok), TR(imported_event_expected)});
        x[0] = xfer(0, 1, 2, 1, 0);
        x[1] = imp_xfer(19, 1, 2, 1, 0, 9000);
        import_transfers(&g_imp, x, 2,
                         (int[]){TR(id_must_not_be_zero), TR(imported_event_not_expected)});
        x[0] = imp_xfer(19, 1, 2, 1, 0, 0);
        x[1] = imp_xfer(19, 1, 2, 1, 0, ns_from_now(3600));
        import_transfers(&g_imp, x, 2,
                         (int[]){TR(imported_event_timestamp_out_of_range),
                                 TR(imported_event_timestamp_must_not_advance)});

        /* After the import the service's clock takes over, and imports must follow it. */
        x[0] = xfer(20, 1, 2, 1, 0);
        uint64_t t20 = import_transfers(&g_imp, x, 1, (int[]){TR(ok)});
        assert_true(t20 >= ns_from_now(-3600));
        x[0] = imp_xfer(21, 1, 2, 1, 0, 9000);
        import_transfers(&g_imp, x, 1, (int[]){TR(imported_event_timestamp_must_not_regress)});

        assert_balances_of(&g_imp, 1, 0, 17, 0, 0); /* 10 + 5 posted + 1 + 1 */
        assert_balances_of(&g_imp, 2, 0, 0, 0, 12);
        assert_balances_of(&g_imp, 3, 0, 0, 0, 5);
}

/* The balance rows of an account's last event, expiries included: its newest timestamp. */
static uint64_t last_balance_ts(const lt_tenant *t, u128 account)
{
        Keelson__Ledger__V1__AccountFilter f = KEELSON__LEDGER__V1__ACCOUNT_FILTER__INIT;
        f.account_id = lt_lo(account);
        f.limit = 1;
        f.flags = 1 | 2 | 4;
        Keelson__Ledger__V1__GetAccountBalancesResponse *gb =
            lt_call(t, "GetAccountBalances", &f.base,
                    &keelson__ledger__v1__get_account_balances_response__descriptor);
        uint64_t ts = gb->n_balances == 1 && gb->balances[0]->debits_pending == 0
                          ? gb->balances[0]->timestamp
                          : 0;
        protobuf_c_message_free_unpacked(&gb->base, NULL);
        return ts;
}

typedef struct expiry_wait {
        const lt_tenant *t;
        uint64_t ts;
} expiry_wait;

static int expired_in(void *arg)
{
        expiry_wait *w = arg;

        w->ts = last_balance_ts(w->t, 41);
        return w->ts != 0;
}

/*
 * An expiry writes balance rows at its own timestamp, which no transfer
 * holds: an import at that very timestamp is refused as a regression,
 * never left to fail on the balance rows' key.
 */
static void test_imported_at_an_expiry(void **state)
{
        lt_tenant t;
        lt_account_pb a[2];
        lt_transfer_pb x[1];
        (void)state;

        lt_tenant_new(&g_stack, "it-ledger-import-expiry", &t);
        lt_account_init(&a[0], 41, 1, 7, AF_HISTORY);
        lt_account_init(&a[1], 42, 1, 7, 0);
        import_accounts(&t, a, 2, (int[]){AR(ok), AR(ok)});
        x[0] = xfer(400, 41, 42, 3, TF_PENDING);
        x[0].timeout = 1;
        import_transfers(&t, x, 1, (int[]){TR(ok)});
        expiry_wait w = {.t = &t};
        assert_true(lt_wait_until(expired_in, &w, 30000));
        x[0] = imp_xfer(401, 41, 42, 1, 0, w.ts);
        import_transfers(&t, x, 1, (int[]){TR(imported_event_timestamp_must_not_regress)});
        x[0] = imp_xfer(401, 41, 42, 1, 0, w.ts + 1);
        import_transfers(&t, x, 1, (int[]){TR(ok)});
}

/* ---- query filters ---------------------------------------------------------------- */

typedef Keelson__Ledger__V1__QueryFilter query_filter;

/* QueryTransfers in g_imp: the ids found, in order, into ids (at most max). */
static size_t query_transfers(const query_filter *q, uint64_t *ids, size_t max)
{
        Keelson__Ledger__V1__QueryTransfersResponse *r =
            lt_call(&g_imp, "QueryTransfers", &q->base,
                    &keelson__ledger__v1__query_transfers_response__descriptor);
        size_t n = r->n_transfers;

        assert_true(n <= max);
        for (size_t i = 0; i < n; i++) {
                ids[i] = r->transfers[i]->id;
                if (i > 0) {
                        bool rev = (q->flags & 1) != 0;
                        assert_true(
                            rev ? r->transfers[i]->timestamp < r->transfers[i - 1]->timestamp
                                : r->transfers[i]->timestamp > r->transfers[i - 1]->timestamp);
                }
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
        return n;
}

static void expect_ids(const query_filter *q, const uint64_t *expected, size_t n)
{
        uint64_t got[16];
        size_t k = query_transfers(q, got, 16);

        if (k != n) {
                fail_msg("query: %zu transfers, expected %zu", k, n);
        }
        for (size_t i = 0; i < n; i++) {
                if (got[i] != expected[i]) {
                        fail_msg("query: transfer %zu is %llu, expected %llu", i,
                                 (unsigned long long)got[i], (unsigned long long)expected[i]);
                }
        }
}

/* In g_imp (test_imported_transfers): 11 at 5000, 12 at 6000, 13 at 7000, 17 at 8050, 20 now. */
static void test_query_filters(void **state)
{
        query_filter q = KEELSON__LEDGER__V1__QUERY_FILTER__INIT;
        (void)state;

        q.limit = 100;
        expect_ids(&q, (uint64_t[]){11, 12, 13, 17, 20}, 5);
        q.ledger = 1;
        expect_ids(&q, (uint64_t[]){11, 12, 13, 17, 20}, 5);
        q.ledger = 2;
        expect_ids(&q, NULL, 0);
        q.ledger = 0;
        q.code = 2; /* 12, and its post, which takes its code */
        expect_ids(&q, (uint64_t[]){12, 13}, 2);
        q.code = 0;
        q.user_data_128 = 77;
        expect_ids(&q, (uint64_t[]){11}, 1);
        q.user_data_64 = 5;
        q.code = 1;
        expect_ids(&q, (uint64_t[]){11}, 1);
        q.code = 2;
        expect_ids(&q, NULL, 0);
        q = (query_filter)KEELSON__LEDGER__V1__QUERY_FILTER__INIT;
        q.limit = 100;
        q.user_data_32 = 9;
        expect_ids(&q, (uint64_t[]){17}, 1);
        q.user_data_32 = 0;
        q.timestamp_min = 6000;
        q.timestamp_max = 8050; /* inclusive both ways */
        expect_ids(&q, (uint64_t[]){12, 13, 17}, 3);
        q.flags = 1; /* newest first */
        expect_ids(&q, (uint64_t[]){17, 13, 12}, 3);
        q.timestamp_min = q.timestamp_max = 0;
        q.limit = 2;
        expect_ids(&q, (uint64_t[]){20, 17}, 2);
        q.flags = 0;
        q.timestamp_min = 6001; /* the next page after 12 */
        expect_ids(&q, (uint64_t[]){13, 17}, 2);

        query_filter qa = KEELSON__LEDGER__V1__QUERY_FILTER__INIT;
        qa.limit = 10;
        qa.code = 7;
        Keelson__Ledger__V1__QueryAccountsResponse *ra =
            lt_call(&g_imp, "QueryAccounts", &qa.base,
                    &keelson__ledger__v1__query_accounts_response__descriptor);
        assert_int_equal(ra->n_accounts, 4); /* 1, 2, 3, 4 at 1000..4000 */
        for (size_t i = 0; i < ra->n_accounts; i++) {
                assert_int_equal(ra->accounts[i]->id, i + 1);
                assert_int_equal(ra->accounts[i]->timestamp, 1000 * (i + 1));
        }
        protobuf_c_message_free_unpacked(&ra->base, NULL);
        qa.code = 0;
        qa.flags = 1;
        qa.limit = 1;
        qa.timestamp_max = 3500;
        ra = lt_call(&g_imp, "QueryAccounts", &qa.base,
                     &keelson__ledger__v1__query_accounts_response__descriptor);
        assert_int_equal(ra->n_accounts, 1);
        assert_int_equal(ra->accounts[0]->id, 3);
        protobuf_c_message_free_unpacked(&ra->base, NULL);

        /* Bad filters are the request's error, as for AccountFilter. */
        ProtobufCMessage *out = NULL;
        char err[64];
        query_filter bad = KEELSON__LEDGER__V1__QUERY_FILTER__INIT; /* limit 0 */
        const query_filter *bads[3] = {&bad, NULL, NULL};
        query_filter flags = bad, range = bad;
        flags.limit = range.limit = 1;
        flags.flags = 2;
        range.timestamp_min = 10;
        range.timestamp_max = 9;
        bads[1] = &flags;
        bads[2] = &range;
        for (int i = 0; i < 3; i++) {
                long st = lt_call_status(&g_imp, "QueryTransfers", &bads[i]->base,
                                         &keelson__ledger__v1__query_transfers_response__descriptor,
                                         &out, err, sizeof(err));
                assert_int_equal(st, 400);
                assert_string_equal(err, "invalid_argument");
        }
}

static void test_overflows(void **state)
{
        lt_transfer_pb x[1];
        const u128 half = (u128)1 << 127;
        (void)state;

        accounts((u128[]){50, 51, 52, 53, 54, 55, 56, 57, 58}, 9, 1, 0);
        x[0] = xfer(500, 50, 51, U128_MAX - 5, 0);
        expect_transfer(x, TR(ok));
        x[0] = xfer(501, 50, 52, 10, 0);
        expect_transfer(x, TR(overflows_debits_posted));
        x[0] = xfer(502, 53, 51, 10, 0);
        expect_transfer(x, TR(overflows_credits_posted));
        x[0] = xfer(503, 54, 55, U128_MAX - 5, TF_PENDING);
        expect_transfer(x, TR(ok));
        x[0] = xfer(504, 54, 56, 10, TF_PENDING);
        expect_transfer(x, TR(overflows_debits_pending));
        x[0] = xfer(505, 56, 55, 10, TF_PENDING);
        expect_transfer(x, TR(overflows_credits_pending));
        /* Pending and posted that each fit but not together. */
        x[0] = xfer(506, 57, 58, half, TF_PENDING);
        expect_transfer(x, TR(ok));
        x[0] = xfer(507, 57, 56, half, 0);
        expect_transfer(x, TR(overflows_debits));
        x[0] = xfer(508, 56, 58, half, 0);
        expect_transfer(x, TR(overflows_credits));
        assert_balances(57, half, 0, 0, 0);
}

static void test_balancing(void **state)
{
        lt_transfer_pb x[1];
        u128 id = 600;
        (void)state;

        accounts((u128[]){60}, 1, 1, AF_DEBITS_MUST_NOT_EXCEED_CREDITS);
        accounts((u128[]){61}, 1, 1, 0);
        x[0] = xfer(600, 61, 60, 30, 0);
        expect_transfer(x, TR(ok));
        x[0] = xfer(601, 60, 61, 100, TF_BALANCING_DEBIT);
        expect_transfer(x, TR(ok));
        assert_balances(60, 0, 30, 0, 30);
        id = 601;
        Keelson__Ledger__V1__LookupTransfersResponse *r = lt_lookup_transfers(&g_t, &id, 1);
        assert_int_equal(r->n_transfers, 1);
        assert_int_equal(r->transfers[0]->amount, 30); /* what it moved, not what was asked */
        protobuf_c_message_free_unpacked(&r->base, NULL);
        expect_transfer(x, TR(exists)); /* asked 100 >= 30 */
        x[0].amount = 20;
        expect_transfer(x, TR(exists_with_different_amount));
}

/* ---- reads ------------------------------------------------------------------------- */

static void test_queries(void **state)
{
        lt_transfer_pb x[3];
        (void)state;

        accounts((u128[]){70}, 1, 3, AF_HISTORY);
        accounts((u128[]){71}, 1, 3, 0);
        x[0] = xfer(700, 71, 70, 5, 0);
        x[1] = xfer(701, 70, 71, 2, 0);
        x[2] = xfer(702, 71, 70, 4, TF_PENDING);
        for (int i = 0; i < 3; i++) {
                x[i].ledger = 3;
                x[i].user_data_32 = (uint32_t)(i + 1);
        }
        expect_transfers(x, 3, (int[]){TR(ok), TR(ok), TR(ok)});

        Keelson__Ledger__V1__AccountFilter f = KEELSON__LEDGER__V1__ACCOUNT_FILTER__INIT;
        f.account_id = 70;
        f.limit = 10;
        f.flags = 1 | 2;
        Keelson__Ledger__V1__GetAccountTransfersResponse *gt =
            lt_call(&g_t, "GetAccountTransfers", &f.base,
                    &keelson__ledger__v1__get_account_transfers_response__descriptor);
        assert_int_equal(gt->n_transfers, 3);
        assert_int_equal(gt->transfers[0]->id, 700);
        assert_int_equal(gt->transfers[2]->id, 702);
        assert_true(gt->transfers[0]->timestamp < gt->transfers[1]->timestamp);
        uint64_t second_ts = gt->transfers[1]->timestamp;
        protobuf_c_message_free_unpacked(&gt->base, NULL);

        f.flags = 2 | 4; /* credits, newest first */
        gt = lt_call(&g_t, "GetAccountTransfers", &f.base,
                     &keelson__ledger__v1__get_account_transfers_response__descriptor);
        assert_int_equal(gt->n_transfers, 2);
        assert_int_equal(gt->transfers[0]->id, 702);
        assert_int_equal(gt->transfers[1]->id, 700);
        protobuf_c_message_free_unpacked(&gt->base, NULL);

        f.flags = 1 | 2;
        f.timestamp_min = second_ts; /* paging by timestamp */
        f.limit = 1;
        gt = lt_call(&g_t, "GetAccountTransfers", &f.base,
                     &keelson__ledger__v1__get_account_transfers_response__descriptor);
        assert_int_equal(gt->n_transfers, 1);
        assert_int_equal(gt->transfers[0]->id, 701);
        protobuf_c_message_free_unpacked(&gt->base, NULL);

        f.timestamp_min = 0;
        f.limit = 10;
        Keelson__Ledger__V1__GetAccountBalancesResponse *gb =
            lt_call(&g_t, "GetAccountBalances", &f.base,
                    &keelson__ledger__v1__get_account_balances_response__descriptor);
        assert_int_equal(gb->n_balances, 3);
        assert_int_equal(gb->balances[0]->credits_posted, 5);
        assert_int_equal(gb->balances[1]->debits_posted, 2);
        assert_int_equal(gb->balances[2]->credits_pending, 4);
        protobuf_c_message_free_unpacked(&gb->base, NULL);

        f.account_id = 71; /* no history flag: no balances */
        gb = lt_call(&g_t, "GetAccountBalances", &f.base,
                     &keelson__ledger__v1__get_account_balances_response__descriptor);
        assert_int_equal(gb->n_balances, 0);
        protobuf_c_message_free_unpacked(&gb->base, NULL);
}

static void test_trial_balance(void **state)
{
        (void)state;
        Keelson__Ledger__V1__GetTrialBalanceRequest req =
            KEELSON__LEDGER__V1__GET_TRIAL_BALANCE_REQUEST__INIT;
        req.ledger = 3;
        req.limit = 1;
        Keelson__Ledger__V1__GetTrialBalanceResponse *r =
            lt_call(&g_t, "GetTrialBalance", &req.base,
                    &keelson__ledger__v1__get_trial_balance_response__descriptor);
        assert_int_equal(r->n_accounts, 1);
        assert_int_equal(r->accounts[0]->id, 70);
        assert_int_equal(r->accounts_total, 2);
        assert_true(r->balanced);
        assert_non_null(r->totals);
        assert_int_equal(r->totals->debits_posted, 7);
        assert_int_equal(r->totals->credits_posted, 7);
        assert_int_equal(r->totals->debits_pending, 4);
        assert_int_equal(r->totals->credits_pending, 4);
        protobuf_c_message_free_unpacked(&r->base, NULL);
        req.after_account_id = 70; /* the next page */
        r = lt_call(&g_t, "GetTrialBalance", &req.base,
                    &keelson__ledger__v1__get_trial_balance_response__descriptor);
        assert_int_equal(r->n_accounts, 1);
        assert_int_equal(r->accounts[0]->id, 71);
        protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* ---- request errors and isolation --------------------------------------------------- */

static void expect_error(const lt_tenant *t, const char *method, const ProtobufCMessage *req,
                         long status, const char *code)
{
        ProtobufCMessage *out = NULL;
        char err[64] = "";

        long got = lt_call_status(t, method, req,
                                  &keelson__ledger__v1__create_transfers_response__descriptor, &out,
                                  err, sizeof(err));
        if (got != status || strcmp(err, code) != 0) {
                fail_msg("%s: expected HTTP %ld %s, got %ld %s", method, status, code, got, err);
        }
}

static void test_request_errors(void **state)
{
        Keelson__Ledger__V1__CreateTransfersRequest req =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;
        lt_transfer_pb x = xfer(800, 1, 2, 1, 0);
        lt_transfer_pb *px = &x;
        lt_tenant anonymous = g_t;
        (void)state;

        expect_error(&g_t, "CreateTransfers", &req.base, 400, "invalid_argument"); /* empty */
        x.code = 70000;
        req.n_transfers = 1;
        req.transfers = &px;
        expect_error(&g_t, "CreateTransfers", &req.base, 400, "invalid_argument");
        lt_transfer_pb *many = calloc(8191, sizeof(*many));
        lt_transfer_pb **pm = calloc(8191, sizeof(*pm));
        for (int i = 0; i < 8191; i++) {
                many[i] = xfer(900000 + (u128)i, 1, 2, 1, 0);
                pm[i] = &many[i];
        }
        req.n_transfers = 8191;
        req.transfers = pm;
        expect_error(&g_t, "CreateTransfers", &req.base, 400, "invalid_argument");
        free(pm);
        free(many);
        snprintf(anonymous.token, sizeof(anonymous.token), "not-a-session");
        req.n_transfers = 1;
        req.transfers = &px;
        x.code = 1;
        expect_error(&anonymous, "CreateTransfers", &req.base, 401, "unauthenticated");
}

/*
 * Lookups by (tenant_id, id) must find their rows in the primary key even
 * when the statistics do not know a tenant yet: then any index leading with
 * tenant_id looks as good to the planner, and one was taken for account
 * lookups, reading the tenant's every account per id
 * (migrations/002_key_first_indexes.sql). So only primary keys lead with it.
 */
static void test_only_primary_keys_lead_with_the_tenant(void **state)
{
        (void)state;
        PGconn *c = it_pg_connect(&g_stack);
        assert_non_null(c);
        PGresult *res =
            PQexec(c, "SELECT string_agg(i.indexrelid::regclass::text, ', ')"
                      " FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid"
                      " JOIN pg_namespace n ON n.oid = t.relnamespace"
                      " JOIN pg_attribute a ON a.attrelid = t.oid"
                      "  AND a.attnum = i.indkey[0]"
                      " WHERE n.nspname = 'ledger' AND a.attname = 'tenant_id'"
                      " AND NOT i.indisprimary"
                      " AND NOT (t.relname = 'pending_transfers' AND i.indpred IS NOT NULL)");
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        if (!PQgetisnull(res, 0, 0)) {
                fail_msg("secondary indexes leading with tenant_id: %s", PQgetvalue(res, 0, 0));
        }
        PQclear(res);
        PQfinish(c);
}

static void test_tenant_isolation(void **state)
{
        lt_tenant other;
        lt_transfer_pb x[1];
        lt_account_pb a[1];
        u128 id = 1;
        int r;
        (void)state;

        lt_tenant_new(&g_stack, "it-ledger-other", &other);
        Keelson__Ledger__V1__LookupAccountsResponse *la = lt_lookup_accounts(&other, &id, 1);
        assert_int_equal(la->n_accounts, 0); /* the first tenant's account 1 is invisible */
        protobuf_c_message_free_unpacked(&la->base, NULL);
        /* Ids are per tenant: the same id is free here. */
        lt_account_init(&a[0], 1, 1, 7, 0);
        lt_create_accounts(&other, a, 1, &r);
        assert_int_equal(r, AR(ok));
        x[0] = xfer(100, 1, 2, 1, 0); /* 2 does not exist in this tenant */
        lt_create_transfers(&other, x, 1, &r);
        assert_int_equal(r, TR(credit_account_not_found));

        /* In the database: the runtime role sees nothing without a tenant, one with it. */
        PGconn *c = it_pg_connect(&g_stack);
        char sql[512];
        assert_non_null(c);
        PQclear(PQexec(c, "BEGIN"));
        PQclear(PQexec(c, "SET LOCAL ROLE keelson_ledger_rt"));
        PGresult *res = PQexec(c, "SELECT count(*) FROM ledger.accounts");
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        assert_string_equal(PQgetvalue(res, 0, 0), "0");
        PQclear(res);
        snprintf(sql, sizeof(sql), "SELECT set_config('keelson.tenant_id', '%s', true)",
                 other.tenant_id);
        PQclear(PQexec(c, sql));
        res = PQexec(c, "SELECT count(*), count(*) FILTER (WHERE tenant_id <> "
                        "current_setting('keelson.tenant_id')::uuid) FROM ledger.accounts");
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        assert_string_equal(PQgetvalue(res, 0, 0), "1");
        assert_string_equal(PQgetvalue(res, 0, 1), "0");
        PQclear(res);
        /* Transfers are immutable for the runtime role. */
        res = PQexec(c, "UPDATE ledger.transfers SET amount = 0");
        assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
        PQclear(res);
        PQclear(PQexec(c, "ROLLBACK"));
        PQfinish(c);
}

/* ---- coverage ------------------------------------------------------------------------- */

static void test_every_code_reached(void **state)
{
        (void)state;
        for (int r = 0; r < N_AR; r++) {
                if (!g_seen_ar[r]) {
                        fail_msg("account result %s was never reached", lt_ar_name(r));
                }
        }
        for (int r = 0; r < N_TR; r++) {
                if (!g_seen_tr[r] && r != TR(overflows_timeout)) {
                        fail_msg("transfer result %s was never reached", lt_tr_name(r));
                }
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_account_codes),
            cmocka_unit_test(test_account_chains),
            cmocka_unit_test(test_transfer_basics),
            cmocka_unit_test(test_transfer_exists_with_different),
            cmocka_unit_test(test_taken_ids_rerun_exactly),
            cmocka_unit_test(test_transfer_validation),
            cmocka_unit_test(test_transfer_linked),
            cmocka_unit_test(test_two_phase),
            cmocka_unit_test(test_expiry),
            cmocka_unit_test(test_closed_accounts),
            cmocka_unit_test(test_matches_tigerbeetle_0_17),
            cmocka_unit_test(test_result_timestamps),
            cmocka_unit_test(test_accounts_that_exist_take_no_clock),
            cmocka_unit_test(test_imported_accounts),
            cmocka_unit_test(test_imported_transfers),
            cmocka_unit_test(test_imported_at_an_expiry),
            cmocka_unit_test(test_query_filters),
            cmocka_unit_test(test_overflows),
            cmocka_unit_test(test_balancing),
            cmocka_unit_test(test_queries),
            cmocka_unit_test(test_trial_balance),
            cmocka_unit_test(test_request_errors),
            cmocka_unit_test(test_tenant_isolation),
            cmocka_unit_test(test_only_primary_keys_lead_with_the_tenant),
            cmocka_unit_test(test_every_code_reached),
        };
        return cmocka_run_group_tests(tests, group_setup, NULL);
}
