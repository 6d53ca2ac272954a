/*
 * Unit tests of billing's money (services/billing/money.c): the ISO 4217
 * table and its lookups, checked int64 arithmetic at the edges, the one
 * rounding rule (half away from zero, symmetric for negative values), tax,
 * invoice totals, and a property test of mid-period plan changes: the
 * proration lines charge the exact rational amount within half a minor
 * unit per line.
 *
 * Linked with keelson_billing_lib; money.c is pure, so nothing else of the
 * service comes with it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "model.h"

#define SENTINEL      ((int64_t)0x5a5a5a5a5a5a5a5a) /* what a false return must leave */
#define PROP_SEED     0x9e3779b97f4a7c15ULL
#define PROP_CASES    5000
#define PROP_CHANGES  8
#define LINES_MAX     (2 * PROP_CHANGES + 1)
#define DAY_S         86400
#define PRICE_BIG_MAX 1000000000000000LL /* 10^15 minor units: a price no plan reaches */
#define TOTALS_CASES  2000
#define TOTALS_LINES  12

/* ---- a deterministic PRNG (splitmix64): the same cases on every run ---------- */

static uint64_t prng_state;

static uint64_t prng_next(void)
{
        uint64_t z = (prng_state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
}

/* Uniform enough in [lo, hi] for a test (hi - lo well below 2^64). */
static int64_t prng_range(int64_t lo, int64_t hi)
{
        uint64_t span = (uint64_t)(hi - lo) + 1;
        return lo + (int64_t)(prng_next() % span);
}

/* ---- currencies -------------------------------------------------------------- */

static void expect_currency(const char *code, int exponent, int numeric)
{
        const bl_currency *c = bl_currency_find(code);

        assert_non_null(c);
        assert_string_equal(c->code, code);
        assert_int_equal(c->exponent, exponent);
        assert_int_equal(c->numeric, numeric);
}

static void test_currency_lookups(void **state)
{
        (void)state;
        expect_currency("JPY", 0, 392);
        expect_currency("USD", 2, 840);
        expect_currency("EUR", 2, 978);
        expect_currency("BHD", 3, 48);
        expect_currency("KWD", 3, 414);
        expect_currency("CLF", 4, 990);
        expect_currency("UYW", 4, 927);
        expect_currency("ISK", 0, 352);
        expect_currency("KRW", 0, 410);
        expect_currency("VND", 0, 704);
        expect_currency("XAF", 0, 950);
        expect_currency("XOF", 0, 952);
        expect_currency("XPF", 0, 953);
        expect_currency("TND", 3, 788);
        expect_currency("JOD", 3, 400);
        expect_currency("OMR", 3, 512);
        expect_currency("IQD", 3, 368);
        expect_currency("LYD", 3, 434);
        expect_currency("GBP", 2, 826);
        expect_currency("CHF", 2, 756);
        expect_currency("ALL", 2, 8);   /* "008": a leading zero is not octal here */
        expect_currency("AED", 2, 784); /* the first row */
        expect_currency("ZWG", 2, 924); /* the last row */
        expect_currency("XCG", 2, 532);
}

static void test_currency_refusals(void **state)
{
        static const char *const refused[] = {
            "usd", "Usd", "uSD", "US", "U", "", "USDX", "USD ", " USD", "US1", "U$D",
            /* precious metals, testing and no-currency codes, SDR and other units */
            "XAU", "XAG", "XPT", "XPD", "XTS", "XXX", "XDR", "XSU", "XUA", "XBA", "XBD",
            /* funds codes */
            "BOV", "CHE", "CHW", "COU", "MXV", "USN", "UYI",
            /* withdrawn */
            "HRK", "CUC", "SLL", "ZWL", "ANG", "BGN", "DEM", "FRF", "VEF",
            /* before the first row, after the last, between two */
            "AAA", "ZZZ", "USA"};

        (void)state;
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
                if (bl_currency_find(refused[i]) != NULL) {
                        fail_msg("\"%s\" was accepted", refused[i]);
                }
        }
        assert_null(bl_currency_find(NULL));
        assert_null(bl_currency_find("US\0D")); /* three bytes, but a NUL among them */
}

