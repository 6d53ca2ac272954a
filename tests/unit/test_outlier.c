/*
 * ks_outlier: a pipe that holds calls and answers none for eject_after_ms
 * is ejected, one at a time, never when no other pipe answers (then it is
 * reported held, once); a quiet pipe with nothing outstanding is never
 * ejected however long; a pipe that answers again is judged afresh; a new
 * pipe from the host of an ejected one is a readmission, once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ks_code.h"
#include "ks_outlier.h"

#define AFTER_MS 1000

static ks_outlier_event ev[KS_OUTLIER_EVENTS_MAX];

static ks_outlier_pipe pipe_of(uint32_t id, uint64_t sent, uint64_t answered, const char *host)
{
        ks_outlier_pipe p = {.id = id, .sent = sent, .answered = answered};
        snprintf(p.host, sizeof(p.host), "%s", host);
        return p;
}

static ks_outlier *new_outlier(void)
{
        ks_outlier *o = NULL;
        assert_int_equal(ks_outlier_new(&o, AFTER_MS), KS_OK);
        return o;
}

static void test_bad_options(void **state)
{
        ks_outlier *o = NULL;
        (void)state;
        assert_int_equal(ks_outlier_new(&o, 0), KS_INVALID_ARGUMENT);
        assert_int_equal(ks_outlier_new(&o, KS_OUTLIER_AFTER_MAX_MS + 1), KS_INVALID_ARGUMENT);
        assert_null(o);
}

/* Pipe 1 stops answering with calls outstanding; pipe 2 keeps answering. */
static void test_stalled_pipe_is_ejected_after_the_bound(void **state)
{
        ks_outlier *o = new_outlier();
        ks_outlier_pipe p[2] = {pipe_of(1, 10, 10, "10.0.0.1"), pipe_of(2, 10, 10, "10.0.0.2")};
        (void)state;

        assert_int_equal(ks_outlier_step(o, p, 2, 0, ev), 0);
        p[0].sent = 14; /* four calls it will never answer, from just after the first look */
        for (int64_t t = 100; t < AFTER_MS; t += 100) {
                p[1].sent += 5;
                p[1].answered += 5;
                assert_int_equal(ks_outlier_step(o, p, 2, t, ev), 0);
        }
        p[1].sent += 5;
        p[1].answered += 5;
        assert_int_equal(ks_outlier_step(o, p, 2, AFTER_MS, ev), 1);
        assert_int_equal(ev[0].kind, KS_OUTLIER_EJECT);
        assert_int_equal(ev[0].pipe, 1);
        assert_int_equal(ev[0].outstanding, 4);
        assert_int_equal(ev[0].elapsed_ms, AFTER_MS);
        assert_int_equal(ks_outlier_pending(o), 1);
        /* still listed while its close goes through: not ejected twice */
        assert_int_equal(ks_outlier_step(o, p, 2, AFTER_MS + 200, ev), 0);
        ks_outlier_free(o);
}

static void test_quiet_pipe_without_calls_stays(void **state)
{
        ks_outlier *o = new_outlier();
        ks_outlier_pipe p[2] = {pipe_of(1, 3, 3, "h"), pipe_of(2, 3, 3, "h")};
        (void)state;

        for (int64_t t = 0; t < 100 * AFTER_MS; t += 500) {
                assert_int_equal(ks_outlier_step(o, p, 2, t, ev), 0);
        }
        ks_outlier_free(o);
}

/* A slow pipe that answers some of its calls is making progress. */
static void test_answering_pipe_is_judged_afresh(void **state)
{
        ks_outlier *o = new_outlier();
        ks_outlier_pipe p[2] = {pipe_of(1, 5, 0, "h"), pipe_of(2, 0, 0, "h")};
        (void)state;

        assert_int_equal(ks_outlier_step(o, p, 2, 0, ev), 0);
        p[0].answered = 1;
        assert_int_equal(ks_outlier_step(o, p, 2, AFTER_MS - 1, ev), 0);
        assert_int_equal(ks_outlier_step(o, p, 2, 2 * AFTER_MS - 2, ev), 0);
        assert_int_equal(ks_outlier_step(o, p, 2, 2 * AFTER_MS - 1, ev), 1);
        assert_int_equal(ev[0].kind, KS_OUTLIER_EJECT);
        ks_outlier_free(o);
}

