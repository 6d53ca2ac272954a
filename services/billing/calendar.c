/*
 * keelson-billing's calendar (model.h): civil dates in UTC, intervals, and
 * period boundaries from an anchor.
 *
 * Civil dates use Howard Hinnant's days_from_civil and civil_from_days
 * ("chrono-Compatible Low-Level Date Algorithms"): proleptic Gregorian,
 * exact for every int64 day count, negative ones included, with no table
 * and no loop.
 *
 * A boundary is computed from the anchor each time (anchor + n × interval),
 * never from the previous boundary: stepping month by month from Jan 31
 * would clamp to Feb 28 and then stay on the 28th, which is the carry
 * model.h rules out.
 *
 * Decisions model.h leaves open:
 *
 * - bl_days_in_month answers 0 for a month outside 1..12, so that a
 *   handler can check a client's date with `day <= bl_days_in_month(y, m)`.
 * - bl_unix_from_civil asserts its precondition (month 1..12, day within
 *   the month, second_of_day 0..86399, a result that fits int64): a date a
 *   client sent is checked before it gets here.
 * - bl_boundary and bl_period_at answer false for an interval that
 *   bl_interval_valid refuses, as they do for a result outside years
 *   1..9999. Only the result is held to 1..9999, not the anchor, and
 *   n × interval is taken in 128 bits: no n overflows, a far one is only
 *   out of range.
 */
#include "model.h"

#include "ks_assert.h"

#define SECONDS_PER_DAY 86400
#define DAYS_PER_WEEK   7
#define MONTHS_PER_YEAR 12

/* 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z: the years a boundary may fall in. */
#define UNIX_YEAR_1_MIN    (-62135596800LL)
#define UNIX_YEAR_9999_MAX 253402300799LL

/* Beyond these the day count times 86400 leaves int64 (asserted in bl_unix_from_civil). */
#define CIVIL_YEAR_ABS_MAX 292277000000LL

#define PERIOD_FIX_STEPS_MAX 4 /* bl_period_at's estimate is off by one step at most */

static int64_t floor_div(int64_t a, int64_t b)
{
        int64_t q = a / b;

        return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* Days since 1970-01-01 of y-m-d (Hinnant's days_from_civil); |y| <= CIVIL_YEAR_ABS_MAX. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
        y -= m <= 2;
        int64_t era = floor_div(y, 400);
        int64_t yoe = y - era * 400;                                   /* [0, 399] */
        int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* [0, 365] */
        int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;           /* [0, 146096] */

        return era * 146097 + doe - 719468;
}

/* The civil date of a day count since 1970-01-01 (Hinnant's civil_from_days). */
static bl_civil civil_from_days(int64_t z)
{
        z += 719468;
        int64_t era = floor_div(z, 146097);
        int64_t doe = z - era * 146097;                                      /* [0, 146096] */
        int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* [0, 399] */
        int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);               /* [0, 365] */
        int64_t mp = (5 * doy + 2) / 153;                                    /* [0, 11] */
        bl_civil c;

        c.day = (int)(doy - (153 * mp + 2) / 5 + 1);
        c.month = (int)(mp < 10 ? mp + 3 : mp - 9);
        c.year = yoe + era * 400 + (c.month <= 2);
        c.second_of_day = 0;
        return c;
}

bl_civil bl_civil_from_unix(int64_t t)
{
        /*
         * Floor, not truncation: one second before 1970 is 1969-12-31T23:59:59.
         * The remainder is taken with %, not as t - days × 86400, which
         * overflows for the first day of int64.
         */
        int64_t sod = t % SECONDS_PER_DAY;
        int64_t days = t / SECONDS_PER_DAY - (sod < 0);
        bl_civil c = civil_from_days(days);

        c.second_of_day = (int)(sod < 0 ? sod + SECONDS_PER_DAY : sod);
        return c;
}

