/*
 * ks_clock: the clocks agree with the kernel's, deadlines expire when due and
 * not before, remaining time never rounds a wait short, extreme arguments
 * saturate instead of overflowing, and a monotonic condition variable's
 * timed wait ends at its deadline. Waits are bounded generously; nothing
 * asserts how fast the machine is.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "ks_clock.h"

#define HOUR_MS  (3600LL * 1000)
#define SHORT_MS 20

static int64_t kernel_ns(clockid_t id)
{
        struct timespec ts;
        clock_gettime(id, &ts);
        return (int64_t)ts.tv_sec * KS_NS_PER_S + ts.tv_nsec;
}

static void sleep_ms(int ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
}

static void test_clocks_follow_the_kernel(void **state)
{
        (void)state;
        int64_t m0 = kernel_ns(CLOCK_MONOTONIC);
        int64_t mono = ks_mono_ns();
        int64_t m1 = kernel_ns(CLOCK_MONOTONIC);
        assert_true(m0 <= mono && mono <= m1);

        int64_t w0 = kernel_ns(CLOCK_REALTIME);
        int64_t wall = ks_wall_ns();
        int64_t w1 = kernel_ns(CLOCK_REALTIME);
        assert_true(w0 <= wall && wall <= w1);

        /* The ms readings are the ns ones truncated; ks_now_ms is the wall clock. */
        int64_t ms = ks_wall_ms();
        assert_true(ms >= w0 / KS_NS_PER_MS && ms <= kernel_ns(CLOCK_REALTIME) / KS_NS_PER_MS);
        int64_t now = ks_now_ms();
        assert_true(now >= ms && now <= kernel_ns(CLOCK_REALTIME) / KS_NS_PER_MS);
        int64_t mms = ks_mono_ms();
        assert_true(mms >= m1 / KS_NS_PER_MS);

        /* The coarse clock lags the precise one by at most a tick. */
        int64_t tick_ms = ks_mono_coarse_tick_ms();
        assert_true(tick_ms >= 1 && tick_ms <= 1000);
        int64_t coarse_us = ks_mono_coarse_us();
        int64_t precise_us = ks_mono_ns() / KS_NS_PER_US;
        assert_true(coarse_us <= precise_us);
        assert_true(precise_us - coarse_us <= (tick_ms + 1000) * 1000);
}

static void test_monotonic_never_goes_back(void **state)
{
        (void)state;
        int64_t last = ks_mono_ns();
        for (int i = 0; i < 100000; i++) {
                int64_t now = ks_mono_ns();
                assert_true(now >= last);
                last = now;
        }
}

static void test_deadline_expires_when_due(void **state)
{
        (void)state;
        ks_deadline d = ks_deadline_after_ms(SHORT_MS);
        int64_t started = ks_mono_ns();
        assert_false(ks_deadline_expired(d) && ks_mono_ns() - started < SHORT_MS * KS_NS_PER_MS);
        int64_t left = ks_deadline_remaining_ms(d);
        assert_true(left >= 0 && left <= SHORT_MS);
        while (!ks_deadline_expired(d)) {
                assert_true(ks_mono_ns() - started < 60 * KS_NS_PER_S); /* bounded: never hangs */
                sleep_ms(1);
        }
        /* Expired: only once at least SHORT_MS passed, and nothing is left. */
        assert_true(ks_mono_ns() - started >= (SHORT_MS - 1) * KS_NS_PER_MS);
        assert_int_equal(ks_deadline_remaining_ms(d), 0);
}

static void test_remaining_rounds_up(void **state)
{
        (void)state;
        /* 1 ns left is 1 ms, never 0: a poll() on it must not return before the deadline. */
        ks_deadline d = {ks_mono_ns() + 10 * KS_NS_PER_S + 1};
        int64_t left = ks_deadline_remaining_ms(d);
        assert_true(left >= 1 && left <= 10 * 1000 + 1);
        ks_deadline far = ks_deadline_after_ms(HOUR_MS);
        assert_false(ks_deadline_expired(far));
        left = ks_deadline_remaining_ms(far);
        assert_true(left > HOUR_MS - 60 * 1000 && left <= HOUR_MS);
}

static void test_extremes_saturate(void **state)
{
        (void)state;
        /* A zero or negative timeout is due at once. */
        assert_true(ks_deadline_expired(ks_deadline_after_ms(0)));
        assert_true(ks_deadline_expired(ks_deadline_after_ms(-5)));
        assert_int_equal(ks_deadline_remaining_ms(ks_deadline_after_ms(-5)), 0);
        /* A huge one is never, not a wrapped negative. */
        ks_deadline huge = ks_deadline_after_ms(INT64_MAX);
        assert_true(huge.at_ns == ks_deadline_never().at_ns);
        assert_false(ks_deadline_expired(huge));
        assert_true(ks_deadline_remaining_ms(huge) > 100LL * 365 * 24 * HOUR_MS);
        struct timespec ts = ks_deadline_timespec(huge);
        assert_true(ts.tv_sec > 0 && ts.tv_nsec >= 0 && ts.tv_nsec < KS_NS_PER_S);
}

static void test_timespec_matches(void **state)
{
        (void)state;
        ks_deadline d = {5 * KS_NS_PER_S + 123456789};
        struct timespec ts = ks_deadline_timespec(d);
        assert_int_equal(ts.tv_sec, 5);
        assert_int_equal(ts.tv_nsec, 123456789);
}

static void test_monotonic_cond_times_out_at_deadline(void **state)
{
        (void)state;
        pthread_cond_t cv;
        pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        assert_int_equal(ks_cond_init_monotonic(&cv), 0);
        ks_deadline d = ks_deadline_after_ms(SHORT_MS);
        struct timespec until = ks_deadline_timespec(d);
        int rv = 0;
        pthread_mutex_lock(&mu);
        while (rv != ETIMEDOUT) { /* no one signals: only spurious wake-ups end it early */
                rv = pthread_cond_timedwait(&cv, &mu, &until);
                assert_true(rv == 0 || rv == ETIMEDOUT);
        }
        pthread_mutex_unlock(&mu);
        /* Had the wait read the wall clock, a deadline ~uptime seconds in 1970 ends at once. */
        assert_true(ks_deadline_expired(d));
        pthread_cond_destroy(&cv);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_clocks_follow_the_kernel),
            cmocka_unit_test(test_monotonic_never_goes_back),
            cmocka_unit_test(test_deadline_expires_when_due),
            cmocka_unit_test(test_remaining_rounds_up),
            cmocka_unit_test(test_extremes_saturate),
            cmocka_unit_test(test_timespec_matches),
            cmocka_unit_test(test_monotonic_cond_times_out_at_deadline),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
