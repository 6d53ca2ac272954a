/*
 * Unit tests of billing in the ledger (services/billing/postings.c): each
 * chain type with its codes, accounts and amounts; zero amounts left out
 * and negative ones swapped; malformed facts refused; ids as documented
 * (recomputed here from the rule's text), deterministic, distinct across
 * types, sources and indexes, never 0 or 2^128-1; the ledger messages
 * (linked flags, ledger, code, user data); a property test over thousands
 * of random facts: every chain balances and leaves on each account exactly
 * what the fact says. Then, against a throwaway PostgreSQL with billing's
 * migrations, bl_posting_queue: the row it writes decodes to the chain and
 * is queued (the postings' trigger), and
 * a second queue of one source fails.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "billing.h"
#include "ks_crypto.h"
#include "ks_u128.h"
#include "pg_db.h"

#define PROP_CASES 4000
#define AMOUNT_MAX 1000000000000LL /* 10^10 units of a 2-digit currency */
#define TENANT     "7d9f4c1e-0b6a-4e53-9a1f-5c2d8e7b6a41"
#define CUSTOMER   "0b7e6f2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
#define SOURCE     "c3a1f0de-91b2-4c7d-8e6f-a5b4c3d2e1f0"
#define SOURCE_UP  "C3A1F0DE-91B2-4C7D-8E6F-A5B4C3D2E1F0"
#define OTHER      "5f0e1d2c-3b4a-4968-8776-655443322110"
#define N_KINDS    7 /* bl_account_kind values 1..6 */
#define LINKED     KEELSON__LEDGER__V1__TRANSFER_FLAG__TRANSFER_FLAG_LINKED

/* ---- helpers ----------------------------------------------------------------------- */

static const bl_currency *usd(void)
{
        const bl_currency *c = bl_currency_find("USD");
        assert_non_null(c);
        return c;
}

static bl_fact fact_of(bl_source_type type)
{
        bl_fact f = {.type = type, .source_id = SOURCE, .customer_id = CUSTOMER, .currency = usd()};
        return f;
}

static void expect_transfer(const bl_chain *c, size_t i, uint16_t code, bl_account_kind debit,
                            bl_account_kind credit, int64_t amount)
{
        assert_true(i < c->n);
        assert_int_equal(c->t[i].code, code);
        assert_int_equal(c->t[i].debit, debit);
        assert_int_equal(c->t[i].credit, credit);
        assert_int_equal(c->t[i].amount, amount);
}

/* The documented rule, computed here on its own: SHA-256 of text, 16 bytes big-endian. */
static bl_u128 rule_id(const char *text)
{
        uint8_t h[KS_SHA256_BYTES];
        bl_u128 v = 0;

        ks_sha256(text, strlen(text), h);
        for (int i = 0; i < 16; i++) {
                v = (v << 8) | h[i];
        }
        return v;
}

static bl_u128 uuid_num(const char *s)
{
        ks_u128 v = 0;
        assert_int_equal(ks_u128_from_uuid(s, &v), 0);
        return v;
}

/* ---- chains, one type at a time --------------------------------------------------- */

static void test_invoice(void **state)
{
        bl_fact f = fact_of(BL_SRC_INVOICE);
        bl_chain c;

        (void)state;
        f.subtotal = 10000;
        f.tax = 800;
        f.total = 10800;
        f.balance_applied = 2500;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 3);
        expect_transfer(&c, 0, 101, BL_ACCT_RECEIVABLE, BL_ACCT_REVENUE, 10000);
        expect_transfer(&c, 1, 102, BL_ACCT_RECEIVABLE, BL_ACCT_TAX_PAYABLE, 800);
        expect_transfer(&c, 2, 103, BL_ACCT_CUSTOMER_CREDIT, BL_ACCT_RECEIVABLE, 2500);
        assert_int_equal(c.type, BL_SRC_INVOICE);
        assert_string_equal(c.source_id, SOURCE);
        assert_string_equal(c.customer_id, CUSTOMER);
        assert_ptr_equal(c.currency, usd());
}

static void test_invoice_credit(void **state)
{
        bl_fact f = fact_of(BL_SRC_INVOICE);
        bl_chain c;

        (void)state;
        /* A cancellation's proration credit: every line negative, the total a credit. */
        f.subtotal = -5000;
        f.tax = -400;
        f.total = -5400;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 3);
        expect_transfer(&c, 0, 101, BL_ACCT_REVENUE, BL_ACCT_RECEIVABLE, 5000);
        expect_transfer(&c, 1, 102, BL_ACCT_TAX_PAYABLE, BL_ACCT_RECEIVABLE, 400);
        expect_transfer(&c, 2, 104, BL_ACCT_RECEIVABLE, BL_ACCT_CUSTOMER_CREDIT, 5400);
        /* Lines of both signs: a positive subtotal with a larger negative tax is still a credit. */
        f.subtotal = 100;
        f.tax = -300;
        f.total = -200;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 3);
        expect_transfer(&c, 0, 101, BL_ACCT_RECEIVABLE, BL_ACCT_REVENUE, 100);
        expect_transfer(&c, 1, 102, BL_ACCT_TAX_PAYABLE, BL_ACCT_RECEIVABLE, 300);
        expect_transfer(&c, 2, 104, BL_ACCT_RECEIVABLE, BL_ACCT_CUSTOMER_CREDIT, 200);
}

