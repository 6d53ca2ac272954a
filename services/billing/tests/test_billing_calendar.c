/*
 * Unit tests of billing's calendar (services/billing/calendar.c): civil
 * dates to and from Unix seconds (every day of several years, leap days,
 * negative times, years 1 and 9999), month lengths, interval bounds, and
 * period boundaries: month-end clamping without carry from Jan 31 and
 * Feb 29 anchors, counts above one, negative n, weeks and days, the time of
 * day kept, out-of-range refusals, and bl_period_at against bl_boundary
 * for thousands of random instants.
 *
 * Expected dates are written out by hand here, and Unix times of known
 * dates come from an independent implementation (Python's
 * calendar.timegm), so the test does not check the code against itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <signal.h>
#include <sys/wait.h>

#include "child.h"
#include "model.h"

#define DAY_S          86400
#define WEEK_S         (7 * DAY_S)
#define SENTINEL       ((int64_t)0x5a5a5a5a5a5a5a5a)
#define PROP_SEED      0x2545f4914f6cdd1dULL
#define PERIOD_CASES   20000
#define UNIX_1900      (-2208988800LL)
#define UNIX_2300      10413792000LL
#define UNIX_YEAR_1    (-62135596800LL) /* 0001-01-01T00:00:00Z */
#define UNIX_YEAR_9999 253370764800LL   /* 9999-01-01T00:00:00Z */
#define UNIX_LAST      253402300799LL   /* 9999-12-31T23:59:59Z */

static uint64_t prng_state;

