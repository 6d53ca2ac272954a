/*
 * ks_clock: see ks_clock.h. clock_gettime on these clocks cannot fail on
 * Linux (the clock ids are valid, the pointer is ours), so its result is
 * asserted rather than returned.
 */
#include "ks_clock.h"

#include "ks_assert.h"

/* The coarsest kernel tick there is (HZ=100), if the resolution cannot be read. */
#define COARSE_TICK_FALLBACK_MS 10

static int64_t read_ns(clockid_t id)
{
        struct timespec ts;
        int rv = clock_gettime(id, &ts);
        KS_ASSERT(rv == 0);
        return (int64_t)ts.tv_sec * KS_NS_PER_S + ts.tv_nsec;
}

int64_t ks_mono_ns(void)
{
        return read_ns(CLOCK_MONOTONIC);
}

int64_t ks_mono_ms(void)
{
        return ks_mono_ns() / KS_NS_PER_MS;
}

int64_t ks_wall_ns(void)
{
        return read_ns(CLOCK_REALTIME);
}

int64_t ks_wall_ms(void)
{
        return ks_wall_ns() / KS_NS_PER_MS;
}

int64_t ks_mono_coarse_us(void)
{
        return read_ns(CLOCK_MONOTONIC_COARSE) / KS_NS_PER_US;
}

int64_t ks_mono_coarse_tick_ms(void)
{
        struct timespec res;
        if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) != 0) {
                return COARSE_TICK_FALLBACK_MS;
        }
        return ((int64_t)res.tv_sec * KS_NS_PER_S + res.tv_nsec + KS_NS_PER_MS - 1) / KS_NS_PER_MS;
}

ks_deadline ks_deadline_after_ms(int64_t ms)
{
        int64_t now = ks_mono_ns();
        if (ms <= 0) {
                return (ks_deadline){now};
        }
        if (ms > (INT64_MAX - now) / KS_NS_PER_MS) {
                return ks_deadline_never();
        }
        return (ks_deadline){now + ms * KS_NS_PER_MS};
}

ks_deadline ks_deadline_never(void)
{
        return (ks_deadline){INT64_MAX};
}

ks_deadline ks_deadline_from_unix_ms(int64_t deadline_unix_ms)
{
        if (deadline_unix_ms == 0) {
                return ks_deadline_never();
        }
        return ks_deadline_after_ms(deadline_unix_ms - ks_wall_ms());
}

bool ks_deadline_expired(ks_deadline d)
{
        return d.at_ns != INT64_MAX && ks_mono_ns() >= d.at_ns;
}

int64_t ks_deadline_remaining_ms(ks_deadline d)
{
        if (d.at_ns == INT64_MAX) {
                return INT64_MAX / KS_NS_PER_MS;
        }
        int64_t left_ns = d.at_ns - ks_mono_ns();
        return left_ns <= 0 ? 0 : (left_ns + KS_NS_PER_MS - 1) / KS_NS_PER_MS;
}

struct timespec ks_deadline_timespec(ks_deadline d)
{
        /* time_t is 64 bits here: INT64_MAX ns is year 2262, far enough for "never". */
        KS_ASSERT(d.at_ns >= 0);
        return (struct timespec){.tv_sec = (time_t)(d.at_ns / KS_NS_PER_S),
                                 .tv_nsec = (long)(d.at_ns % KS_NS_PER_S)};
}

int ks_cond_init_monotonic(pthread_cond_t *cv)
{
        pthread_condattr_t attr;
        if (pthread_condattr_init(&attr) != 0) {
                return -1;
        }
        int rv = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        if (rv == 0) {
                rv = pthread_cond_init(cv, &attr);
        }
        pthread_condattr_destroy(&attr);
        return rv == 0 ? 0 : -1;
}
