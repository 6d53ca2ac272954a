/*
 * Unit tests of billing's prices (services/billing/pricing.c): flat, per
 * unit (with overflow), graduated tiers (Lago's worked example, flat fees
 * only on tiers with units, quantities on and around tier boundaries,
 * quantity 0, a single unbounded tier, overflow), and the message of each
 * rule bl_price_valid holds a price to.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "model.h"

#define SENTINEL ((int64_t)0x5a5a5a5a5a5a5a5a)
#define ERR_MAX  160

static bl_price flat(int64_t amount)
{
        return (bl_price){.model = BL_PRICE_FLAT, .amount = amount};
}

static bl_price per_unit(int64_t amount)
{
        return (bl_price){.model = BL_PRICE_PER_UNIT, .amount = amount};
}

static bl_price graduated(const bl_tier *tiers, size_t n)
{
        bl_price p = {.model = BL_PRICE_GRADUATED, .n_tiers = n};

        memcpy(p.tiers, tiers, n * sizeof(*tiers));
        return p;
}

static int64_t amount_of(const bl_price *p, int64_t quantity)
{
        int64_t out = SENTINEL;

        assert_true(bl_price_amount(p, quantity, &out));
        return out;
}

/* The validator's message, "" when it accepted. */
static const char *error_of(const bl_price *p)
{
        static char err[ERR_MAX];

        strcpy(err, "(unchanged)");
        if (bl_price_valid(p, err, sizeof(err))) {
                return "";
        }
        return err;
}

/* ---- amounts ------------------------------------------------------------------ */

static void test_flat(void **state)
{
        bl_price p = flat(1999);

        (void)state;
        assert_true(amount_of(&p, 0) == 1999); /* whatever the quantity */
        assert_true(amount_of(&p, 1) == 1999);
        assert_true(amount_of(&p, 1000000) == 1999);
        p = flat(0);
        assert_true(amount_of(&p, 5) == 0);
}

static void test_per_unit(void **state)
{
        bl_price p = per_unit(250);
        int64_t out = SENTINEL;

        (void)state;
        assert_true(amount_of(&p, 0) == 0);
        assert_true(amount_of(&p, 1) == 250);
        assert_true(amount_of(&p, 7) == 1750);
        p = per_unit(1);
        assert_true(amount_of(&p, INT64_MAX) == INT64_MAX);
        p = per_unit(INT64_MAX / 2 + 1);
        assert_false(bl_price_amount(&p, 2, &out));
        p = per_unit(3);
        assert_false(bl_price_amount(&p, INT64_MAX / 2, &out));
        assert_false(bl_price_amount(&p, -1, &out)); /* a negative quantity */
        assert_true(out == SENTINEL);
}

/* Lago's example: tiers up to 100 at 100, up to 200 at 50, then at 10. */
static void test_graduated_lago_example(void **state)
{
        const bl_tier tiers[] = {{100, 100, 0}, {200, 50, 0}, {0, 10, 0}};
        bl_price p = graduated(tiers, 3);

        (void)state;
        assert_string_equal(error_of(&p), "");
        assert_true(amount_of(&p, 250) == 15500); /* 100 × 100 + 100 × 50 + 50 × 10 */
        assert_true(amount_of(&p, 0) == 0);
        assert_true(amount_of(&p, 1) == 100);
        assert_true(amount_of(&p, 99) == 9900);
        assert_true(amount_of(&p, 100) == 10000); /* exactly on the first bound */
        assert_true(amount_of(&p, 101) == 10050);
        assert_true(amount_of(&p, 200) == 15000); /* exactly on the second */
        assert_true(amount_of(&p, 201) == 15010);
        assert_true(amount_of(&p, 1000200) == 15000 + 1000000 * 10);
}