static void test_invoice_zeros(void **state)
{
        bl_fact f = fact_of(BL_SRC_INVOICE);
        bl_chain c;

        (void)state;
        f.subtotal = 1999; /* tax exempt, no credit applied */
        f.total = 1999;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 1);
        expect_transfer(&c, 0, 101, BL_ACCT_RECEIVABLE, BL_ACCT_REVENUE, 1999);
        f.subtotal = f.total = 0; /* a zero invoice moves nothing */
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 0);
        f.subtotal = f.total = f.balance_applied = 700; /* paid wholly from credit */
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 2);
        expect_transfer(&c, 0, 101, BL_ACCT_RECEIVABLE, BL_ACCT_REVENUE, 700);
        expect_transfer(&c, 1, 103, BL_ACCT_CUSTOMER_CREDIT, BL_ACCT_RECEIVABLE, 700);
}

static void test_payment(void **state)
{
        bl_fact f = fact_of(BL_SRC_PAYMENT);
        bl_chain c;

        (void)state;
        f.amount = 4200;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 1);
        expect_transfer(&c, 0, 111, BL_ACCT_CASH, BL_ACCT_RECEIVABLE, 4200);
        f.from_uncollectible = true;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 1);
        expect_transfer(&c, 0, 111, BL_ACCT_CASH, BL_ACCT_BAD_DEBT, 4200);
        f.amount = 0;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 0);
}

static void test_credit_note(void **state)
{
        bl_fact f = fact_of(BL_SRC_CREDIT_NOTE);
        bl_chain c;

        (void)state;
        f.amount = 1100;
        f.subtotal = 1000;
        f.tax = 100;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 2);
        expect_transfer(&c, 0, 121, BL_ACCT_REVENUE, BL_ACCT_RECEIVABLE, 1000);
        expect_transfer(&c, 1, 122, BL_ACCT_TAX_PAYABLE, BL_ACCT_RECEIVABLE, 100);
        f.to_credit = true;
        assert_true(bl_chain_of(&f, &c));
        expect_transfer(&c, 0, 121, BL_ACCT_REVENUE, BL_ACCT_CUSTOMER_CREDIT, 1000);
        expect_transfer(&c, 1, 122, BL_ACCT_TAX_PAYABLE, BL_ACCT_CUSTOMER_CREDIT, 100);
        f.tax = 0;
        f.amount = 1000;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 1);
        expect_transfer(&c, 0, 121, BL_ACCT_REVENUE, BL_ACCT_CUSTOMER_CREDIT, 1000);
}

/* A refund: the note's amount on from the customer's credit to cash, the balance untouched. */
static void test_credit_note_refund(void **state)
{
        bl_fact f = fact_of(BL_SRC_CREDIT_NOTE);
        bl_chain c;

        (void)state;
        f.amount = 1100;
        f.subtotal = 1000;
        f.tax = 100;
        f.to_credit = true;
        f.refunded = 1100;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 3);
        expect_transfer(&c, 0, 121, BL_ACCT_REVENUE, BL_ACCT_CUSTOMER_CREDIT, 1000);
        expect_transfer(&c, 1, 122, BL_ACCT_TAX_PAYABLE, BL_ACCT_CUSTOMER_CREDIT, 100);
        expect_transfer(&c, 2, 123, BL_ACCT_CUSTOMER_CREDIT, BL_ACCT_CASH, 1100);
        assert_true(c.t[2].id == rule_id("keelson.billing/transfer/3/" SOURCE "/2"));
        /* Never more than the note, never from a receivable, never negative. */
        f.refunded = 1101;
        assert_false(bl_chain_of(&f, &c));
        f.refunded = -1;
        assert_false(bl_chain_of(&f, &c));
        f.refunded = 1100;
        f.to_credit = false;
        assert_false(bl_chain_of(&f, &c));
}

static void test_void(void **state)
{
        bl_fact f = fact_of(BL_SRC_VOID);
        bl_chain c;

        (void)state;
        f.subtotal = 10000;
        f.tax = 800;
        f.total = 10800;
        f.balance_applied = 2500;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 3);
        expect_transfer(&c, 0, 131, BL_ACCT_REVENUE, BL_ACCT_RECEIVABLE, 10000);
        expect_transfer(&c, 1, 132, BL_ACCT_TAX_PAYABLE, BL_ACCT_RECEIVABLE, 800);
        expect_transfer(&c, 2, 133, BL_ACCT_RECEIVABLE, BL_ACCT_CUSTOMER_CREDIT, 2500);
        f.from_uncollectible = true;
        assert_true(bl_chain_of(&f, &c));
        expect_transfer(&c, 0, 131, BL_ACCT_REVENUE, BL_ACCT_BAD_DEBT, 10000);
        expect_transfer(&c, 1, 132, BL_ACCT_TAX_PAYABLE, BL_ACCT_BAD_DEBT, 800);
        expect_transfer(&c, 2, 133, BL_ACCT_BAD_DEBT, BL_ACCT_CUSTOMER_CREDIT, 2500);
}