static uint64_t prng_next(void)
{
        uint64_t z = (prng_state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
}

static int64_t prng_range(int64_t lo, int64_t hi)
{
        uint64_t span = (uint64_t)(hi - lo) + 1;
        return lo + (int64_t)(prng_next() % span);
}

static int64_t unix_of(int64_t y, int m, int d, int sod)
{
        return bl_unix_from_civil(
            (bl_civil){.year = y, .month = m, .day = d, .second_of_day = sod});
}

static void expect_civil(int64_t t, int64_t y, int m, int d, int sod)
{
        bl_civil c = bl_civil_from_unix(t);

        if (c.year != y || c.month != m || c.day != d || c.second_of_day != sod) {
                fail_msg("%lld: got %lld-%02d-%02d+%d, want %lld-%02d-%02d+%d", (long long)t,
                         (long long)c.year, c.month, c.day, c.second_of_day, (long long)y, m, d,
                         sod);
        }
}

/* ---- civil dates -------------------------------------------------------------- */

static void test_civil_known_instants(void **state)
{
        /* Jan 1 of each year, from Python's calendar.timegm. */
        static const struct {
                int64_t year, unix;
        } jan1[] = {
            {1, -62135596800LL},   {2, -62104060800LL},    {399, -49575974400LL},
            {400, -49544438400LL}, {1582, -12244089600LL}, {1600, -11676096000LL},
            {1900, -2208988800LL}, {1969, -31536000LL},    {1970, 0},
            {2000, 946684800LL},   {2024, 1704067200LL},   {2100, 4102444800LL},
            {2400, 13569465600LL}, {9998, 253339228800LL}, {9999, 253370764800LL},
        };

        (void)state;
        for (size_t i = 0; i < sizeof(jan1) / sizeof(jan1[0]); i++) {
                expect_civil(jan1[i].unix, jan1[i].year, 1, 1, 0);
                assert_true(unix_of(jan1[i].year, 1, 1, 0) == jan1[i].unix);
        }
        expect_civil(-1, 1969, 12, 31, DAY_S - 1);
        expect_civil(951782400LL, 2000, 2, 29, 0);
        expect_civil(13574563200LL, 2400, 2, 29, 0);
        expect_civil(4107542400LL, 2100, 3, 1, 0); /* 2100 has no Feb 29 */
        expect_civil(4107542400LL - 1, 2100, 2, 28, DAY_S - 1);
        expect_civil(UNIX_LAST, 9999, 12, 31, DAY_S - 1);
        expect_civil(UNIX_YEAR_1 - 1, 0, 12, 31, DAY_S - 1); /* year 0 exists: 1 BC */
        assert_true(unix_of(9999, 12, 31, DAY_S - 1) == UNIX_LAST);
        /* Year 0 is a leap year in the proleptic Gregorian calendar. */
        assert_true(unix_of(0, 3, 1, 0) - unix_of(0, 2, 28, 0) == 2 * DAY_S);
        /* The whole int64 range converts (no overflow on the way). */
        bl_civil lo = bl_civil_from_unix(INT64_MIN), hi = bl_civil_from_unix(INT64_MAX);
        assert_true(lo.year < -292000000000LL && hi.year > 292000000000LL);
        assert_in_range(lo.second_of_day, 0, DAY_S - 1);
        assert_in_range(hi.second_of_day, 0, DAY_S - 1);
}

/* Walks every day of [y0, y1] with a hand-made calendar, checking both ways. */
static void walk_days(int64_t y0, int64_t y1)
{
        static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        int64_t t = unix_of(y0, 1, 1, 0);

        for (int64_t y = y0; y <= y1; y++) {
                bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
                for (int m = 1; m <= 12; m++) {
                        int dim = mdays[m - 1] + (m == 2 && leap);
                        assert_int_equal(bl_days_in_month(y, m), dim);
                        for (int d = 1; d <= dim; d++) {
                                int sod = (int)((uint64_t)(t / DAY_S + d) * 7919 % DAY_S);
                                expect_civil(t + sod, y, m, d, sod);
                                assert_true(unix_of(y, m, d, sod) == t + sod);
                                t += DAY_S;
                        }
                }
        }
}

static void test_civil_every_day(void **state)
{
        (void)state;
        walk_days(2024, 2028); /* Feb 29 2024 and 2028, and the three years without */
        walk_days(1968, 1971); /* across 0: negative times */
        walk_days(1, 4);
        walk_days(1899, 1901);
        walk_days(1999, 2001);
        walk_days(2099, 2101);
        walk_days(2399, 2401);
        walk_days(9996, 9999);
        walk_days(-401, -399); /* before year 1 too, as Hinnant's algorithms allow */
}

static void test_days_in_month(void **state)
{
        (void)state;
        assert_int_equal(bl_days_in_month(2023, 2), 28);
        assert_int_equal(bl_days_in_month(2024, 2), 29);
        assert_int_equal(bl_days_in_month(1900, 2), 28);
        assert_int_equal(bl_days_in_month(2000, 2), 29);
        assert_int_equal(bl_days_in_month(2100, 2), 28);
        assert_int_equal(bl_days_in_month(2400, 2), 29);
        assert_int_equal(bl_days_in_month(0, 2), 29);
        assert_int_equal(bl_days_in_month(-100, 2), 28);
        assert_int_equal(bl_days_in_month(-400, 2), 29);
        assert_int_equal(bl_days_in_month(-1, 2), 28);
        assert_int_equal(bl_days_in_month(2024, 4), 30);
        assert_int_equal(bl_days_in_month(2024, 12), 31);
        /* Out of range: 0, so `day <= days_in_month` refuses any day. */
        assert_int_equal(bl_days_in_month(2024, 0), 0);
        assert_int_equal(bl_days_in_month(2024, 13), 0);
        assert_int_equal(bl_days_in_month(2024, -1), 0);
}

static bl_civil bad_date;

static void convert_bad_date(void)
{
        (void)bl_unix_from_civil(bad_date);
}

/* An invalid date is a programming error (handlers check what clients send): it aborts. */
static void test_unix_from_bad_civil_asserts(void **state)
{
        const bl_civil bad[] = {
            {2023, 2, 29, 0}, {2024, 4, 31, 0}, {2024, 13, 1, 0},    {2024, 0, 1, 0},
            {2024, 1, 0, 0},  {2024, 1, 1, -1}, {2024, 1, 1, DAY_S},
        };
        char log[1024];
        int status = 0;

        (void)state;
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                bad_date = bad[i];
                assert_int_equal(run_child(convert_bad_date, log, sizeof(log), &status), 0);
                assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
                assert_non_null(strstr(log, "assertion failed"));
        }
}

/* ---- intervals ------------------------------------------------------------------ */

static void test_interval_valid_bounds(void **state)
{
        static const struct {
                bl_unit unit;
                int32_t max;
        } units[] = {
            {BL_UNIT_DAY, 1095}, {BL_UNIT_WEEK, 156}, {BL_UNIT_MONTH, 36}, {BL_UNIT_YEAR, 3}};

        (void)state;
        for (size_t i = 0; i < 4; i++) {
                assert_false(bl_interval_valid((bl_interval){units[i].unit, INT32_MIN}));
                assert_false(bl_interval_valid((bl_interval){units[i].unit, -1}));
                assert_false(bl_interval_valid((bl_interval){units[i].unit, 0}));
                assert_true(bl_interval_valid((bl_interval){units[i].unit, 1}));
                assert_true(bl_interval_valid((bl_interval){units[i].unit, units[i].max}));
                assert_false(bl_interval_valid((bl_interval){units[i].unit, units[i].max + 1}));
                assert_false(bl_interval_valid((bl_interval){units[i].unit, INT32_MAX}));
        }
        assert_false(bl_interval_valid((bl_interval){(bl_unit)0, 1}));
        assert_false(bl_interval_valid((bl_interval){(bl_unit)5, 1}));
}