static void test_currency_table_sorted_unique(void **state)
{
        size_t n = 0;
        const bl_currency *t = bl_currency_table(&n);
        bool numeric_seen[1000] = {false};

        (void)state;
        assert_true(n >= 150 && n <= 200); /* ISO list one has about 180 rows before exclusions */
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(strlen(t[i].code), 3);
                for (int k = 0; k < 3; k++) {
                        assert_true(t[i].code[k] >= 'A' && t[i].code[k] <= 'Z');
                }
                if (i > 0 && strcmp(t[i - 1].code, t[i].code) >= 0) {
                        fail_msg("%s before %s", t[i - 1].code, t[i].code);
                }
                assert_in_range(t[i].exponent, 0, 4);
                assert_in_range(t[i].numeric, 1, 999);
                if (numeric_seen[t[i].numeric]) {
                        fail_msg("numeric %d twice (%s)", t[i].numeric, t[i].code);
                }
                numeric_seen[t[i].numeric] = true;
                /* The binary search finds every row, and that very row. */
                assert_ptr_equal(bl_currency_find(t[i].code), &t[i]);
        }
}

/* Every one of the 26^3 codes: found ones are table rows, and no other is. */
static void test_currency_every_code(void **state)
{
        size_t n = 0, found = 0;
        const bl_currency *t = bl_currency_table(&n);
        char code[4] = {0};

        (void)state;
        for (code[0] = 'A'; code[0] <= 'Z'; code[0]++) {
                for (code[1] = 'A'; code[1] <= 'Z'; code[1]++) {
                        for (code[2] = 'A'; code[2] <= 'Z'; code[2]++) {
                                const bl_currency *c = bl_currency_find(code);
                                if (c != NULL) {
                                        assert_true(c >= t && c < t + n);
                                        assert_string_equal(c->code, code);
                                        found++;
                                }
                        }
                }
        }
        assert_int_equal(found, n);
}

/* ---- checked arithmetic ------------------------------------------------------ */

static void test_add_sub_mul_edges(void **state)
{
        int64_t r = SENTINEL;

        (void)state;
        assert_true(bl_add(INT64_MAX, 0, &r) && r == INT64_MAX);
        assert_true(bl_add(INT64_MAX, INT64_MIN, &r) && r == -1);
        assert_true(bl_add(INT64_MIN, 0, &r) && r == INT64_MIN);
        r = SENTINEL;
        assert_false(bl_add(INT64_MAX, 1, &r));
        assert_false(bl_add(INT64_MIN, -1, &r));
        assert_false(bl_add(INT64_MAX, INT64_MAX, &r));
        assert_false(bl_add(INT64_MIN, INT64_MIN, &r));
        assert_true(r == SENTINEL);

        assert_true(bl_sub(INT64_MIN, 0, &r) && r == INT64_MIN);
        assert_true(bl_sub(-1, INT64_MAX, &r) && r == INT64_MIN);
        assert_true(bl_sub(INT64_MIN, INT64_MIN, &r) && r == 0);
        r = SENTINEL;
        assert_false(bl_sub(INT64_MIN, 1, &r));
        assert_false(bl_sub(0, INT64_MIN, &r)); /* -INT64_MIN does not exist */
        assert_false(bl_sub(INT64_MAX, -1, &r));
        assert_true(r == SENTINEL);

        assert_true(bl_mul(INT64_MAX, 1, &r) && r == INT64_MAX);
        assert_true(bl_mul(INT64_MAX, -1, &r) && r == -INT64_MAX);
        assert_true(bl_mul(INT64_MIN, 1, &r) && r == INT64_MIN);
        assert_true(bl_mul((int64_t)1 << 32, -((int64_t)1 << 31), &r) && r == INT64_MIN);
        assert_true(bl_mul(0, INT64_MIN, &r) && r == 0);
        r = SENTINEL;
        assert_false(bl_mul(INT64_MIN, -1, &r));
        assert_false(bl_mul((int64_t)1 << 32, (int64_t)1 << 31, &r)); /* 2^63 */
        assert_false(bl_mul(INT64_MAX, 2, &r));
        assert_false(bl_mul(INT64_MIN, INT64_MIN, &r));
        assert_true(r == SENTINEL);
}

