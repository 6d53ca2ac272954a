/*
 * ks_ticker: a step runs at start or after one interval as asked, again at
 * once when it says more is due, early on a wake (also one that comes
 * during a step), never after stop returned; stop ends a long rest at once
 * and waits for a running step. Waits for something that must happen are
 * bounded far above any machine's delay (WAIT_MS); nothing asserts speed,
 * only that an hour-long interval is not what ended a wait.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include "ks_clock.h"
#include "ks_code.h"
#include "ks_ticker.h"

#define HOUR_MS  (3600LL * 1000)
#define WAIT_MS  30000 /* for what must happen: only a hang gets near it */
#define QUIET_MS 100   /* for what must not happen: a wrong ticker would act at once */

typedef struct probe {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int steps;
        int again_first; /* the first again_first steps say KS_TICKER_AGAIN */
        bool hold;       /* a step waits while set */
        bool in_step;
} probe;

static ks_ticker_next step(void *arg)
{
        probe *p = arg;
        pthread_mutex_lock(&p->mu);
        p->in_step = true;
        pthread_cond_broadcast(&p->cv);
        while (p->hold) {
                pthread_cond_wait(&p->cv, &p->mu);
        }
        p->steps++;
        p->in_step = false;
        bool again = p->steps <= p->again_first;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        return again ? KS_TICKER_AGAIN : KS_TICKER_REST;
}

/* Each test's probe, fresh: *state. */
static int probe_setup(void **state)
{
        static probe p;

        p = (probe){.steps = 0};
        if (pthread_mutex_init(&p.mu, NULL) != 0 || ks_cond_init_monotonic(&p.cv) != 0) {
                return -1;
        }
        *state = &p;
        return 0;
}

static int probe_teardown(void **state)
{
        probe *p = *state;

        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        return 0;
}

/* Steps once at least n ran, or within ms; returns the count. */
static int wait_steps(probe *p, int n, int64_t ms)
{
        struct timespec until = ks_deadline_timespec(ks_deadline_after_ms(ms));
        pthread_mutex_lock(&p->mu);
        while (p->steps < n && pthread_cond_timedwait(&p->cv, &p->mu, &until) == 0) {
        }
        int got = p->steps;
        pthread_mutex_unlock(&p->mu);
        return got;
}

static void wait_in_step(probe *p)
{
        struct timespec until = ks_deadline_timespec(ks_deadline_after_ms(WAIT_MS));
        pthread_mutex_lock(&p->mu);
        while (!p->in_step && pthread_cond_timedwait(&p->cv, &p->mu, &until) == 0) {
        }
        bool in = p->in_step;
        pthread_mutex_unlock(&p->mu);
        assert_true(in);
}

static void set_hold(probe *p, bool hold)
{
        pthread_mutex_lock(&p->mu);
        p->hold = hold;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
}

static ks_ticker *start(probe *p, int64_t interval_ms, bool at_start)
{
        ks_ticker *t = NULL;
        ks_ticker_options o = {.name = "test",
                               .interval_ms = interval_ms,
                               .step_at_start = at_start,
                               .step = step,
                               .arg = p};
        assert_int_equal(ks_ticker_start(&t, &o), KS_OK);
        assert_non_null(t);
        return t;
}

static void test_rejects_bad_options(void **state)
{
        probe *p = *state;
        ks_ticker *t = (ks_ticker *)p;
        ks_ticker_options o = {.interval_ms = 0, .step = step, .arg = p};
        assert_int_equal(ks_ticker_start(&t, &o), KS_INVALID_ARGUMENT);
        assert_null(t);
        o.interval_ms = KS_TICKER_INTERVAL_MAX_MS + 1;
        assert_int_equal(ks_ticker_start(&t, &o), KS_INVALID_ARGUMENT);
        o = (ks_ticker_options){.interval_ms = 10, .step = NULL};
        assert_int_equal(ks_ticker_start(&t, &o), KS_INVALID_ARGUMENT);
        o = (ks_ticker_options){
            .interval_ms = 10, .step = step, .name = "a-name-longer-than-32-bytes-xxxxy"};
        assert_int_equal(ks_ticker_start(&t, &o), KS_INVALID_ARGUMENT);
        assert_int_equal(ks_ticker_start(&t, NULL), KS_INVALID_ARGUMENT);
        ks_ticker_stop(NULL);
}