/* ---- boundaries ------------------------------------------------------------------ */

static void expect_boundary(int64_t anchor, bl_interval iv, int64_t n, int64_t y, int m, int d)
{
        int64_t b = SENTINEL;
        int sod = bl_civil_from_unix(anchor).second_of_day;

        if (!bl_boundary(anchor, iv, n, &b)) {
                fail_msg("boundary %lld refused", (long long)n);
        }
        expect_civil(b, y, m, d, sod); /* the anchor's time of day, kept */
}

/* Jan 31 2024 12:34:56, monthly, for four years: each month's last day, never carried. */
static void test_month_end_anchor_four_years(void **state)
{
        static const int last_day[4][12] = {
            {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}, /* 2024 */
            {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}, /* 2025 */
            {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}, /* 2026 */
            {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}, /* 2027 */
        };
        const int64_t anchor = 1706704496LL; /* 2024-01-31T12:34:56Z (timegm) */
        const bl_interval monthly = {BL_UNIT_MONTH, 1};
        int64_t b = 0;

        (void)state;
        for (int n = 0; n < 48; n++) {
                expect_boundary(anchor, monthly, n, 2024 + n / 12, n % 12 + 1,
                                last_day[n / 12][n % 12]);
        }
        assert_true(bl_boundary(anchor, monthly, 1, &b) && b == 1709210096LL); /* Feb 29 (timegm) */
        expect_boundary(anchor, monthly, 48, 2028, 1, 31);
        expect_boundary(anchor, monthly, 49, 2028, 2, 29);
        /* Backwards too. */
        expect_boundary(anchor, monthly, -1, 2023, 12, 31);
        expect_boundary(anchor, monthly, -2, 2023, 11, 30);
        expect_boundary(anchor, monthly, -11, 2023, 2, 28);
        expect_boundary(anchor, monthly, -13, 2022, 12, 31);
        expect_boundary(anchor, monthly, -47, 2020, 2, 29);
}

static void test_month_anchor_on_29th_and_30th(void **state)
{
        const bl_interval monthly = {BL_UNIT_MONTH, 1};
        const int64_t feb29 = 1709164800LL;        /* 2024-02-29T00:00:00Z */
        const int64_t jan30 = 1706572800LL + 3600; /* 2024-01-30T01:00:00Z */

        (void)state;
        expect_boundary(feb29, monthly, 1, 2024, 3, 29); /* its own day, not the month's end */
        expect_boundary(feb29, monthly, 12, 2025, 2, 28);
        expect_boundary(feb29, monthly, 13, 2025, 3, 29);
        expect_boundary(jan30, monthly, 1, 2024, 2, 29);
        expect_boundary(jan30, monthly, 2, 2024, 3, 30);
        expect_boundary(jan30, monthly, 13, 2025, 2, 28);
        /* Days every month has stay as they are: the 28th is not moved to a Feb 29. */
        expect_boundary(jan30 - 2 * DAY_S, monthly, 1, 2024, 2, 28);
        expect_boundary(jan30 - 15 * DAY_S, monthly, 1, 2024, 2, 15);
        expect_boundary(jan30 - 15 * DAY_S, monthly, 13, 2025, 2, 15);
}

static void test_feb29_yearly_anchor(void **state)
{
        const int64_t anchor = 1709164800LL + 45296; /* 2024-02-29T12:34:56Z */
        const bl_interval yearly = {BL_UNIT_YEAR, 1};

        (void)state;
        expect_boundary(anchor, yearly, 0, 2024, 2, 29);
        expect_boundary(anchor, yearly, 1, 2025, 2, 28);
        expect_boundary(anchor, yearly, 2, 2026, 2, 28);
        expect_boundary(anchor, yearly, 3, 2027, 2, 28);
        expect_boundary(anchor, yearly, 4, 2028, 2, 29); /* back on the 29th */
        expect_boundary(anchor, yearly, 8, 2032, 2, 29);
        expect_boundary(anchor, yearly, -1, 2023, 2, 28);
        expect_boundary(anchor, yearly, -4, 2020, 2, 29);
        expect_boundary(anchor, yearly, 76, 2100, 2, 28); /* 2100 is not a leap year */
        expect_boundary(anchor, yearly, 376, 2400, 2, 29);
        expect_boundary(anchor, (bl_interval){BL_UNIT_YEAR, 2}, 1, 2026, 2, 28);
        expect_boundary(anchor, (bl_interval){BL_UNIT_YEAR, 2}, 2, 2028, 2, 29);
        expect_boundary(anchor, (bl_interval){BL_UNIT_YEAR, 3}, 1, 2027, 2, 28);
}