static void test_graduated_flat_fees_only_with_units(void **state)
{
        const bl_tier tiers[] = {{10, 0, 500}, {20, 1, 300}, {0, 2, 100}};
        bl_price p = graduated(tiers, 3);

        (void)state;
        assert_true(amount_of(&p, 0) == 0);    /* no unit: not even the first tier's fee */
        assert_true(amount_of(&p, 1) == 500);  /* the first tier's fee */
        assert_true(amount_of(&p, 10) == 500); /* on the bound: the second tier has none */
        assert_true(amount_of(&p, 11) == 500 + 1 + 300);
        assert_true(amount_of(&p, 20) == 500 + 10 + 300);
        assert_true(amount_of(&p, 21) == 500 + 10 + 300 + 2 + 100);
        assert_true(amount_of(&p, 30) == 500 + 10 + 300 + 20 + 100);
}

static void test_graduated_single_unbounded_tier(void **state)
{
        const bl_tier tiers[] = {{0, 3, 50}};
        bl_price p = graduated(tiers, 1);

        (void)state;
        assert_string_equal(error_of(&p), "");
        assert_true(amount_of(&p, 0) == 0);
        assert_true(amount_of(&p, 1) == 53);
        assert_true(amount_of(&p, 1000) == 3050);
}

static void test_graduated_sixteen_tiers(void **state)
{
        bl_tier tiers[BL_TIERS_MAX];
        int64_t want = 0;

        (void)state;
        for (int i = 0; i < BL_TIERS_MAX; i++) {
                tiers[i] = (bl_tier){i + 1 < BL_TIERS_MAX ? 10 * (i + 1) : 0, BL_TIERS_MAX - i, i};
                want += 10 * (BL_TIERS_MAX - i) + i; /* 10 units in each, 10 in the last */
        }
        bl_price p = graduated(tiers, BL_TIERS_MAX);
        assert_string_equal(error_of(&p), "");
        assert_true(amount_of(&p, 10 * BL_TIERS_MAX) == want);
}

static void test_graduated_overflow(void **state)
{
        const bl_tier units[] = {{0, INT64_MAX, 0}};
        const bl_tier fees[] = {{1, 0, INT64_MAX}, {0, 0, 1}};
        const bl_tier sum[] = {{1, INT64_MAX, 0}, {0, 1, 0}};
        bl_price p;
        int64_t out = SENTINEL;

        (void)state;
        p = graduated(units, 1);
        assert_true(amount_of(&p, 1) == INT64_MAX);
        assert_false(bl_price_amount(&p, 2, &out));
        p = graduated(fees, 2);
        assert_true(amount_of(&p, 1) == INT64_MAX);
        assert_false(bl_price_amount(&p, 2, &out)); /* the second tier's fee */
        p = graduated(sum, 2);
        assert_false(bl_price_amount(&p, 2, &out)); /* the running total */
        assert_false(bl_price_amount(&p, -5, &out));
        assert_true(out == SENTINEL);
}

/* ---- validity ----------------------------------------------------------------- */

static void test_valid_prices(void **state)
{
        bl_price p = flat(0);

        (void)state;
        assert_string_equal(error_of(&p), "");
        p = per_unit(INT64_MAX);
        assert_string_equal(error_of(&p), "");
        assert_true(bl_price_valid(&p, NULL, 0)); /* no message wanted */
}

static void test_model_and_amount_rules(void **state)
{
        const bl_tier one[] = {{0, 1, 0}};
        bl_price p = flat(-1);

        (void)state;
        assert_string_equal(error_of(&p), "price.amount must not be negative");
        p = per_unit(INT64_MIN);
        assert_string_equal(error_of(&p), "price.amount must not be negative");
        p = flat(1);
        p.model = (bl_price_model)0;
        assert_string_equal(error_of(&p), "price.model must be PRICE_MODEL_FLAT, "
                                          "PRICE_MODEL_PER_UNIT or PRICE_MODEL_GRADUATED");
        p.model = (bl_price_model)4;
        assert_string_equal(error_of(&p), "price.model must be PRICE_MODEL_FLAT, "
                                          "PRICE_MODEL_PER_UNIT or PRICE_MODEL_GRADUATED");
        p = flat(100);
        p.n_tiers = 1;
        p.tiers[0] = one[0];
        assert_string_equal(
            error_of(&p), "price.tiers must be empty unless price.model is PRICE_MODEL_GRADUATED");
        p.model = BL_PRICE_PER_UNIT;
        assert_string_equal(
            error_of(&p), "price.tiers must be empty unless price.model is PRICE_MODEL_GRADUATED");
        p = graduated(one, 1);
        p.amount = 5;
        assert_string_equal(error_of(&p), "price.amount must be 0 for PRICE_MODEL_GRADUATED (the "
                                          "tiers hold the amounts)");
}