static void test_uncollectible(void **state)
{
        bl_fact f = fact_of(BL_SRC_UNCOLLECTIBLE);
        bl_chain c;

        (void)state;
        f.amount = 7300;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 1);
        expect_transfer(&c, 0, 141, BL_ACCT_BAD_DEBT, BL_ACCT_RECEIVABLE, 7300);
        f.amount = -7300; /* swapped, like any negative amount */
        assert_true(bl_chain_of(&f, &c));
        expect_transfer(&c, 0, 141, BL_ACCT_RECEIVABLE, BL_ACCT_BAD_DEBT, 7300);
}

static void test_malformed(void **state)
{
        bl_fact f = fact_of(BL_SRC_INVOICE);
        bl_chain c;

        (void)state;
        f.subtotal = f.total = 100;
        assert_true(bl_chain_of(&f, &c));
        f.type = (bl_source_type)0;
        assert_false(bl_chain_of(&f, &c));
        f.type = (bl_source_type)6;
        assert_false(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 0);
        f = fact_of(BL_SRC_INVOICE);
        f.currency = NULL;
        assert_false(bl_chain_of(&f, &c));
        f = fact_of(BL_SRC_INVOICE);
        f.source_id = "c3a1f0de-91b2-4c7d-8e6f-a5b4c3d2e1f"; /* 35 characters */
        assert_false(bl_chain_of(&f, &c));
        f.source_id = NULL;
        assert_false(bl_chain_of(&f, &c));
        f = fact_of(BL_SRC_PAYMENT);
        f.customer_id = "0b7e6f2a+3c4d-4e5f-8a9b-0c1d2e3f4a5b";
        assert_false(bl_chain_of(&f, &c));
        f = fact_of(BL_SRC_INVOICE); /* a total that is not subtotal + tax */
        f.subtotal = 100;
        f.tax = 8;
        f.total = 109;
        assert_false(bl_chain_of(&f, &c));
        f.total = 108;
        f.balance_applied = -1;
        assert_false(bl_chain_of(&f, &c));
        f = fact_of(BL_SRC_INVOICE); /* subtotal + tax overflows */
        f.subtotal = INT64_MAX;
        f.tax = 1;
        f.total = INT64_MIN;
        assert_false(bl_chain_of(&f, &c));
        f = fact_of(BL_SRC_CREDIT_NOTE); /* amount != subtotal + tax */
        f.amount = 1000;
        f.subtotal = 900;
        f.tax = 90;
        assert_false(bl_chain_of(&f, &c));
        f = fact_of(BL_SRC_PAYMENT); /* no absolute value in int64 */
        f.amount = INT64_MIN;
        assert_false(bl_chain_of(&f, &c));
        f = fact_of(BL_SRC_VOID);
        f.subtotal = 1;
        f.balance_applied = -5;
        assert_false(bl_chain_of(&f, &c));
}

/* ---- ids ------------------------------------------------------------------------------- */

static void test_ids_follow_the_rule(void **state)
{
        bl_fact f = fact_of(BL_SRC_INVOICE);
        bl_chain c;

        (void)state;
        f.subtotal = 100;
        f.tax = 7;
        f.total = 107;
        assert_true(bl_chain_of(&f, &c));
        assert_true(c.t[0].id == rule_id("keelson.billing/transfer/1/" SOURCE "/0"));
        assert_true(c.t[1].id == rule_id("keelson.billing/transfer/1/" SOURCE "/1"));
        assert_true(bl_account_id(BL_ACCT_RECEIVABLE, usd(), CUSTOMER) ==
                    rule_id("keelson.billing/account/1/USD/" CUSTOMER));
        assert_true(bl_account_id(BL_ACCT_CUSTOMER_CREDIT, usd(), CUSTOMER) ==
                    rule_id("keelson.billing/account/5/USD/" CUSTOMER));
        assert_true(bl_account_id(BL_ACCT_REVENUE, usd(), CUSTOMER) ==
                    rule_id("keelson.billing/account/2/USD"));
        assert_true(bl_account_id(BL_ACCT_CASH, usd(), NULL) ==
                    rule_id("keelson.billing/account/4/USD"));
        /* A uuid in capitals is the same source. */
        f.source_id = SOURCE_UP;
        bl_chain up;
        assert_true(bl_chain_of(&f, &up));
        assert_string_equal(up.source_id, SOURCE);
        assert_true(up.t[0].id == c.t[0].id && up.t[1].id == c.t[1].id);
}

static void test_ids_keep_their_place(void **state)
{
        bl_fact f = fact_of(BL_SRC_INVOICE);
        bl_chain with_tax, without;

        (void)state;
        f.subtotal = 1000;
        f.tax = 80;
        f.total = 1080;
        f.balance_applied = 300;
        assert_true(bl_chain_of(&f, &with_tax));
        f.tax = 0;
        f.total = 1000;
        assert_true(bl_chain_of(&f, &without));
        /* 103 is index 2 of the invoice's chain whether or not 102 was left out. */
        assert_int_equal(without.n, 2);
        assert_true(without.t[1].id == with_tax.t[2].id);
        assert_true(without.t[1].id == rule_id("keelson.billing/transfer/1/" SOURCE "/2"));
}

/*
 * A source with a version 7 uuid: each transfer's id is the rule's hash
 * with the source's first 48 bits (its milliseconds) in front, the same
 * for the source in capitals; a source made a millisecond later has ids
 * above every one of the first's.
 */