/* Quarterly from Nov 30: n × 3 months after the anchor, each clamped on its own. */
static void test_quarterly_from_nov30(void **state)
{
        const int64_t anchor = 1701331200LL; /* 2023-11-30T08:00:00Z */
        const bl_interval quarterly = {BL_UNIT_MONTH, 3};

        (void)state;
        expect_boundary(anchor, quarterly, 1, 2024, 2, 29);
        expect_boundary(anchor, quarterly, 2, 2024, 5, 30);
        expect_boundary(anchor, quarterly, 3, 2024, 8, 30);
        expect_boundary(anchor, quarterly, 4, 2024, 11, 30);
        expect_boundary(anchor, quarterly, 5, 2025, 2, 28);
        expect_boundary(anchor, quarterly, -1, 2023, 8, 30);
        expect_boundary(anchor, quarterly, -2, 2023, 5, 30);
        expect_boundary(anchor, quarterly, -3, 2023, 2, 28);
        expect_boundary(anchor, (bl_interval){BL_UNIT_MONTH, 36}, 1, 2026, 11, 30);
        expect_boundary(anchor, (bl_interval){BL_UNIT_MONTH, 6}, 1, 2024, 5, 30);
}

static void test_weeks_and_days_are_exact(void **state)
{
        const int64_t anchor = 1709164800LL + 3723; /* 2024-02-29T01:02:03Z */
        int64_t b;

        (void)state;
        for (int64_t n = -60; n <= 60; n++) {
                assert_true(bl_boundary(anchor, (bl_interval){BL_UNIT_DAY, 1}, n, &b));
                assert_true(b == anchor + n * DAY_S);
                assert_true(bl_boundary(anchor, (bl_interval){BL_UNIT_DAY, 3}, n, &b));
                assert_true(b == anchor + n * 3 * DAY_S);
                assert_true(bl_boundary(anchor, (bl_interval){BL_UNIT_WEEK, 1}, n, &b));
                assert_true(b == anchor + n * WEEK_S);
                assert_true(bl_boundary(anchor, (bl_interval){BL_UNIT_WEEK, 2}, n, &b));
                assert_true(b == anchor + n * 2 * WEEK_S);
        }
        assert_true(bl_boundary(anchor, (bl_interval){BL_UNIT_DAY, 1095}, 2, &b));
        assert_true(b == anchor + 2 * 1095 * (int64_t)DAY_S);
        expect_boundary(anchor, (bl_interval){BL_UNIT_DAY, 1}, 1, 2024, 3, 1);
        expect_boundary(anchor, (bl_interval){BL_UNIT_WEEK, 1}, 1, 2024, 3, 7);
}

