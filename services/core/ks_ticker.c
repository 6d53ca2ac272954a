/*
 * ks_ticker: see ks_ticker.h.
 *
 * One mutex guards stop and woken; the step runs without it, so wake and
 * stop never wait for a step (stop then waits in pthread_join). A wake that
 * comes during a step is kept in woken and skips the next rest.
 */
#include "ks_ticker.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_clock.h"
#include "ks_code.h"
#include "ks_log.h"

struct ks_ticker {
        ks_ticker_options o;
        char name[KS_TICKER_NAME_MAX + 1];
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv; /* on CLOCK_MONOTONIC */
        bool stop;         /* under mu */
        bool woken;        /* under mu */
        atomic_uint_fast64_t steps;
};

/* Waits, locked, for one interval, a wake or a stop. */
static void rest(ks_ticker *t)
{
        struct timespec until = ks_deadline_timespec(ks_deadline_after_ms(t->o.interval_ms));
        while (!t->stop && !t->woken) {
                int rv = pthread_cond_timedwait(&t->cv, &t->mu, &until);
                if (rv == ETIMEDOUT) {
                        return;
                }
                KS_ASSERT(rv == 0);
        }
}

static void *ticker_main(void *arg)
{
        ks_ticker *t = arg;
        bool again = t->o.step_at_start;

        pthread_mutex_lock(&t->mu);
        while (!t->stop) {
                if (!again && !t->woken) {
                        rest(t);
                        if (t->stop) {
                                break;
                        }
                }
                t->woken = false;
                pthread_mutex_unlock(&t->mu);
                ks_ticker_next next = t->o.step(t->o.arg);
                KS_ASSERT(next == KS_TICKER_REST || next == KS_TICKER_AGAIN);
                again = next == KS_TICKER_AGAIN;
                atomic_fetch_add(&t->steps, 1);
                pthread_mutex_lock(&t->mu);
        }
        pthread_mutex_unlock(&t->mu);
        return NULL;
}

static bool valid_options(const ks_ticker_options *o)
{
        return o != NULL && o->step != NULL && o->interval_ms >= 1 &&
               o->interval_ms <= KS_TICKER_INTERVAL_MAX_MS &&
               (o->name == NULL || strlen(o->name) <= KS_TICKER_NAME_MAX);
}

int ks_ticker_start(ks_ticker **out, const ks_ticker_options *o)
{
        KS_ASSERT(out != NULL);
        *out = NULL;
        if (!valid_options(o)) {
                return KS_INVALID_ARGUMENT;
        }
        ks_ticker *t = calloc(1, sizeof(*t));
        if (t == NULL) {
                return KS_INTERNAL;
        }
        t->o = *o;
        snprintf(t->name, sizeof(t->name), "%s", o->name != NULL ? o->name : "ticker");
        t->o.name = t->name;
        if (pthread_mutex_init(&t->mu, NULL) != 0) {
                free(t);
                return KS_INTERNAL;
        }
        if (ks_cond_init_monotonic(&t->cv) != 0) {
                pthread_mutex_destroy(&t->mu);
                free(t);
                return KS_INTERNAL;
        }
        if (pthread_create(&t->thread, NULL, ticker_main, t) != 0) {
                ks_log_error(NULL, "cannot start a background thread", "{s:s}", "ticker", t->name);
                pthread_cond_destroy(&t->cv);
                pthread_mutex_destroy(&t->mu);
                free(t);
                return KS_INTERNAL;
        }
        *out = t;
        return KS_OK;
}

void ks_ticker_wake(ks_ticker *t)
{
        KS_ASSERT(t != NULL);
        pthread_mutex_lock(&t->mu);
        t->woken = true;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
}

uint64_t ks_ticker_steps(const ks_ticker *t)
{
        KS_ASSERT(t != NULL);
        return atomic_load(&t->steps);
}

void ks_ticker_stop(ks_ticker *t)
{
        if (t == NULL) {
                return;
        }
        pthread_mutex_lock(&t->mu);
        t->stop = true;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        int rv = pthread_join(t->thread, NULL);
        KS_ASSERT(rv == 0);
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        free(t);
}