static void test_ids_of_time_ordered_sources(void **state)
{
        static const char early[] = "0190f3a1-2b3c-7d4e-8f60-718293a4b5c6";
        static const char early_up[] = "0190F3A1-2B3C-7D4E-8F60-718293A4B5C6";
        static const char later[] = "0190f3a1-2b3d-7000-8000-000000000001";
        const bl_u128 time_bits = ~(bl_u128)0 << 80;
        bl_fact f = fact_of(BL_SRC_INVOICE);
        bl_chain a, up, b;

        (void)state;
        f.subtotal = 100;
        f.tax = 7;
        f.total = 107;
        f.source_id = early;
        assert_true(bl_chain_of(&f, &a));
        assert_int_equal(a.n, 2);
        for (size_t i = 0; i < a.n; i++) {
                char text[128];
                snprintf(text, sizeof(text), "keelson.billing/transfer/1/%s/%zu", early, i);
                assert_true((a.t[i].id & time_bits) == (uuid_num(early) & time_bits));
                assert_true((a.t[i].id & ~time_bits) == (rule_id(text) & ~time_bits));
        }
        f.source_id = early_up;
        assert_true(bl_chain_of(&f, &up));
        assert_true(up.t[0].id == a.t[0].id && up.t[1].id == a.t[1].id);
        f.source_id = later;
        assert_true(bl_chain_of(&f, &b));
        for (size_t i = 0; i < a.n; i++) {
                for (size_t k = 0; k < b.n; k++) {
                        assert_true(b.t[k].id > a.t[i].id);
                }
        }
}

/* Every id of every type, for two sources: all distinct, none reserved, the same twice. */
static void test_ids_distinct(void **state)
{
        bl_u128 ids[64];
        size_t n = 0;

        (void)state;
        for (int s = 0; s < 2; s++) {
                for (int type = BL_SRC_INVOICE; type <= BL_SRC_UNCOLLECTIBLE; type++) {
                        bl_fact f = fact_of((bl_source_type)type);
                        bl_chain c, again;
                        f.source_id = s == 0 ? SOURCE : OTHER;
                        f.subtotal = -3; /* a credit invoice: 101, 102, 104 */
                        f.tax = -1;
                        f.total = -4;
                        f.balance_applied = 2;
                        f.amount = type == BL_SRC_CREDIT_NOTE ? -4 : 9;
                        assert_true(bl_chain_of(&f, &c));
                        assert_true(bl_chain_of(&f, &again));
                        assert_true(c.n >= 1);
                        for (size_t i = 0; i < c.n; i++) {
                                assert_true(c.t[i].id == again.t[i].id);
                                assert_true(c.t[i].id != 0 && c.t[i].id != KS_U128_MAX);
                                ids[n++] = c.t[i].id;
                        }
                }
        }
        assert_true(n >= 20);
        for (size_t i = 0; i < n; i++) {
                for (size_t j = i + 1; j < n; j++) {
                        assert_false(ids[i] == ids[j]);
                }
        }
}

static void test_account_ids_distinct(void **state)
{
        const char *const curs[] = {"USD", "EUR", "JPY"};
        const char *const custs[] = {CUSTOMER, OTHER};
        bl_u128 ids[64];
        size_t n = 0;

        (void)state;
        for (int k = BL_ACCT_RECEIVABLE; k <= BL_ACCT_BAD_DEBT; k++) {
                for (size_t c = 0; c < 3; c++) {
                        const bl_currency *cur = bl_currency_find(curs[c]);
                        bool per_customer = k == BL_ACCT_RECEIVABLE || k == BL_ACCT_CUSTOMER_CREDIT;
                        for (size_t u = 0; u < (per_customer ? 2u : 1u); u++) {
                                ids[n++] = bl_account_id((bl_account_kind)k, cur, custs[u]);
                        }
                        if (!per_customer) { /* the tenant's: the same for every customer */
                                assert_true(bl_account_id((bl_account_kind)k, cur, CUSTOMER) ==
                                            bl_account_id((bl_account_kind)k, cur, OTHER));
                        }
                }
        }
        for (size_t i = 0; i < n; i++) {
                assert_true(ids[i] != 0 && ids[i] != KS_U128_MAX);
                for (size_t j = i + 1; j < n; j++) {
                        assert_false(ids[i] == ids[j]);
                }
        }
}

/* ---- ledger messages -------------------------------------------------------------------- */

static void test_accounts(void **state)
{
        Keelson__Ledger__V1__Account a;
        bl_u128 cust = uuid_num(CUSTOMER);

        (void)state;
        for (int k = BL_ACCT_RECEIVABLE; k <= BL_ACCT_BAD_DEBT; k++) {
                bl_u128 id = bl_account_id((bl_account_kind)k, usd(), CUSTOMER);
                bool per_customer = k == BL_ACCT_RECEIVABLE || k == BL_ACCT_CUSTOMER_CREDIT;
                bl_account_of((bl_account_kind)k, usd(), CUSTOMER, &a);
                assert_true(ks_u128_of(a.id_hi, a.id) == id);
                assert_int_equal(a.ledger, 840);
                assert_int_equal(a.code, k);
                assert_int_equal(a.flags, 0);
                assert_true(ks_u128_of(a.user_data_128_hi, a.user_data_128) ==
                            (per_customer ? cust : 0));
                assert_int_equal(a.user_data_64, 0);
                assert_int_equal(a.user_data_32, 0);
                assert_int_equal(a.debits_posted + a.credits_posted + a.timestamp, 0);
        }
        bl_account_of(BL_ACCT_REVENUE, bl_currency_find("JPY"), NULL, &a);
        assert_int_equal(a.ledger, 392);
}