static int64_t mul_div(int64_t a, int64_t num, int64_t den)
{
        int64_t r = SENTINEL;

        assert_true(bl_mul_div(a, num, den, &r));
        return r;
}

static void test_mul_div_rounds_half_away_from_zero(void **state)
{
        (void)state;
        /* Halves go away from zero, on both sides of it. */
        assert_true(mul_div(5, 1, 2) == 3);
        assert_true(mul_div(-5, 1, 2) == -3);
        assert_true(mul_div(5, -1, 2) == -3);
        assert_true(mul_div(-5, -1, 2) == 3);
        assert_true(mul_div(1, 1, 2) == 1);
        assert_true(mul_div(-1, 1, 2) == -1);
        assert_true(mul_div(3, 1, 2) == 2);
        assert_true(mul_div(-3, 1, 2) == -2);
        /* Below a half toward zero, above it away. */
        assert_true(mul_div(7, 1, 3) == 2);
        assert_true(mul_div(-7, 1, 3) == -2);
        assert_true(mul_div(8, 1, 3) == 3);
        assert_true(mul_div(-8, 1, 3) == -3);
        assert_true(mul_div(1, 1, 3) == 0);
        assert_true(mul_div(-1, 1, 3) == 0);
        assert_true(mul_div(149, 1, 100) == 1);
        assert_true(mul_div(150, 1, 100) == 2);
        assert_true(mul_div(-149, 1, 100) == -1);
        assert_true(mul_div(-150, 1, 100) == -2);
        /* Exact quotients are exact. */
        assert_true(mul_div(6, 1, 3) == 2);
        assert_true(mul_div(-6, 1, 3) == -2);
        assert_true(mul_div(0, 12345, 7) == 0);
        assert_true(mul_div(12345, 0, 7) == 0);
        assert_true(mul_div(1000, 3, 3) == 1000);
}

static void test_mul_div_128_bit_product_and_overflow(void **state)
{
        int64_t r = SENTINEL;
        const int64_t third = 6148914691236517205LL; /* (2^64 - 1) / 3 */

        (void)state;
        /* The product leaves 64 bits, the quotient does not. */
        assert_true(mul_div(INT64_MAX, INT64_MAX, INT64_MAX) == INT64_MAX);
        assert_true(mul_div(INT64_MIN, INT64_MAX, INT64_MAX) == INT64_MIN);
        assert_true(mul_div(INT64_MIN, 1, 1) == INT64_MIN);
        assert_true(mul_div(INT64_MAX, 10000, 10000) == INT64_MAX);
        assert_true(mul_div(4000000000000000000LL, 4, 8) == 2000000000000000000LL);
        /* (2^64 - 1) / 2 = 2^63 - 0.5: rounds to 2^63, one past INT64_MAX... */
        assert_false(bl_mul_div(third, 3, 2, &r));
        /* ...while its negative rounds to -2^63, which is INT64_MIN. */
        assert_true(mul_div(-third, 3, 2) == INT64_MIN);
        assert_false(bl_mul_div(INT64_MAX, 2, 1, &r));
        assert_false(bl_mul_div(INT64_MIN, -1, 1, &r));
        assert_false(bl_mul_div(INT64_MAX, 3, 2, &r));
        /* den <= 0 is refused. */
        assert_false(bl_mul_div(10, 1, 0, &r));
        assert_false(bl_mul_div(10, 1, -1, &r));
        assert_false(bl_mul_div(10, 1, INT64_MIN, &r));
        assert_true(r == SENTINEL);
}