static void test_boundary_out_of_range(void **state)
{
        const bl_interval monthly = {BL_UNIT_MONTH, 1}, daily = {BL_UNIT_DAY, 1};
        const int64_t dec15_9999 = unix_of(9999, 12, 15, 0), jan15_1 = unix_of(1, 1, 15, 0);
        int64_t b = SENTINEL;

        (void)state;
        assert_false(bl_boundary(dec15_9999, monthly, 1, &b));
        assert_false(bl_boundary(jan15_1, monthly, -1, &b));
        assert_false(bl_boundary(dec15_9999, daily, 17, &b));
        assert_false(bl_boundary(jan15_1, daily, -15, &b));
        assert_false(bl_boundary(dec15_9999, (bl_interval){BL_UNIT_YEAR, 1}, 1, &b));
        assert_false(bl_boundary(UNIX_LAST + 1, daily, 0, &b)); /* the result itself */
        assert_false(bl_boundary(UNIX_YEAR_1 - 1, daily, 0, &b));
        /* n × interval overflowing is refused, not wrapped. */
        assert_false(bl_boundary(0, monthly, INT64_MAX, &b));
        assert_false(bl_boundary(0, monthly, INT64_MIN, &b));
        assert_false(bl_boundary(0, (bl_interval){BL_UNIT_MONTH, 36}, INT64_MAX / 12, &b));
        assert_false(bl_boundary(0, (bl_interval){BL_UNIT_YEAR, 3}, INT64_MAX / 20, &b));
        assert_false(bl_boundary(0, (bl_interval){BL_UNIT_WEEK, 156}, INT64_MAX / 1000, &b));
        assert_false(bl_boundary(0, daily, INT64_MIN, &b));
        assert_false(bl_boundary(INT64_MAX, daily, 1, &b));
        /* An invalid interval is refused. */
        assert_false(bl_boundary(0, (bl_interval){BL_UNIT_MONTH, 0}, 1, &b));
        assert_false(bl_boundary(0, (bl_interval){(bl_unit)9, 1}, 1, &b));
        assert_true(b == SENTINEL);
        /* The last ones that fit: the very first and last seconds of years 1..9999. */
        assert_true(bl_boundary(UNIX_LAST, daily, 0, &b) && b == UNIX_LAST);
        assert_true(bl_boundary(UNIX_LAST - DAY_S, daily, 1, &b) && b == UNIX_LAST);
        assert_true(bl_boundary(UNIX_YEAR_1, monthly, 0, &b) && b == UNIX_YEAR_1);
        assert_true(bl_boundary(unix_of(9999, 11, 30, DAY_S - 1), monthly, 1, &b));
        expect_civil(b, 9999, 12, 30, DAY_S - 1);
        assert_true(bl_boundary(dec15_9999, daily, 16, &b));
        expect_civil(b, 9999, 12, 31, 0);
        assert_true(bl_boundary(jan15_1, daily, -14, &b) && b == UNIX_YEAR_1);
        /* Only the result is held to years 1..9999: an anchor of year 0 may start in year 1. */
        assert_true(bl_boundary(unix_of(0, 12, 31, 0), daily, 1, &b) && b == UNIX_YEAR_1);
}

/* ---- periods ---------------------------------------------------------------------- */

static bl_interval random_interval(void)
{
        static const int32_t max[5] = {0, 1095, 156, 36, 3};
        bl_unit unit = (bl_unit)prng_range(BL_UNIT_DAY, BL_UNIT_YEAR);
        /* Small counts most of the time, the largest now and then. */
        int32_t count = prng_next() % 4 == 0 ? max[unit] : (int32_t)prng_range(1, 3);

        return (bl_interval){unit, count};
}

/* Anchors on the 28th..31st half of the time: the clamped cases. */
static int64_t random_anchor(void)
{
        int64_t y = prng_range(1971, 2100);
        int m = (int)prng_range(1, 12);
        int dim = bl_days_in_month(y, m);
        int d = prng_next() % 2 ? dim - (int)prng_range(0, 3) : (int)prng_range(1, dim);

        return unix_of(y, m, d, (int)prng_range(0, DAY_S - 1));
}

static void check_period(int64_t anchor, bl_interval iv, int64_t t)
{
        int64_t n = SENTINEL, start = SENTINEL, end = SENTINEL, b0, b1;

        assert_true(bl_period_at(anchor, iv, t, &n, &start, &end));
        assert_true(bl_boundary(anchor, iv, n, &b0));
        assert_true(bl_boundary(anchor, iv, n + 1, &b1));
        if (!(b0 <= t && t < b1 && start == b0 && end == b1)) {
                fail_msg("anchor %lld unit %d count %d t %lld: n %lld [%lld, %lld)",
                         (long long)anchor, iv.unit, iv.count, (long long)t, (long long)n,
                         (long long)start, (long long)end);
        }
}

static void test_period_at_random(void **state)
{
        (void)state;
        prng_state = PROP_SEED;
        for (int c = 0; c < PERIOD_CASES; c++) {
                int64_t anchor = random_anchor();
                bl_interval iv = random_interval();
                int64_t t = prng_range(UNIX_1900, UNIX_2300);
                check_period(anchor, iv, t);
                /* A boundary itself opens its period; the second before closes the previous one. */
                int64_t n = SENTINEL, start, end, b;
                assert_true(bl_boundary(anchor, iv, prng_range(-50, 50), &b));
                assert_true(bl_period_at(anchor, iv, b, &n, &start, &end) && start == b);
                assert_true(bl_period_at(anchor, iv, b - 1, &n, &start, &end) && end == b);
        }
}