static void test_tier_rules(void **state)
{
        const bl_tier bounded_last[] = {{10, 1, 0}, {20, 1, 0}};
        const bl_tier zero_middle[] = {{0, 1, 0}, {0, 1, 0}};
        const bl_tier negative[] = {{-5, 1, 0}, {0, 1, 0}};
        const bl_tier equal[] = {{100, 1, 0}, {100, 1, 0}, {0, 1, 0}};
        const bl_tier falling[] = {{10, 1, 0}, {20, 1, 0}, {15, 1, 0}, {0, 1, 0}};
        const bl_tier unit_neg[] = {{10, 1, 0}, {0, -1, 0}};
        const bl_tier flat_neg[] = {{10, 1, -1}, {0, 1, 0}};
        bl_tier many[BL_TIERS_MAX + 1];
        bl_price p;

        (void)state;
        p = graduated(bounded_last, 0);
        assert_string_equal(error_of(&p), "price.tiers must hold 1 to 16 tiers");
        for (int i = 0; i < BL_TIERS_MAX + 1; i++) {
                many[i] = (bl_tier){i < BL_TIERS_MAX ? i + 1 : 0, 1, 0};
        }
        p = graduated(many, BL_TIERS_MAX); /* fills the array; then n_tiers says 17 */
        p.n_tiers = BL_TIERS_MAX + 1;
        assert_string_equal(error_of(&p), "price.tiers must hold 1 to 16 tiers");
        p = graduated(bounded_last, 2);
        assert_string_equal(error_of(&p),
                            "price.tiers[1].up_to must be 0 on the last tier (no upper bound)");
        p = graduated(zero_middle, 2);
        assert_string_equal(error_of(&p),
                            "price.tiers[0].up_to must be positive (0 only on the last tier)");
        p = graduated(negative, 2);
        assert_string_equal(error_of(&p),
                            "price.tiers[0].up_to must be positive (0 only on the last tier)");
        p = graduated(equal, 3);
        assert_string_equal(error_of(&p), "price.tiers[1].up_to must be above tiers[0].up_to");
        p = graduated(falling, 4);
        assert_string_equal(error_of(&p), "price.tiers[2].up_to must be above tiers[1].up_to");
        p = graduated(unit_neg, 2);
        assert_string_equal(error_of(&p), "price.tiers[1].unit_amount must not be negative");
        p = graduated(flat_neg, 2);
        assert_string_equal(error_of(&p), "price.tiers[0].flat_amount must not be negative");
}

static void test_message_fits_any_buffer(void **state)
{
        bl_price p = flat(-1);
        char small[8] = "xxxxxxx";

        (void)state;
        assert_false(bl_price_valid(&p, small, sizeof(small)));
        assert_string_equal(small, "price.a"); /* cut, and terminated */
        assert_false(bl_price_valid(&p, small, 0));
        assert_false(bl_price_valid(&p, NULL, 0));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_flat),
            cmocka_unit_test(test_per_unit),
            cmocka_unit_test(test_graduated_lago_example),
            cmocka_unit_test(test_graduated_flat_fees_only_with_units),
            cmocka_unit_test(test_graduated_single_unbounded_tier),
            cmocka_unit_test(test_graduated_sixteen_tiers),
            cmocka_unit_test(test_graduated_overflow),
            cmocka_unit_test(test_valid_prices),
            cmocka_unit_test(test_model_and_amount_rules),
            cmocka_unit_test(test_tier_rules),
            cmocka_unit_test(test_message_fits_any_buffer),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