/* The last replica, and every replica at once, stay: reported held, once each. */
static void test_never_the_last_that_answers(void **state)
{
        ks_outlier *o = new_outlier();
        ks_outlier_pipe p[2] = {pipe_of(1, 2, 0, "h"), pipe_of(2, 2, 0, "h")};
        (void)state;

        assert_int_equal(ks_outlier_step(o, p, 1, 0, ev), 0);
        assert_int_equal(ks_outlier_step(o, p, 1, AFTER_MS, ev), 1);
        assert_int_equal(ev[0].kind, KS_OUTLIER_HELD);
        assert_int_equal(ks_outlier_step(o, p, 1, 2 * AFTER_MS, ev), 0);
        assert_int_equal(ks_outlier_pending(o), 0);
        ks_outlier_free(o);

        o = new_outlier();
        assert_int_equal(ks_outlier_step(o, p, 2, 0, ev), 0);
        assert_int_equal(ks_outlier_step(o, p, 2, AFTER_MS, ev), 2);
        assert_int_equal(ev[0].kind, KS_OUTLIER_HELD);
        assert_int_equal(ev[1].kind, KS_OUTLIER_HELD);
        /* one answers again: the other can go */
        p[1].answered = 2;
        assert_int_equal(ks_outlier_step(o, p, 2, AFTER_MS + 1, ev), 1);
        assert_int_equal(ev[0].kind, KS_OUTLIER_EJECT);
        assert_int_equal(ev[0].pipe, 1);
        ks_outlier_free(o);
}

/* Two stalled of three: one ejection per look, the one silent the longest first. */
static void test_one_ejection_per_look(void **state)
{
        ks_outlier *o = new_outlier();
        ks_outlier_pipe p[3] = {pipe_of(1, 1, 0, "h"), pipe_of(2, 1, 0, "h"),
                                pipe_of(3, 0, 0, "h")};
        (void)state;

        assert_int_equal(ks_outlier_step(o, &p[1], 2, 0, ev), 0); /* 2 and 3 */
        assert_int_equal(ks_outlier_step(o, p, 3, 10, ev), 0);    /* 1 joins */
        assert_int_equal(ks_outlier_step(o, p, 3, AFTER_MS + 10, ev), 1);
        assert_int_equal(ev[0].pipe, 2);
        assert_int_equal(ks_outlier_step(o, p, 3, AFTER_MS + 20, ev), 1);
        assert_int_equal(ev[0].pipe, 1);
        assert_int_equal(ks_outlier_pending(o), 2);
        ks_outlier_free(o);
}

static void test_readmission_by_host(void **state)
{
        ks_outlier *o = new_outlier();
        ks_outlier_pipe p[3] = {pipe_of(1, 1, 0, "10.0.0.1"), pipe_of(2, 0, 0, "10.0.0.2"),
                                pipe_of(3, 0, 0, "10.0.0.2")};
        (void)state;

        assert_int_equal(ks_outlier_step(o, p, 2, 0, ev), 0);
        assert_int_equal(ks_outlier_step(o, p, 2, AFTER_MS, ev), 1);
        assert_int_equal(ev[0].kind, KS_OUTLIER_EJECT);
        /* gone; a new replica on another host is not the ejected one */
        assert_int_equal(ks_outlier_step(o, &p[1], 2, AFTER_MS + 100, ev), 0);
        assert_int_equal(ks_outlier_pending(o), 1);
        /* the ejected host dials back */
        p[0] = pipe_of(4, 0, 0, "10.0.0.1");
        assert_int_equal(ks_outlier_step(o, p, 3, AFTER_MS + 600, ev), 1);
        assert_int_equal(ev[0].kind, KS_OUTLIER_READMIT);
        assert_int_equal(ev[0].pipe, 4);
        assert_int_equal(ev[0].elapsed_ms, 600);
        assert_int_equal(ks_outlier_pending(o), 0);
        assert_int_equal(ks_outlier_step(o, p, 3, AFTER_MS + 700, ev), 0);
        ks_outlier_free(o);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_bad_options),
            cmocka_unit_test(test_stalled_pipe_is_ejected_after_the_bound),
            cmocka_unit_test(test_quiet_pipe_without_calls_stays),
            cmocka_unit_test(test_answering_pipe_is_judged_afresh),
            cmocka_unit_test(test_never_the_last_that_answers),
            cmocka_unit_test(test_one_ejection_per_look),
            cmocka_unit_test(test_readmission_by_host),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