static void test_transfers(void **state)
{
        bl_fact f = fact_of(BL_SRC_VOID);
        Keelson__Ledger__V1__Transfer t;
        bl_chain c;

        (void)state;
        f.subtotal = 900;
        f.tax = 72;
        f.balance_applied = 50;
        assert_true(bl_chain_of(&f, &c));
        assert_int_equal(c.n, 3);
        for (size_t i = 0; i < c.n; i++) {
                bl_transfer_of(&c, i, &t);
                assert_true(ks_u128_of(t.id_hi, t.id) == c.t[i].id);
                assert_true(ks_u128_of(t.debit_account_id_hi, t.debit_account_id) ==
                            bl_account_id(c.t[i].debit, usd(), CUSTOMER));
                assert_true(ks_u128_of(t.credit_account_id_hi, t.credit_account_id) ==
                            bl_account_id(c.t[i].credit, usd(), CUSTOMER));
                assert_int_equal(t.amount, (uint64_t)c.t[i].amount);
                assert_int_equal(t.amount_hi, 0);
                assert_true(ks_u128_of(t.user_data_128_hi, t.user_data_128) == uuid_num(SOURCE));
                assert_int_equal(t.user_data_64, BL_SRC_VOID);
                assert_int_equal(t.ledger, 840);
                assert_int_equal(t.code, c.t[i].code);
                assert_int_equal(t.flags, i + 1 < c.n ? LINKED : 0);
                assert_int_equal(t.timeout, 0);
                assert_int_equal(t.pending_id + t.pending_id_hi + t.timestamp, 0);
        }
        /* A chain of one: its only transfer closes it. */
        f = fact_of(BL_SRC_PAYMENT);
        f.amount = 5;
        assert_true(bl_chain_of(&f, &c));
        bl_transfer_of(&c, 0, &t);
        assert_int_equal(t.flags, 0);
}

/* ---- the property: thousands of random facts --------------------------------------------- */

static uint64_t prng_state;