static void test_period_at_far_from_anchor(void **state)
{
        const int64_t anchor = 1706704496LL; /* 2024-01-31T12:34:56Z */
        int64_t n, start, end;

        (void)state;
        /* Thousands of periods away: found at once, not by walking. */
        assert_true(
            bl_period_at(anchor, (bl_interval){BL_UNIT_DAY, 1}, UNIX_YEAR_9999, &n, &start, &end));
        assert_true(n > 2900000 && start <= UNIX_YEAR_9999 && UNIX_YEAR_9999 < end);
        assert_true(bl_period_at(anchor, (bl_interval){BL_UNIT_MONTH, 1}, unix_of(1, 2, 15, 0), &n,
                                 &start, &end));
        assert_true(n == -2023 * 12);
        expect_civil(start, 1, 1, 31, 45296);
        expect_civil(end, 1, 2, 28, 45296);
        /* On Jan 31 2124 before 12:34:56 the period is still Dec 31 2123's. */
        assert_true(bl_period_at(anchor, (bl_interval){BL_UNIT_MONTH, 1}, unix_of(2124, 1, 31, 0),
                                 &n, &start, &end));
        assert_true(n == 1199);
        expect_civil(start, 2123, 12, 31, 45296);
        expect_civil(end, 2124, 1, 31, 45296);
        /* Before the anchor: negative n. */
        assert_true(
            bl_period_at(anchor, (bl_interval){BL_UNIT_WEEK, 1}, anchor - 1, &n, &start, &end));
        assert_true(n == -1 && start == anchor - WEEK_S && end == anchor);
}

static void test_period_at_out_of_range(void **state)
{
        const bl_interval monthly = {BL_UNIT_MONTH, 1};
        const int64_t jan31_9999 = unix_of(9999, 1, 31, 0);
        int64_t n = SENTINEL, start = SENTINEL, end = SENTINEL;

        (void)state;
        /* Near the end: the first guess is one too high and its next boundary is past 9999. */
        assert_true(bl_period_at(jan31_9999, monthly, unix_of(9999, 12, 15, 0), &n, &start, &end));
        assert_true(n == 10);
        expect_civil(start, 9999, 11, 30, 0);
        expect_civil(end, 9999, 12, 31, 0);
        /* A period whose end is past 9999 is refused. */
        n = start = end = SENTINEL;
        assert_false(bl_period_at(jan31_9999, monthly, UNIX_LAST, &n, &start, &end));
        assert_false(bl_period_at(0, monthly, UNIX_LAST + 1, &n, &start, &end));
        assert_false(bl_period_at(0, monthly, UNIX_YEAR_1 - 1, &n, &start, &end));
        assert_false(bl_period_at(0, monthly, INT64_MAX, &n, &start, &end));
        assert_false(bl_period_at(0, monthly, INT64_MIN, &n, &start, &end));
        assert_false(bl_period_at(0, (bl_interval){BL_UNIT_DAY, 0}, 0, &n, &start, &end));
        assert_true(n == SENTINEL && start == SENTINEL && end == SENTINEL);
        /* Only the boundaries are held to years 1..9999, not the anchor. */
        assert_true(bl_period_at(INT64_MIN, (bl_interval){BL_UNIT_DAY, 1}, 0, &n, &start, &end));
        assert_true(start <= 0 && 0 < end && end - start == DAY_S);
        /* The first period of year 1 is there. */
        assert_true(bl_period_at(UNIX_YEAR_1, monthly, UNIX_YEAR_1, &n, &start, &end));
        assert_true(n == 0 && start == UNIX_YEAR_1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_civil_known_instants),
            cmocka_unit_test(test_civil_every_day),
            cmocka_unit_test(test_days_in_month),
            cmocka_unit_test(test_unix_from_bad_civil_asserts),
            cmocka_unit_test(test_interval_valid_bounds),
            cmocka_unit_test(test_month_end_anchor_four_years),
            cmocka_unit_test(test_month_anchor_on_29th_and_30th),
            cmocka_unit_test(test_feb29_yearly_anchor),
            cmocka_unit_test(test_quarterly_from_nov30),
            cmocka_unit_test(test_weeks_and_days_are_exact),
            cmocka_unit_test(test_boundary_out_of_range),
            cmocka_unit_test(test_period_at_random),
            cmocka_unit_test(test_period_at_far_from_anchor),
            cmocka_unit_test(test_period_at_out_of_range),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