static int64_t tax(int64_t amount, int32_t rate_bp)
{
        int64_t r = SENTINEL;

        assert_true(bl_tax(amount, rate_bp, &r));
        return r;
}

static void test_tax(void **state)
{
        int64_t r = SENTINEL;

        (void)state;
        assert_true(tax(10000, 0) == 0);
        assert_true(tax(-10000, 0) == 0);
        assert_true(tax(10000, 1) == 1);
        assert_true(tax(4999, 1) == 0); /* 0.4999 */
        assert_true(tax(5000, 1) == 1); /* 0.5 */
        assert_true(tax(-5000, 1) == -1);
        assert_true(tax(100, 725) == 7);    /* 7.25 */
        assert_true(tax(200, 725) == 15);   /* 14.5 */
        assert_true(tax(-200, 725) == -15); /* a credit's tax mirrors the charge's */
        assert_true(tax(1999, 725) == 145); /* 144.9275 */
        assert_true(tax(12345, 10000) == 12345);
        assert_true(tax(-12345, 10000) == -12345);
        assert_true(tax(INT64_MAX, 10000) == INT64_MAX);
        assert_true(tax(INT64_MIN, 10000) == INT64_MIN);
        assert_false(bl_tax(100, -1, &r));
        assert_false(bl_tax(100, 10001, &r));
        assert_false(bl_tax(100, INT32_MAX, &r));
        assert_false(bl_tax(100, INT32_MIN, &r));
        assert_true(r == SENTINEL);
}

static void test_prorate_bounds(void **state)
{
        int64_t r = SENTINEL;

        (void)state;
        assert_true(bl_prorate(3000, 0, 30, &r) && r == 0);
        assert_true(bl_prorate(3000, 30, 30, &r) && r == 3000);
        assert_true(bl_prorate(3000, 10, 30, &r) && r == 1000);
        assert_true(bl_prorate(101, 1, 2, &r) && r == 51);
        assert_true(bl_prorate(-101, 1, 2, &r) && r == -51);
        assert_true(bl_prorate(INT64_MAX, 31 * DAY_S - 1, 31 * DAY_S, &r));
        r = SENTINEL;
        assert_false(bl_prorate(3000, 31, 30, &r));
        assert_false(bl_prorate(3000, -1, 30, &r));
        assert_false(bl_prorate(3000, 0, 0, &r));
        assert_false(bl_prorate(3000, 0, -30, &r));
        assert_true(r == SENTINEL);
}

/* ---- totals -------------------------------------------------------------------- */

static void test_totals_worked_example(void **state)
{
        const bl_line_amount lines[] = {
            {1000, true}, /* tax 72.5 -> 73 */
            {-250, true}, /* a credit: -18.125 -> -18 */
            {333, false}, /* not taxable */
            {199, true},  /* 14.4275 -> 14 */
        };
        int64_t line_tax[4] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};
        bl_totals t;

        (void)state;
        assert_true(bl_totals_of(lines, 4, 725, line_tax, &t));
        assert_true(line_tax[0] == 73 && line_tax[1] == -18 && line_tax[2] == 0 &&
                    line_tax[3] == 14);
        assert_true(t.subtotal == 1282);
        assert_true(t.tax == 69);
        assert_true(t.total == 1351);
        /* line_tax is optional; a tax-exempt customer pays none. */
        assert_true(bl_totals_of(lines, 4, 725, NULL, &t) && t.total == 1351);
        assert_true(bl_totals_of(lines, 4, 0, line_tax, &t));
        assert_true(t.subtotal == 1282 && t.tax == 0 && t.total == 1282 && line_tax[0] == 0);
        assert_true(bl_totals_of(NULL, 0, 725, NULL, &t));
        assert_true(t.subtotal == 0 && t.tax == 0 && t.total == 0);
}