static void test_step_at_start_then_rests(void **state)
{
        probe *p = *state;
        ks_ticker *t = start(p, HOUR_MS, true);
        assert_int_equal(wait_steps(p, 1, WAIT_MS), 1);
        /* The next one is an hour away. */
        assert_int_equal(wait_steps(p, 2, QUIET_MS), 1);
        int64_t t0 = ks_mono_ms();
        ks_ticker_stop(t);
        assert_true(ks_mono_ms() - t0 < WAIT_MS); /* the rest ended at once, not in an hour */
        assert_int_equal(p->steps, 1);
}

static void test_first_step_after_an_interval(void **state)
{
        probe *p = *state;
        ks_ticker *t = start(p, HOUR_MS, false);
        assert_int_equal(wait_steps(p, 1, QUIET_MS), 0);
        ks_ticker_stop(t);
        assert_int_equal(p->steps, 0); /* stopped during the first rest: no step at all */
}

static void test_steps_every_interval(void **state)
{
        probe *p = *state;
        ks_ticker *t = start(p, 5, false);
        assert_true(wait_steps(p, 3, WAIT_MS) >= 3);
        ks_ticker_stop(t);
        int after_stop = p->steps;
        assert_int_equal(wait_steps(p, after_stop + 1, QUIET_MS), after_stop);
}

static void test_again_runs_at_once(void **state)
{
        probe *p = *state;
        p->again_first = 5; /* steps 1..5 say more is due; step 6 rests an hour */
        ks_ticker *t = start(p, HOUR_MS, true);
        assert_int_equal(wait_steps(p, 6, WAIT_MS), 6);
        assert_int_equal(wait_steps(p, 7, QUIET_MS), 6);
        assert_int_equal(ks_ticker_steps(t), 6);
        ks_ticker_stop(t);
}

static void test_wake_cuts_the_rest_short(void **state)
{
        probe *p = *state;
        ks_ticker *t = start(p, HOUR_MS, false);
        for (int i = 1; i <= 3; i++) {
                ks_ticker_wake(t);
                assert_int_equal(wait_steps(p, i, WAIT_MS), i);
        }
        assert_int_equal(wait_steps(p, 4, QUIET_MS), 3); /* a wake is one step, not a stream */
        ks_ticker_stop(t);
}

static void test_wake_during_a_step_is_kept(void **state)
{
        probe *p = *state;
        p->hold = true;
        ks_ticker *t = start(p, HOUR_MS, true);
        wait_in_step(p);
        ks_ticker_wake(t); /* while the first step runs */
        set_hold(p, false);
        assert_int_equal(wait_steps(p, 2, WAIT_MS), 2);
        ks_ticker_stop(t);
}

typedef struct stopper {
        ks_ticker *t;
        bool done;
        pthread_mutex_t *mu;
} stopper;

static void *stop_main(void *arg)
{
        stopper *s = arg;
        ks_ticker_stop(s->t);
        pthread_mutex_lock(s->mu);
        s->done = true;
        pthread_mutex_unlock(s->mu);
        return NULL;
}

static void test_stop_waits_for_a_running_step(void **state)
{
        probe *p = *state;
        p->hold = true;
        ks_ticker *t = start(p, HOUR_MS, true);
        wait_in_step(p);
        stopper s = {.t = t, .mu = &p->mu};
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, stop_main, &s), 0);
        assert_int_equal(wait_steps(p, 1, QUIET_MS), 0);
        pthread_mutex_lock(&p->mu);
        bool done_early = s.done;
        pthread_mutex_unlock(&p->mu);
        assert_false(done_early); /* the step still runs: stop has not returned */
        set_hold(p, false);
        assert_int_equal(pthread_join(th, NULL), 0);
        assert_true(s.done);
        assert_int_equal(p->steps, 1); /* the step finished; none came after */
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_rejects_bad_options, probe_setup, probe_teardown),
            cmocka_unit_test_setup_teardown(test_step_at_start_then_rests, probe_setup,
                                            probe_teardown),
            cmocka_unit_test_setup_teardown(test_first_step_after_an_interval, probe_setup,
                                            probe_teardown),
            cmocka_unit_test_setup_teardown(test_steps_every_interval, probe_setup, probe_teardown),
            cmocka_unit_test_setup_teardown(test_again_runs_at_once, probe_setup, probe_teardown),
            cmocka_unit_test_setup_teardown(test_wake_cuts_the_rest_short, probe_setup,
                                            probe_teardown),
            cmocka_unit_test_setup_teardown(test_wake_during_a_step_is_kept, probe_setup,
                                            probe_teardown),
            cmocka_unit_test_setup_teardown(test_stop_waits_for_a_running_step, probe_setup,
                                            probe_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