static bool is_leap(int64_t y)
{
        return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

int bl_days_in_month(int64_t year, int month)
{
        static const int days[MONTHS_PER_YEAR] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

        if (month < 1 || month > MONTHS_PER_YEAR) {
                return 0;
        }
        return month == 2 && is_leap(year) ? 29 : days[month - 1];
}

int64_t bl_unix_from_civil(bl_civil c)
{
        int64_t t;

        KS_ASSERT(c.year >= -CIVIL_YEAR_ABS_MAX && c.year <= CIVIL_YEAR_ABS_MAX);
        KS_ASSERT(c.month >= 1 && c.month <= MONTHS_PER_YEAR);
        KS_ASSERT(c.day >= 1 && c.day <= bl_days_in_month(c.year, c.month));
        KS_ASSERT(c.second_of_day >= 0 && c.second_of_day < SECONDS_PER_DAY);
        bool ok = !__builtin_mul_overflow(days_from_civil(c.year, c.month, c.day),
                                          (int64_t)SECONDS_PER_DAY, &t) &&
                  !__builtin_add_overflow(t, (int64_t)c.second_of_day, &t);
        KS_ASSERT(ok);
        return t;
}

bool bl_interval_valid(bl_interval iv)
{
        switch (iv.unit) {
        case BL_UNIT_DAY:
                return iv.count >= 1 && iv.count <= 1095;
        case BL_UNIT_WEEK:
                return iv.count >= 1 && iv.count <= 156;
        case BL_UNIT_MONTH:
                return iv.count >= 1 && iv.count <= 36;
        case BL_UNIT_YEAR:
                return iv.count >= 1 && iv.count <= 3;
        }
        return false;
}

/* anchor + n × seconds, exactly: days and weeks have no calendar in them. */
static bool boundary_fixed(int64_t anchor, int64_t seconds, int64_t n, int64_t *out)
{
        /* |n × seconds| < 2^63 × 2^27: 128 bits hold it, so only the range can refuse. */
        __int128 t = (__int128)anchor + (__int128)n * seconds;

        if (t < UNIX_YEAR_1_MIN || t > UNIX_YEAR_9999_MAX) {
                return false;
        }
        *out = (int64_t)t;
        return true;
}

/* The anchor moved n × step_months months: its own day, clamped to the month's length. */
static bool boundary_months(int64_t anchor, int64_t step_months, int64_t n, int64_t *out)
{
        bl_civil a = bl_civil_from_unix(anchor);
        /* Months since January of year 0, in 128 bits: no n can overflow it. */
        __int128 index =
            (__int128)a.year * MONTHS_PER_YEAR + (a.month - 1) + (__int128)n * step_months;
        __int128 year = index / MONTHS_PER_YEAR - (index % MONTHS_PER_YEAR < 0); /* floor */

        if (year < 1 || year > 9999) {
                return false;
        }
        bl_civil b = {.year = (int64_t)year,
                      .month = (int)(index - year * MONTHS_PER_YEAR) + 1,
                      .second_of_day = a.second_of_day};
        int dim = bl_days_in_month(b.year, b.month);
        b.day = a.day < dim ? a.day : dim;
        *out = bl_unix_from_civil(b);
        return true;
}

bool bl_boundary(int64_t anchor, bl_interval iv, int64_t n, int64_t *out)
{
        if (!bl_interval_valid(iv)) {
                return false;
        }
        switch (iv.unit) {
        case BL_UNIT_DAY:
                return boundary_fixed(anchor, (int64_t)iv.count * SECONDS_PER_DAY, n, out);
        case BL_UNIT_WEEK:
                return boundary_fixed(anchor, (int64_t)iv.count * DAYS_PER_WEEK * SECONDS_PER_DAY,
                                      n, out);
        case BL_UNIT_MONTH:
                return boundary_months(anchor, iv.count, n, out);
        case BL_UNIT_YEAR:
                return boundary_months(anchor, (int64_t)iv.count * MONTHS_PER_YEAR, n, out);
        }
        return false;
}

/*
 * A first guess of the period holding t, at most one too high: the exact
 * quotient for days and weeks; for months and years the whole steps
 * between the anchor's month and t's, which is one too many when t sits
 * before the anchor's day and time within its month.
 */
static int64_t period_estimate(int64_t anchor, bl_interval iv, int64_t t)
{
        if (iv.unit == BL_UNIT_DAY || iv.unit == BL_UNIT_WEEK) {
                int64_t days =
                    iv.unit == BL_UNIT_DAY ? iv.count : (int64_t)iv.count * DAYS_PER_WEEK;
                __int128 step = (__int128)days * SECONDS_PER_DAY;
                __int128 diff = (__int128)t - anchor; /* any two int64: no overflow in 128 bits */
                __int128 q = diff / step;
                /* |diff| <= 2^64 and step >= 86400: the floor fits int64. */
                return (int64_t)(diff % step < 0 ? q - 1 : q);
        }
        bl_civil a = bl_civil_from_unix(anchor), c = bl_civil_from_unix(t);
        int64_t months = iv.unit == BL_UNIT_MONTH ? iv.count : (int64_t)iv.count * MONTHS_PER_YEAR;
        return floor_div((c.year - a.year) * MONTHS_PER_YEAR + (c.month - a.month), months);
}

bool bl_period_at(int64_t anchor, bl_interval iv, int64_t t, int64_t *n, int64_t *start,
                  int64_t *end)
{
        int64_t k, lo, hi;

        /* A t outside years 1..9999 has a boundary outside them on one side. */
        if (!bl_interval_valid(iv) || t < UNIX_YEAR_1_MIN || t > UNIX_YEAR_9999_MAX) {
                return false;
        }
        k = period_estimate(anchor, iv, t);
        /*
         * Boundaries rise strictly with n, so a step or two fixes the guess.
         * The lower one is checked first: near year 9999, boundary(k + 1)
         * of a guess one too high may not exist while the answer does.
         */
        for (int step = 0;; step++) {
                KS_ASSERT(step < PERIOD_FIX_STEPS_MAX);
                if (!bl_boundary(anchor, iv, k, &lo)) {
                        return false;
                }
                if (t < lo) {
                        k--;
                        continue;
                }
                if (!bl_boundary(anchor, iv, k + 1, &hi)) {
                        return false;
                }
                if (t < hi) {
                        break;
                }
                k++;
        }
        *n = k;
        *start = lo;
        *end = hi;
        return true;
}
