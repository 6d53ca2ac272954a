/*
 * keelson-billing's pure parts: money, the calendar, prices and the state
 * tables. No I/O, no allocation, no clock: every function takes what it
 * needs and answers from it alone, so each is unit-tested without a
 * database (services/billing/tests/test_billing_*.c), as the ledger's
 * machine.c is. The handlers hold every stored and computed amount to these
 * rules; docs/api.md states them for clients.
 *
 *   money.c     currencies (ISO 4217 and its exponents), checked int64
 *               arithmetic, rounding, tax, proration, invoice totals
 *   calendar.c  civil dates in UTC, intervals, period boundaries from an
 *               anchor with month-end clamping
 *   pricing.c   prices (flat, per unit, graduated tiers) and their amounts
 *   states.c    the subscription and invoice transition tables
 *
 * Amounts are integer minor units of one currency (int64: cents for USD,
 * yen for JPY, fils for BHD). Every function that makes an amount reports
 * overflow instead of wrapping: a false return leaves *out untouched.
 * Times are Unix seconds, UTC.
 */
#ifndef BILLING_MODEL_H
#define BILLING_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- money (money.c) ---------------------------------------------------- */

typedef struct bl_currency {
        char code[4]; /* "USD": ISO 4217 alphabetic code, upper case */
        int exponent; /* minor unit digits: JPY 0, USD 2, BHD 3, CLF 4 */
        int numeric;  /* ISO 4217 numeric code (USD 840): the currency's ledger number */
} bl_currency;

/*
 * The active ISO 4217 currency of a code (exactly three upper-case letters;
 * "usd" is not one); NULL for anything else. Funds codes, precious metals
 * and the testing code (XAU, XTS, XXX...) are not currencies one bills in.
 */
const bl_currency *bl_currency_find(const char *code);

/* The whole table, sorted by code, *n entries: for listings and the unit test. */
const bl_currency *bl_currency_table(size_t *n);

/* Checked arithmetic: false on overflow, *out untouched. */
bool bl_add(int64_t a, int64_t b, int64_t *out);
bool bl_sub(int64_t a, int64_t b, int64_t *out);
bool bl_mul(int64_t a, int64_t b, int64_t *out);

/*
 * a × num / den rounded half away from zero (den > 0; the product is taken
 * in 128 bits, so only the quotient can overflow). The one rounding rule of
 * billing: tax and proration both use it.
 */
bool bl_mul_div(int64_t a, int64_t num, int64_t den, int64_t *out);

#define BL_BASIS_POINTS 10000 /* 100% */

/* The tax on amount at rate_bp basis points (0..BL_BASIS_POINTS): bl_mul_div(amount, rate_bp,
 * 10000). */
bool bl_tax(int64_t amount, int32_t rate_bp, int64_t *out);

/*
 * The part of amount that covers `part` seconds of a period of `whole`
 * seconds (0 <= part <= whole, whole > 0): bl_mul_div(amount, part, whole).
 * A change of plan mid-period credits the old price for the rest of the
 * period and charges the new one for it, each line rounded on its own, so
 * each line is within half a minor unit of the exact rational amount.
 */
bool bl_prorate(int64_t amount, int64_t part, int64_t whole, int64_t *out);

/* One invoice line as totals see it. */
typedef struct bl_line_amount {
        int64_t amount; /* may be negative (a proration credit) */
        bool taxable;
} bl_line_amount;

typedef struct bl_totals {
        int64_t subtotal; /* sum of the lines' amounts */
        int64_t tax;      /* sum of the lines' taxes */
        int64_t total;    /* subtotal + tax */
} bl_totals;

/*
 * The totals of n lines at rate_bp (0 for a tax-exempt customer), each
 * taxable line's tax computed on the line (bl_tax), so that the lines'
 * amounts and taxes sum exactly to the totals. line_tax (n entries, or
 * NULL) receives each line's tax. False on overflow anywhere.
 */
bool bl_totals_of(const bl_line_amount *lines, size_t n, int32_t rate_bp, int64_t *line_tax,
                  bl_totals *out);

/* ---- the calendar (calendar.c) ------------------------------------------ */

typedef enum bl_unit {
        BL_UNIT_DAY = 1,
        BL_UNIT_WEEK = 2,
        BL_UNIT_MONTH = 3,
        BL_UNIT_YEAR = 4,
} bl_unit;

/* A billing interval: count units, at most three years (1095 days, 156 weeks, 36 months, 3 years).
 */
typedef struct bl_interval {
        bl_unit unit;
        int32_t count;
} bl_interval;

bool bl_interval_valid(bl_interval iv);

/* A civil date and time of day in UTC (proleptic Gregorian). */
typedef struct bl_civil {
        int64_t year;
        int month; /* 1..12 */
        int day;   /* 1..31 */
        int second_of_day;
} bl_civil;

bl_civil bl_civil_from_unix(int64_t t);
int64_t bl_unix_from_civil(bl_civil c); /* c must be a valid date */
int bl_days_in_month(int64_t year, int month);

/*
 * The n-th boundary of the periods anchored at `anchor`: anchor + n ×
 * interval (n may be negative), at the anchor's time of day. Months and years
 * count from the anchor's own day, clamped to the month's length and never
 * carried: an anchor of Jan 31 gives Feb 28 (Feb 29 in a leap year), Mar 31,
 * Apr 30; an anchor of Feb 29 gives Feb 28 in the years between leap years.
 * False when the result leaves years 1..9999.
 */