static uint64_t prng_next(void)
{
        uint64_t z = (prng_state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
}

/* An amount in [-AMOUNT_MAX, AMOUNT_MAX], 0 one time in eight; only >= 0 when !signed_ok. */
static int64_t random_amount(bool signed_ok)
{
        uint64_t r = prng_next();
        int64_t v = (int64_t)(r % (uint64_t)AMOUNT_MAX);

        if (r % 8 == 0) {
                return 0;
        }
        return signed_ok && (r >> 63) != 0 ? -v : v;
}

static void random_uuid(char out[BL_UUID_LEN + 1])
{
        ks_u128_to_uuid(ks_u128_of(prng_next(), prng_next()), out);
}

static bl_fact random_fact(char *source, char *cust)
{
        bl_fact f = fact_of((bl_source_type)(1 + prng_next() % 5));

        random_uuid(source);
        random_uuid(cust);
        f.source_id = source;
        f.customer_id = cust;
        f.currency = bl_currency_find(prng_next() % 2 ? "USD" : "BHD");
        f.subtotal = random_amount(true);
        f.tax = random_amount(f.type != BL_SRC_VOID);
        f.total = f.subtotal + f.tax;
        f.balance_applied = f.total > 0 && prng_next() % 3 == 0 ? f.total / 3 : 0;
        f.from_uncollectible = prng_next() % 2;
        f.to_credit = prng_next() % 2;
        f.amount = f.type == BL_SRC_CREDIT_NOTE ? f.subtotal + f.tax : random_amount(false);
        f.refunded = f.type == BL_SRC_CREDIT_NOTE && f.to_credit && f.amount > 0 && prng_next() % 2
                         ? f.amount
                         : 0;
        return f;
}

/* What the fact leaves on each account kind: debits - credits (the chain rules, by account). */
static void expected_net(const bl_fact *f, int64_t net[N_KINDS])
{
        bl_account_kind x;

        memset(net, 0, N_KINDS * sizeof(net[0]));
        switch (f->type) {
        case BL_SRC_INVOICE:
                net[BL_ACCT_RECEIVABLE] = (f->total > 0 ? f->total : 0) - f->balance_applied;
                net[BL_ACCT_REVENUE] = -f->subtotal;
                net[BL_ACCT_TAX_PAYABLE] = -f->tax;
                net[BL_ACCT_CUSTOMER_CREDIT] = f->balance_applied - (f->total < 0 ? -f->total : 0);
                break;
        case BL_SRC_PAYMENT:
                net[BL_ACCT_CASH] = f->amount;
                net[f->from_uncollectible ? BL_ACCT_BAD_DEBT : BL_ACCT_RECEIVABLE] = -f->amount;
                break;
        case BL_SRC_CREDIT_NOTE:
                x = f->to_credit ? BL_ACCT_CUSTOMER_CREDIT : BL_ACCT_RECEIVABLE;
                net[BL_ACCT_REVENUE] = f->subtotal;
                net[BL_ACCT_TAX_PAYABLE] = f->tax;
                net[x] = -f->amount + f->refunded;
                net[BL_ACCT_CASH] = -f->refunded;
                break;
        case BL_SRC_VOID:
                x = f->from_uncollectible ? BL_ACCT_BAD_DEBT : BL_ACCT_RECEIVABLE;
                net[BL_ACCT_REVENUE] = f->subtotal;
                net[BL_ACCT_TAX_PAYABLE] = f->tax;
                net[x] = -f->subtotal - f->tax + f->balance_applied;
                net[BL_ACCT_CUSTOMER_CREDIT] = -f->balance_applied;
                break;
        default:
                net[BL_ACCT_BAD_DEBT] = f->amount;
                net[BL_ACCT_RECEIVABLE] = -f->amount;
                break;
        }
}

static void check_random_chain(const bl_fact *f, const bl_chain *c)
{
        int64_t net[N_KINDS] = {0}, want[N_KINDS], debits = 0, credits = 0;
        Keelson__Ledger__V1__Transfer t;

        assert_true(c->n <= BL_CHAIN_MAX);
        for (size_t i = 0; i < c->n; i++) {
                const bl_transfer *x = &c->t[i];
                assert_true(x->amount > 0);
                assert_true(x->debit != x->credit);
                assert_true(x->code / 10 == 9 + (int)f->type); /* 10x, 11x, ... 14x */
                assert_true(x->id != 0 && x->id != KS_U128_MAX);
                for (size_t j = 0; j < i; j++) {
                        assert_false(x->id == c->t[j].id);
                        assert_true(c->t[j].code < x->code);
                }
                net[x->debit] += x->amount;
                net[x->credit] -= x->amount;
                debits += x->amount;
                credits += x->amount;
                bl_transfer_of(c, i, &t);
                assert_int_equal(t.flags, i + 1 < c->n ? LINKED : 0);
                assert_int_equal(t.ledger, (uint32_t)f->currency->numeric);
        }
        assert_true(debits == credits);
        expected_net(f, want);
        int64_t sum = 0;
        for (int k = 0; k < N_KINDS; k++) {
                assert_true(net[k] == want[k]);
                sum += net[k];
        }
        assert_true(sum == 0); /* the chain balances account by account */
}

static void test_random_facts(void **state)
{
        (void)state;
        prng_state = 0x5eed1e55b111ULL;
        for (int i = 0; i < PROP_CASES; i++) {
                char source[BL_UUID_LEN + 1], cust[BL_UUID_LEN + 1];
                bl_fact f = random_fact(source, cust);
                bl_chain c;
                assert_true(bl_chain_of(&f, &c));
                check_random_chain(&f, &c);
        }
}

/* ---- ks_u128, moved to core for billing ------------------------------------------------------ */

static void test_u128_text(void **state)
{
        char dec[KS_U128_DEC_LEN + 1], uuid[KS_U128_UUID_LEN + 1];
        ks_u128 v = 0;

        (void)state;
        assert_int_equal(ks_u128_to_dec(KS_U128_MAX, dec), 39);
        assert_string_equal(dec, "340282366920938463463374607431768211455");
        assert_int_equal(ks_u128_from_dec(dec, &v), 0);
        assert_true(v == KS_U128_MAX);
        assert_int_equal(ks_u128_from_dec("340282366920938463463374607431768211456", &v), -1);
        assert_int_equal(ks_u128_to_dec(0, dec), 1);
        assert_string_equal(dec, "0");
        assert_int_equal(ks_u128_from_uuid(SOURCE_UP, &v), 0);
        assert_int_equal(ks_u128_to_uuid(v, uuid), 36);
        assert_string_equal(uuid, SOURCE);
        assert_true(ks_u128_hi(v) == 0xc3a1f0de91b24c7dULL &&
                    ks_u128_lo(v) == 0x8e6fa5b4c3d2e1f0ULL);
        assert_int_equal(ks_u128_from_uuid("c3a1f0de91b24c7d8e6fa5b4c3d2e1f0", &v), -1);
        assert_int_equal(ks_u128_from_uuid("c3a1f0de-91b2-4c7d-8e6f-a5b4c3d2e1fg", &v), -1);
}

/* ---- bl_posting_queue against PostgreSQL ---------------------------------------------------- */

static pg_cluster g_pg;
static PGconn *g_conn;

static int db_setup(void **state)
{
        (void)state;
        /* The schema as the service makes it: every migration, in order. */
        return pg_db_start(&g_pg, "billing", ks_service_migrations, ks_service_migrations_n,
                           &g_conn);
}

static int db_teardown(void **state)
{
        (void)state;
        pg_db_stop(&g_pg, g_conn);
        return 0;
}

/* BEGIN as the runtime role acting for TENANT, as bl_tx_run's transactions do. */
static bl_tx tenant_tx(void)
{
        bl_tx tx = {.conn = g_conn, .tenant_id = TENANT, .request_id = "test-postings"};
        pg_db_exec_ok(g_conn, "BEGIN");
        pg_db_exec_ok(g_conn, "SET LOCAL ROLE keelson_billing_rt");
        pg_db_exec_ok(g_conn, "SELECT set_config('keelson.tenant_id', '" TENANT "', true)");
        return tx;
}

static void *unpack_column(PGresult *r, int col, const ProtobufCMessageDescriptor *d)
{
        size_t len = 0;
        unsigned char *b = PQunescapeBytea((const unsigned char *)PQgetvalue(r, 0, col), &len);
        void *m;

        assert_non_null(b);
        m = protobuf_c_message_unpack(d, NULL, len, b);
        PQfreemem(b);
        assert_non_null(m);
        return m;
}

static void test_queue_round_trip(void **state)
{
        bl_fact f = fact_of(BL_SRC_INVOICE);
        bl_tx tx;
        bl_chain c;
        PGresult *r;

        (void)state;
        f.subtotal = 10000;
        f.tax = 800;
        f.total = 10800;
        f.balance_applied = 2500;
        assert_true(bl_chain_of(&f, &c));
        tx = tenant_tx();
        assert_int_equal(bl_posting_queue(&tx, &f), KS_OK);
        /* Queued postings go out as one statement with the transaction's end. */
        assert_int_equal(tx.n_postings, 1);
        assert_int_equal(bl_postings_flush(&tx), KS_OK);
        assert_int_equal(bl_flush(&tx), KS_OK);
        bl_tx_free(&tx);
        pg_db_exec_ok(g_conn, "COMMIT");
        r = PQexec(g_conn, "SELECT tenant_id, source_type, source_id, currency, n_transfers,"
                           " transfers, accounts, EXISTS (SELECT 1 FROM billing.postings_queue q"
                           " WHERE q.id = p.id AND q.tenant_id = p.tenant_id), attempts, failed"
                           " FROM billing.postings p");
        assert_int_equal(PQntuples(r), 1);
        assert_string_equal(PQgetvalue(r, 0, 0), TENANT);
        assert_string_equal(PQgetvalue(r, 0, 1), "1");
        assert_string_equal(PQgetvalue(r, 0, 2), SOURCE);
        assert_string_equal(PQgetvalue(r, 0, 3), "USD");
        assert_string_equal(PQgetvalue(r, 0, 4), "3");
        assert_string_equal(PQgetvalue(r, 0, 7), "t");
        Keelson__Ledger__V1__CreateTransfersRequest *tr =
            unpack_column(r, 5, &keelson__ledger__v1__create_transfers_request__descriptor);
        Keelson__Ledger__V1__CreateAccountsRequest *ar =
            unpack_column(r, 6, &keelson__ledger__v1__create_accounts_request__descriptor);
        assert_int_equal(tr->n_transfers, 3);
        for (size_t i = 0; i < 3; i++) {
                Keelson__Ledger__V1__Transfer want;
                bl_transfer_of(&c, i, &want);
                assert_int_equal(tr->transfers[i]->id, want.id);
                assert_int_equal(tr->transfers[i]->id_hi, want.id_hi);
                assert_int_equal(tr->transfers[i]->debit_account_id, want.debit_account_id);
                assert_int_equal(tr->transfers[i]->credit_account_id_hi, want.credit_account_id_hi);
                assert_int_equal(tr->transfers[i]->amount, want.amount);
                assert_int_equal(tr->transfers[i]->flags, want.flags);
                assert_int_equal(tr->transfers[i]->code, want.code);
                assert_int_equal(tr->transfers[i]->ledger, 840);
        }
        /* receivable, revenue, tax payable, customer credit: each once */
        assert_int_equal(ar->n_accounts, 4);
        for (size_t i = 0; i < ar->n_accounts; i++) {
                bl_account_kind k = (bl_account_kind)ar->accounts[i]->code;
                assert_true(ks_u128_of(ar->accounts[i]->id_hi, ar->accounts[i]->id) ==
                            bl_account_id(k, usd(), CUSTOMER));
                for (size_t j = 0; j < i; j++) {
                        assert_int_not_equal(ar->accounts[j]->code, k);
                }
        }
        protobuf_c_message_free_unpacked(&tr->base, NULL);
        protobuf_c_message_free_unpacked(&ar->base, NULL);
        PQclear(r);

        /* The same source again is a bug: the unique key refuses it when it is sent. */
        tx = tenant_tx();
        assert_int_equal(bl_posting_queue(&tx, &f), KS_OK);
        assert_int_equal(bl_postings_flush(&tx), KS_OK);
        assert_int_not_equal(bl_flush(&tx), KS_OK);
        bl_tx_free(&tx);
        pg_db_exec_ok(g_conn, "ROLLBACK");
        /* A fact that moves nothing queues nothing; another source queues its own row. */
        tx = tenant_tx();
        f = fact_of(BL_SRC_PAYMENT);
        assert_int_equal(bl_posting_queue(&tx, &f), KS_OK);
        f.source_id = OTHER;
        f.amount = 10800;
        assert_int_equal(bl_posting_queue(&tx, &f), KS_OK);
        assert_int_equal(tx.n_postings, 1); /* the payment of 0 moved nothing */
        assert_int_equal(bl_postings_flush(&tx), KS_OK);
        assert_int_equal(bl_flush(&tx), KS_OK);
        bl_tx_free(&tx);
        pg_db_exec_ok(g_conn, "COMMIT");
        r = PQexec(g_conn, "SELECT count(*), count(*) FILTER (WHERE source_type = 2)"
                           " FROM billing.postings");
        assert_string_equal(PQgetvalue(r, 0, 0), "2");
        assert_string_equal(PQgetvalue(r, 0, 1), "1");
        PQclear(r);
}

/* The value of a one-row, one-column query on conn, as a long; fails the test. */
static long conn_long(PGconn *conn, const char *sql)
{
        PGresult *r = PQexec(conn, sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
                fail_msg("%s: %s", sql, PQerrorMessage(conn));
        }
        long v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
        return v;
}

/*
 * Migration 007 on a schema with postings in every state, as a release
 * before it left them: the one not yet sent (posted_ms NULL) is queued, the
 * posted and the failed are not, and a posting inserted afterwards the way
 * that release inserts it is queued by the trigger.
 */
static void test_upgrade_queues_pending_postings(void **state)
{
        char dsn[sizeof(g_pg.dsn) + 64], su_dsn[sizeof(g_pg.dsn) + 32], err[512];
        size_t before = 0;

        (void)state;
        /* Migrated as the services migrate: as the schema's owner, not a superuser. */
        pg_db_exec_ok(g_conn, "CREATE ROLE billing_upgrade_owner LOGIN CREATEROLE");
        pg_db_exec_ok(g_conn, "CREATE DATABASE billing_upgrade OWNER billing_upgrade_owner");
        snprintf(dsn, sizeof(dsn), "%s dbname=billing_upgrade user=billing_upgrade_owner",
                 g_pg.dsn);
        while (before < ks_service_migrations_n &&
               strcmp(ks_service_migrations[before].name, "007_postings_queue.sql") != 0) {
                before++;
        }
        assert_true(before < ks_service_migrations_n);
        assert_int_equal(
            ks_pg_migrate(dsn, "billing", ks_service_migrations, before, err, sizeof(err)), 0);
        /* The rows as the superuser: the tables' row-level security is forced on their owner. */
        snprintf(su_dsn, sizeof(su_dsn), "%s dbname=billing_upgrade", g_pg.dsn);
        PGconn *c = PQconnectdb(su_dsn);
        assert_int_equal(PQstatus(c), CONNECTION_OK);
        const char *insert = "INSERT INTO billing.postings (tenant_id, source_type, source_id,"
                             " currency, n_transfers, transfers, accounts, posted_ms, failed)"
                             " VALUES ('" TENANT "', 1, gen_random_uuid(), 'USD', 1, '\\x00',"
                             " '\\x00', %s, %s) RETURNING id";
        char sql[512];
        long ids[3];
        const char *states[3][2] = {{"NULL", "false"}, {"1", "false"}, {"NULL", "true"}};
        for (int i = 0; i < 3; i++) {
                snprintf(sql, sizeof(sql), insert, states[i][0], states[i][1]);
                ids[i] = conn_long(c, sql);
        }
        assert_int_equal(ks_pg_migrate(dsn, "billing", ks_service_migrations,
                                       ks_service_migrations_n, err, sizeof(err)),
                         0);
        snprintf(sql, sizeof(sql), "SELECT count(*) FROM billing.postings_queue WHERE id = %ld",
                 ids[0]);
        assert_int_equal(conn_long(c, sql), 1);
        assert_int_equal(conn_long(c, "SELECT count(*) FROM billing.postings_queue"), 1);
        snprintf(sql, sizeof(sql), insert, "NULL", "false");
        long later = conn_long(c, sql);
        snprintf(
            sql, sizeof(sql),
            "SELECT count(*) FROM billing.postings_queue WHERE id = %ld AND tenant_id = '" TENANT
            "'",
            later);
        assert_int_equal(conn_long(c, sql), 1);
        assert_int_equal(
            conn_long(c, "SELECT count(*) FROM pg_indexes WHERE indexname = 'postings_queued'"), 0);
        PQfinish(c);
}

int main(void)
{
        const struct CMUnitTest pure[] = {
            cmocka_unit_test(test_invoice),
            cmocka_unit_test(test_invoice_credit),
            cmocka_unit_test(test_invoice_zeros),
            cmocka_unit_test(test_payment),
            cmocka_unit_test(test_credit_note),
            cmocka_unit_test(test_credit_note_refund),
            cmocka_unit_test(test_void),
            cmocka_unit_test(test_uncollectible),
            cmocka_unit_test(test_malformed),
            cmocka_unit_test(test_ids_follow_the_rule),
            cmocka_unit_test(test_ids_keep_their_place),
            cmocka_unit_test(test_ids_of_time_ordered_sources),
            cmocka_unit_test(test_ids_distinct),
            cmocka_unit_test(test_account_ids_distinct),
            cmocka_unit_test(test_accounts),
            cmocka_unit_test(test_transfers),
            cmocka_unit_test(test_random_facts),
            cmocka_unit_test(test_u128_text),
        };
        const struct CMUnitTest db[] = {
            cmocka_unit_test(test_queue_round_trip),
            cmocka_unit_test(test_upgrade_queues_pending_postings),
        };
        int failed = cmocka_run_group_tests_name("billing_postings", pure, NULL, NULL);

        return failed +
               cmocka_run_group_tests_name("billing_postings_queue", db, db_setup, db_teardown);
}
