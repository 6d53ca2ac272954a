/*
 * ks_ticker: one background thread that runs a step every interval.
 *
 * The loop every periodic job needs (the ledger's expiry sweeper, auth's
 * housekeeping), written once: the rest between steps is a timed wait on a
 * CLOCK_MONOTONIC condition variable, so a wall-clock jump neither skips
 * nor repeats a step; a step that says more work is due runs again at
 * once; ks_ticker_wake cuts a rest short; ks_ticker_stop ends a rest at
 * once, lets a running step finish, and joins.
 *
 *   static ks_ticker_next sweep(void *arg) { ...; return more ? KS_TICKER_AGAIN : KS_TICKER_REST; }
 *   ks_ticker_options o = {.name = "expiry", .interval_ms = 1000, .step = sweep, .arg = svc};
 *   if ((rc = ks_ticker_start(&t, &o)) != KS_OK) { ... }
 *   ...
 *   ks_ticker_stop(t);
 */
#ifndef KS_TICKER_H
#define KS_TICKER_H

#include <stdbool.h>
#include <stdint.h>

#define KS_TICKER_INTERVAL_MAX_MS (24LL * 3600 * 1000) /* a day: longer is a cron job */
#define KS_TICKER_NAME_MAX        32

typedef struct ks_ticker ks_ticker;

typedef enum ks_ticker_next {
        KS_TICKER_REST,  /* wait one interval (or a wake) before the next step */
        KS_TICKER_AGAIN, /* more is due: the next step at once */
} ks_ticker_next;

/* Runs on the ticker's thread, never twice at once. */
typedef ks_ticker_next (*ks_ticker_step_fn)(void *arg);

typedef struct ks_ticker_options {
        const char *name;    /* in log lines; at most KS_TICKER_NAME_MAX bytes */
        int64_t interval_ms; /* the rest: 1..KS_TICKER_INTERVAL_MAX_MS */
        bool step_at_start;  /* false: the first step comes after one interval */
        ks_ticker_step_fn step;
        void *arg;
} ks_ticker_options;

/*
 * Starts the thread. KS_OK with *out, KS_INVALID_ARGUMENT (options out of
 * bounds), KS_INTERNAL (no thread). The options are copied; arg must outlive
 * the ticker.
 */
int ks_ticker_start(ks_ticker **out, const ks_ticker_options *o)
    __attribute__((warn_unused_result));
/* The next step runs now, or right after the one running. */
void ks_ticker_wake(ks_ticker *t);
/* Steps run so far (completed). */
uint64_t ks_ticker_steps(const ks_ticker *t);
/* Ends the rest, waits for a running step, joins and frees. NULL is ignored. */
void ks_ticker_stop(ks_ticker *t);

#endif