bool bl_boundary(int64_t anchor, bl_interval iv, int64_t n, int64_t *out);

/*
 * The period holding t: the n with boundary(n) <= t < boundary(n + 1),
 * and both boundaries. False as for bl_boundary.
 */
bool bl_period_at(int64_t anchor, bl_interval iv, int64_t t, int64_t *n, int64_t *start,
                  int64_t *end);

/* ---- prices (pricing.c) ------------------------------------------------- */

typedef enum bl_price_model {
        BL_PRICE_FLAT = 1,      /* amount per period, whatever the quantity */
        BL_PRICE_PER_UNIT = 2,  /* amount × the subscription's quantity, per period */
        BL_PRICE_GRADUATED = 3, /* metered: the period's usage through the tiers */
} bl_price_model;

#define BL_TIERS_MAX 16

/*
 * A graduated tier: the units above the previous tier's up_to and at most
 * its own cost unit_amount each, plus flat_amount once when the tier has any
 * unit (Stripe's graduated tiers; Lago's "graduated" model with adjacent
 * ranges). up_to is 0 on the last tier only: no upper bound.
 */
typedef struct bl_tier {
        int64_t up_to;
        int64_t unit_amount;
        int64_t flat_amount;
} bl_tier;

typedef struct bl_price {
        bl_price_model model;
        int64_t amount; /* FLAT: per period; PER_UNIT: per unit; GRADUATED: unused (0) */
        bl_tier tiers[BL_TIERS_MAX];
        size_t n_tiers; /* GRADUATED: 1..BL_TIERS_MAX; else 0 */
} bl_price;

/*
 * Whether a price is well formed: a known model, amounts >= 0, and for
 * GRADUATED 1..BL_TIERS_MAX tiers with strictly increasing positive up_to
 * and a last tier without bound. False with a message for the client in err
 * ("tiers[2].up_to must be above tiers[1].up_to").
 */
bool bl_price_valid(const bl_price *p, char *err, size_t err_len);

/*
 * The amount of one full period: FLAT its amount, PER_UNIT amount ×
 * quantity, GRADUATED the tiers over `quantity` units of usage (250 units
 * over tiers up to 100 at 100, up to 200 at 50, then 10 cost 10000 + 5000 +
 * 500 = 15500). quantity >= 0. False on overflow.
 */
bool bl_price_amount(const bl_price *p, int64_t quantity, int64_t *out);

/* ---- the state tables (states.c) ---------------------------------------- */

typedef enum bl_sub_state {
        BL_SUB_TRIALING = 0,
        BL_SUB_ACTIVE,
        BL_SUB_PAST_DUE,
        BL_SUB_PAUSED,
        BL_SUB_CANCELED,
        BL_SUB_STATES,
} bl_sub_state;

/* What happens to a subscription; each row of the table is one (state, event). */
typedef enum bl_sub_event {
        BL_SE_TRIAL_END = 0,     /* the trial's end came: the first paid period starts */
        BL_SE_RENEW,             /* a period ended and the next one starts */
        BL_SE_CHANGE,            /* plan or quantity changed mid-period */
        BL_SE_PAYMENT_FAILED,    /* an automatic charge of its invoice failed */
        BL_SE_PAYMENT_SUCCEEDED, /* its overdue invoices are paid */
        BL_SE_PAUSE,
        BL_SE_RESUME,
        BL_SE_CANCEL,            /* canceled by the customer or the tenant, now or at period end */
        BL_SE_DUNNING_EXHAUSTED, /* the last retry failed: the invoice is uncollectible */
        BL_SE_DUES_CLEARED,      /* no invoice left in dunning, by a void, write-off or credit */
        BL_SUB_EVENTS,
} bl_sub_event;

/*
 * The subscription transition table, the one place it lives: true and *to
 * for a legal (from, event); false for an illegal one (the handlers answer
 * failed_precondition). canceled is terminal.
 */
bool bl_sub_next(bl_sub_state from, bl_sub_event ev, bl_sub_state *to);

const char *bl_sub_state_name(bl_sub_state s); /* "past_due"; "" out of range */
const char *bl_sub_event_name(bl_sub_event e); /* "payment_failed"; "" out of range */
bool bl_sub_state_parse(const char *name, bl_sub_state *out);

typedef enum bl_inv_state {
        BL_INV_DRAFT = 0,
        BL_INV_OPEN,
        BL_INV_PAID,
        BL_INV_VOID,
        BL_INV_UNCOLLECTIBLE,
        BL_INV_STATES,
} bl_inv_state;

typedef enum bl_inv_event {
        BL_IE_FINALIZE = 0,       /* draft -> open: numbered, lines frozen */
        BL_IE_PAY,                /* open | uncollectible -> paid */
        BL_IE_VOID,               /* open | uncollectible -> void */
        BL_IE_MARK_UNCOLLECTIBLE, /* open -> uncollectible */
        BL_INV_EVENTS,
} bl_inv_event;

/* The invoice transition table (Stripe's): paid and void are terminal. */
bool bl_inv_next(bl_inv_state from, bl_inv_event ev, bl_inv_state *to);

const char *bl_inv_state_name(bl_inv_state s);
const char *bl_inv_event_name(bl_inv_event e);
bool bl_inv_state_parse(const char *name, bl_inv_state *out);

#endif