static void test_totals_overflow_leaves_everything(void **state)
{
        const bl_line_amount sub_over[] = {{INT64_MAX, false}, {1, false}};
        const bl_line_amount total_over[] = {{INT64_MAX, true}}; /* subtotal fits, + tax does not */
        const bl_line_amount down[] = {{INT64_MIN, false}, {-1, false}};
        const bl_line_amount back[] = {{INT64_MAX, false}, {1, false}, {-1, false}};
        int64_t line_tax[3] = {SENTINEL, SENTINEL, SENTINEL};
        bl_totals t = {SENTINEL, SENTINEL, SENTINEL};

        (void)state;
        assert_false(bl_totals_of(sub_over, 2, 725, line_tax, &t));
        assert_false(bl_totals_of(total_over, 1, 1, line_tax, &t));
        assert_false(bl_totals_of(down, 2, 0, line_tax, &t));
        /* Overflow on the way is refused even when the final sum would fit. */
        assert_false(bl_totals_of(back, 3, 0, line_tax, &t));
        assert_false(bl_totals_of(sub_over, 1, 10001, line_tax, &t)); /* the rate */
        assert_false(bl_totals_of(sub_over, 1, -1, line_tax, &t));
        assert_true(t.subtotal == SENTINEL && t.tax == SENTINEL && t.total == SENTINEL);
        assert_true(line_tax[0] == SENTINEL && line_tax[1] == SENTINEL && line_tax[2] == SENTINEL);
}

/* Random invoices: the lines' amounts and taxes sum exactly to the totals. */
static void test_totals_sum_exactly(void **state)
{
        bl_line_amount lines[TOTALS_LINES];
        int64_t line_tax[TOTALS_LINES];
        bl_totals t;

        (void)state;
        prng_state = PROP_SEED;
        for (int c = 0; c < TOTALS_CASES; c++) {
                size_t n = (size_t)prng_range(0, TOTALS_LINES);
                int32_t rate = (int32_t)prng_range(0, BL_BASIS_POINTS);
                int64_t amounts = 0, taxes = 0;
                for (size_t i = 0; i < n; i++) {
                        lines[i].amount = prng_range(-PRICE_BIG_MAX, PRICE_BIG_MAX);
                        lines[i].taxable = prng_next() % 3 != 0;
                }
                assert_true(bl_totals_of(lines, n, rate, line_tax, &t));
                for (size_t i = 0; i < n; i++) {
                        __int128 exact = (__int128)lines[i].amount * (lines[i].taxable ? rate : 0);
                        __int128 err = (__int128)line_tax[i] * BL_BASIS_POINTS - exact;
                        assert_true(err <= BL_BASIS_POINTS / 2 && err >= -BL_BASIS_POINTS / 2);
                        amounts += lines[i].amount;
                        taxes += line_tax[i];
                }
                assert_true(t.subtotal == amounts);
                assert_true(t.tax == taxes);
                assert_true(t.total == amounts + taxes);
        }
}

/* ---- the proration property -------------------------------------------------- */

/* A price a subscription may hold: a plan's unit amount × a quantity, sometimes huge. */
static int64_t random_price(void)
{
        switch (prng_next() % 4) {
        case 0:
                return prng_range(0, 100);
        case 1:
                return prng_range(0, 100000) * prng_range(1, 1000);
        case 2:
                return prng_range(0, PRICE_BIG_MAX);
        default:
                return 1999 * prng_range(1, 50); /* $19.99 a seat */
        }
}

/* A period: a day, a month (28..31 days), a year, or an odd length down to one second. */
static int64_t random_period_s(void)
{
        switch (prng_next() % 4) {
        case 0:
                return prng_range(28, 31) * DAY_S;
        case 1:
                return prng_range(365, 366) * DAY_S;
        case 2:
                return prng_range(1, 1000);
        default:
                return prng_range(1, 3 * 366 * DAY_S);
        }
}

/* Change times within [0, whole], sorted; ties and both ends happen. */
static void random_changes(int64_t whole, int64_t *at, int k)
{
        for (int i = 0; i < k; i++) {
                uint64_t pick = prng_next() % 8;
                at[i] = pick == 0 ? 0 : pick == 1 ? whole : prng_range(0, whole);
        }
        for (int i = 1; i < k; i++) { /* insertion sort: k <= PROP_CHANGES */
                for (int j = i; j > 0 && at[j - 1] > at[j]; j--) {
                        int64_t x = at[j];
                        at[j] = at[j - 1];
                        at[j - 1] = x;
                }
        }
}

