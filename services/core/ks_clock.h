/*
 * ks_clock: the clocks and deadlines every module reads.
 *
 * Two clocks, for two questions:
 * - monotonic (CLOCK_MONOTONIC): how long, and when a wait ends. It never
 *   jumps, so a wall-clock step (NTP, an operator) cannot shorten or
 *   stretch a timeout. Every timed wait in keelson runs on it.
 * - wall (CLOCK_REALTIME): what time it is, for what crosses processes or
 *   reaches a client: the deadline_unix_ms of ks_rpc calls, expiry times,
 *   timestamps in rows and logs.
 *
 * A ks_deadline is a point on the monotonic clock. The condition variables
 * that wait for one are made by ks_cond_init_monotonic, so that
 * pthread_cond_timedwait reads the same clock.
 */
#ifndef KS_CLOCK_H
#define KS_CLOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define KS_NS_PER_US 1000LL
#define KS_NS_PER_MS 1000000LL
#define KS_NS_PER_S  1000000000LL

int64_t ks_mono_ns(void);
int64_t ks_mono_ms(void);
int64_t ks_wall_ns(void);
int64_t ks_wall_ms(void);

/*
 * CLOCK_MONOTONIC_COARSE in us: the kernel tick's resolution (1-4 ms) for a
 * few ns a read, where CLOCK_MONOTONIC costs 30-70 ns in a VM. For hot
 * paths whose periods are far longer than a tick (the gateway's buckets).
 */
int64_t ks_mono_coarse_us(void);
/* That clock's resolution in ms, rounded up (what a reading may lag by). */
int64_t ks_mono_coarse_tick_ms(void);

/* The wall clock in ms, under the name ks_rpc's callers have always used. */
static inline int64_t ks_now_ms(void)
{
        return ks_wall_ms();
}

/* A point on the monotonic clock. INT64_MAX: never. */
typedef struct ks_deadline {
        int64_t at_ns;
} ks_deadline;

/* ms from now (negative counts as 0: already due); saturates instead of overflowing. */
ks_deadline ks_deadline_after_ms(int64_t ms);
ks_deadline ks_deadline_never(void);
/*
 * A wall-clock deadline from another process (deadline_unix_ms; 0: none,
 * never) as a point on the monotonic clock: the wall clock is read once,
 * here, so a step of it afterwards cannot shorten or stretch the wait.
 */
ks_deadline ks_deadline_from_unix_ms(int64_t deadline_unix_ms);
bool ks_deadline_expired(ks_deadline d);
/* What is left, rounded up to whole ms (a wait of it never ends early); 0 once expired. */
int64_t ks_deadline_remaining_ms(ks_deadline d);
/* The deadline for pthread_cond_timedwait on a ks_cond_init_monotonic condition variable. */
struct timespec ks_deadline_timespec(ks_deadline d);

/* A condition variable whose timed waits read CLOCK_MONOTONIC. 0 or -1. */
int ks_cond_init_monotonic(pthread_cond_t *cv);

#endif