/*
 * One period with k changes: the first price is charged in full at the
 * start; at each change the old price is credited and the new one charged
 * for the rest of the period, each line through bl_prorate and rounded on
 * its own. The sum must be the exact rational amount, sum of price_i ×
 * len_i / whole, within half a minor unit per rounded line.
 */
static void check_one_period(void)
{
        int64_t whole = random_period_s(), at[PROP_CHANGES], price[PROP_CHANGES + 1];
        int k = (int)prng_range(1, PROP_CHANGES), n_lines = 0;
        bl_line_amount lines[LINES_MAX];
        __int128 exact = 0; /* × whole */
        bl_totals t;

        random_changes(whole, at, k);
        for (int i = 0; i <= k; i++) {
                price[i] = random_price();
        }
        lines[n_lines++] = (bl_line_amount){price[0], true};
        for (int i = 0; i < k; i++) {
                int64_t rest = whole - at[i], credit, charge;
                assert_true(bl_prorate(price[i], rest, whole, &credit));
                assert_true(bl_prorate(price[i + 1], rest, whole, &charge));
                lines[n_lines++] = (bl_line_amount){-credit, true};
                lines[n_lines++] = (bl_line_amount){charge, true};
        }
        for (int i = 0; i <= k; i++) {
                int64_t from = i == 0 ? 0 : at[i - 1], to = i == k ? whole : at[i];
                exact += (__int128)price[i] * (to - from);
        }
        assert_true(bl_totals_of(lines, (size_t)n_lines, 0, NULL, &t));
        __int128 err2 = 2 * ((__int128)t.subtotal * whole - exact); /* twice the error × whole */
        __int128 bound = (__int128)(n_lines - 1) * whole; /* half a unit per prorated line */
        if (err2 > bound || err2 < -bound) {
                fail_msg("whole %lld, %d changes: off by more than half a unit per line",
                         (long long)whole, k);
        }
}

static void test_proration_property(void **state)
{
        (void)state;
        prng_state = PROP_SEED;
        for (int c = 0; c < PROP_CASES; c++) {
                check_one_period();
        }
}

/* The same with one change at a known point: 10 days of 30 left at $30 -> $60. */
static void test_proration_worked_example(void **state)
{
        int64_t credit, charge;

        (void)state;
        assert_true(bl_prorate(3000, 10 * DAY_S, 30 * DAY_S, &credit) && credit == 1000);
        assert_true(bl_prorate(6000, 10 * DAY_S, 30 * DAY_S, &charge) && charge == 2000);
        /* 3000 - 1000 + 2000 = 4000 = 3000 × 20/30 + 6000 × 10/30. */
        assert_true(3000 - credit + charge == 4000);
        /* A third of a cent each way: 1001 / 3 = 333.67 -> 334. */
        assert_true(bl_prorate(1001, DAY_S, 3 * DAY_S, &credit) && credit == 334);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_currency_lookups),
            cmocka_unit_test(test_currency_refusals),
            cmocka_unit_test(test_currency_table_sorted_unique),
            cmocka_unit_test(test_currency_every_code),
            cmocka_unit_test(test_add_sub_mul_edges),
            cmocka_unit_test(test_mul_div_rounds_half_away_from_zero),
            cmocka_unit_test(test_mul_div_128_bit_product_and_overflow),
            cmocka_unit_test(test_tax),
            cmocka_unit_test(test_prorate_bounds),
            cmocka_unit_test(test_totals_worked_example),
            cmocka_unit_test(test_totals_overflow_leaves_everything),
            cmocka_unit_test(test_totals_sum_exactly),
            cmocka_unit_test(test_proration_property),
            cmocka_unit_test(test_proration_worked_example),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
