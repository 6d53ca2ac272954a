/*
 * Unit tests of billing's state tables (services/billing/states.c): every
 * (state, event) of the subscription and invoice tables against tables
 * written out independently here as lists of the legal moves, names that
 * round-trip through parse, unknown names refused, terminal states, and
 * the assertion on a state or event out of range.
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

#define UNTOUCHED 77 /* what *to holds after an illegal move */

typedef struct move {
        int from, ev, to;
} move;

/* The legal subscription moves; every other (state, event) is illegal. */
static const move sub_moves[] = {
    {BL_SUB_TRIALING, BL_SE_TRIAL_END, BL_SUB_ACTIVE},
    {BL_SUB_TRIALING, BL_SE_CHANGE, BL_SUB_TRIALING},
    {BL_SUB_TRIALING, BL_SE_CANCEL, BL_SUB_CANCELED},
    {BL_SUB_ACTIVE, BL_SE_RENEW, BL_SUB_ACTIVE},
    {BL_SUB_ACTIVE, BL_SE_CHANGE, BL_SUB_ACTIVE},
    {BL_SUB_ACTIVE, BL_SE_PAYMENT_FAILED, BL_SUB_PAST_DUE},
    {BL_SUB_ACTIVE, BL_SE_PAYMENT_SUCCEEDED, BL_SUB_ACTIVE},
    {BL_SUB_ACTIVE, BL_SE_PAUSE, BL_SUB_PAUSED},
    {BL_SUB_ACTIVE, BL_SE_CANCEL, BL_SUB_CANCELED},
    {BL_SUB_PAST_DUE, BL_SE_RENEW, BL_SUB_PAST_DUE},
    {BL_SUB_PAST_DUE, BL_SE_CHANGE, BL_SUB_PAST_DUE},
    {BL_SUB_PAST_DUE, BL_SE_PAYMENT_FAILED, BL_SUB_PAST_DUE},
    {BL_SUB_PAST_DUE, BL_SE_PAYMENT_SUCCEEDED, BL_SUB_ACTIVE},
    {BL_SUB_PAST_DUE, BL_SE_CANCEL, BL_SUB_CANCELED},
    {BL_SUB_PAST_DUE, BL_SE_DUNNING_EXHAUSTED, BL_SUB_CANCELED},
    {BL_SUB_PAST_DUE, BL_SE_DUES_CLEARED, BL_SUB_ACTIVE},
    {BL_SUB_PAUSED, BL_SE_RESUME, BL_SUB_ACTIVE},
    {BL_SUB_PAUSED, BL_SE_CANCEL, BL_SUB_CANCELED},
};

/* The legal invoice moves (Stripe's). */
static const move inv_moves[] = {
    {BL_INV_DRAFT, BL_IE_FINALIZE, BL_INV_OPEN},
    {BL_INV_OPEN, BL_IE_PAY, BL_INV_PAID},
    {BL_INV_OPEN, BL_IE_VOID, BL_INV_VOID},
    {BL_INV_OPEN, BL_IE_MARK_UNCOLLECTIBLE, BL_INV_UNCOLLECTIBLE},
    {BL_INV_UNCOLLECTIBLE, BL_IE_PAY, BL_INV_PAID},
    {BL_INV_UNCOLLECTIBLE, BL_IE_VOID, BL_INV_VOID},
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* The expected next state of (from, ev), or -1 when the move is illegal. */
static int expected(const move *moves, size_t n, int from, int ev)
{
        for (size_t i = 0; i < n; i++) {
                if (moves[i].from == from && moves[i].ev == ev) {
                        return moves[i].to;
                }
        }
        return -1;
}

static int sub_next(int from, int ev)
{
        bl_sub_state to = (bl_sub_state)UNTOUCHED;

        if (!bl_sub_next((bl_sub_state)from, (bl_sub_event)ev, &to)) {
                assert_int_equal(to, UNTOUCHED);
                return -1;
        }
        return (int)to;
}

static int inv_next(int from, int ev)
{
        bl_inv_state to = (bl_inv_state)UNTOUCHED;

        if (!bl_inv_next((bl_inv_state)from, (bl_inv_event)ev, &to)) {
                assert_int_equal(to, UNTOUCHED);
                return -1;
        }
        return (int)to;
}

static void test_sub_table_whole(void **state)
{
        int legal = 0;

        (void)state;
        for (int s = 0; s < BL_SUB_STATES; s++) {
                for (int e = 0; e < BL_SUB_EVENTS; e++) {
                        int want = expected(sub_moves, N(sub_moves), s, e), got = sub_next(s, e);
                        if (got != want) {
                                fail_msg("%s + %s: got %d, want %d",
                                         bl_sub_state_name((bl_sub_state)s),
                                         bl_sub_event_name((bl_sub_event)e), got, want);
                        }
                        legal += got >= 0;
                }
        }
        assert_int_equal(legal, N(sub_moves));
}

static void test_inv_table_whole(void **state)
{
        int legal = 0;

        (void)state;
        for (int s = 0; s < BL_INV_STATES; s++) {
                for (int e = 0; e < BL_INV_EVENTS; e++) {
                        int want = expected(inv_moves, N(inv_moves), s, e), got = inv_next(s, e);
                        if (got != want) {
                                fail_msg("%s + %s: got %d, want %d",
                                         bl_inv_state_name((bl_inv_state)s),
                                         bl_inv_event_name((bl_inv_event)e), got, want);
                        }
                        legal += got >= 0;
                }
        }
        assert_int_equal(legal, N(inv_moves));
}

static void test_terminal_states(void **state)
{
        (void)state;
        for (int e = 0; e < BL_SUB_EVENTS; e++) {
                assert_int_equal(sub_next(BL_SUB_CANCELED, e), -1);
        }
        for (int e = 0; e < BL_INV_EVENTS; e++) {
                assert_int_equal(inv_next(BL_INV_PAID, e), -1);
                assert_int_equal(inv_next(BL_INV_VOID, e), -1);
        }
        /* Every other state can still end: canceled, and paid or void, are reachable. */
        assert_int_equal(sub_next(BL_SUB_TRIALING, BL_SE_CANCEL), BL_SUB_CANCELED);
        assert_int_equal(sub_next(BL_SUB_PAUSED, BL_SE_CANCEL), BL_SUB_CANCELED);
        assert_int_equal(inv_next(BL_INV_UNCOLLECTIBLE, BL_IE_VOID), BL_INV_VOID);
}

/* Every state is reachable from the first one (no row of the table is dead). */
static void test_every_state_reachable(void **state)
{
        bool sub_seen[BL_SUB_STATES] = {[BL_SUB_TRIALING] = true};
        bool inv_seen[BL_INV_STATES] = {[BL_INV_DRAFT] = true};

        (void)state;
        for (int round = 0; round < BL_SUB_STATES; round++) {
                for (int s = 0; s < BL_SUB_STATES; s++) {
                        for (int e = 0; sub_seen[s] && e < BL_SUB_EVENTS; e++) {
                                int to = sub_next(s, e);
                                if (to >= 0) {
                                        sub_seen[to] = true;
                                }
                        }
                }
                for (int s = 0; s < BL_INV_STATES; s++) {
                        for (int e = 0; inv_seen[s] && e < BL_INV_EVENTS; e++) {
                                int to = inv_next(s, e);
                                if (to >= 0) {
                                        inv_seen[to] = true;
                                }
                        }
                }
        }
        for (int s = 0; s < BL_SUB_STATES; s++) {
                assert_true(sub_seen[s]);
        }
        for (int s = 0; s < BL_INV_STATES; s++) {
                assert_true(inv_seen[s]);
        }
}

/* ---- names ------------------------------------------------------------------- */

static void test_sub_names(void **state)
{
        static const char *const states[] = {"trialing", "active", "past_due", "paused",
                                             "canceled"};
        static const char *const events[] = {
            "trial_end", "renew",  "change", "payment_failed",    "payment_succeeded",
            "pause",     "resume", "cancel", "dunning_exhausted", "dues_cleared"};
        bl_sub_state s;

        (void)state;
        assert_int_equal(N(states), BL_SUB_STATES);
        assert_int_equal(N(events), BL_SUB_EVENTS);
        for (int i = 0; i < BL_SUB_STATES; i++) {
                assert_string_equal(bl_sub_state_name((bl_sub_state)i), states[i]);
                s = (bl_sub_state)UNTOUCHED;
                assert_true(bl_sub_state_parse(states[i], &s));
                assert_int_equal(s, i);
        }
        for (int i = 0; i < BL_SUB_EVENTS; i++) {
                assert_string_equal(bl_sub_event_name((bl_sub_event)i), events[i]);
        }
        assert_string_equal(bl_sub_state_name(BL_SUB_STATES), "");
        assert_string_equal(bl_sub_state_name((bl_sub_state)-1), "");
        assert_string_equal(bl_sub_event_name(BL_SUB_EVENTS), "");
        assert_string_equal(bl_sub_event_name((bl_sub_event)-1), "");
}

static void test_inv_names(void **state)
{
        static const char *const states[] = {"draft", "open", "paid", "void", "uncollectible"};
        static const char *const events[] = {"finalize", "pay", "void", "mark_uncollectible"};
        bl_inv_state s;

        (void)state;
        assert_int_equal(N(states), BL_INV_STATES);
        assert_int_equal(N(events), BL_INV_EVENTS);
        for (int i = 0; i < BL_INV_STATES; i++) {
                assert_string_equal(bl_inv_state_name((bl_inv_state)i), states[i]);
                s = (bl_inv_state)UNTOUCHED;
                assert_true(bl_inv_state_parse(states[i], &s));
                assert_int_equal(s, i);
        }
        for (int i = 0; i < BL_INV_EVENTS; i++) {
                assert_string_equal(bl_inv_event_name((bl_inv_event)i), events[i]);
        }
        assert_string_equal(bl_inv_state_name(BL_INV_STATES), "");
        assert_string_equal(bl_inv_event_name(BL_INV_EVENTS), "");
        assert_string_equal(bl_inv_event_name((bl_inv_event)-1), "");
}

static void test_unknown_names_refused(void **state)
{
        static const char *const unknown[] = {
            "",      "Active",   "ACTIVE", "active ", " active", "past-due", "pastdue", "cancelled",
            "trial", "finalize", "pay",    "draft ",  "Paid",    "voided",   "open\n",  "renew"};
        bl_sub_state s = (bl_sub_state)UNTOUCHED;
        bl_inv_state v = (bl_inv_state)UNTOUCHED;

        (void)state;
        for (size_t i = 0; i < N(unknown); i++) {
                if (bl_sub_state_parse(unknown[i], &s)) {
                        fail_msg("subscription state \"%s\" accepted", unknown[i]);
                }
                if (bl_inv_state_parse(unknown[i], &v)) {
                        fail_msg("invoice state \"%s\" accepted", unknown[i]);
                }
        }
        assert_false(bl_sub_state_parse(NULL, &s));
        assert_false(bl_inv_state_parse(NULL, &v));
        assert_int_equal(s, UNTOUCHED);
        assert_int_equal(v, UNTOUCHED);
        /* A state name of the other table is not one of this table's. */
        assert_false(bl_sub_state_parse("paid", &s));
        assert_false(bl_inv_state_parse("active", &v));
}

/* ---- out of range: a programming error, which aborts ------------------------- */

static void sub_next_out_of_range(void)
{
        bl_sub_state to;
        (void)bl_sub_next(BL_SUB_STATES, BL_SE_RENEW, &to);
}

static void sub_event_out_of_range(void)
{
        bl_sub_state to;
        (void)bl_sub_next(BL_SUB_ACTIVE, (bl_sub_event)-1, &to);
}

static void inv_next_out_of_range(void)
{
        bl_inv_state to;
        (void)bl_inv_next(BL_INV_OPEN, BL_INV_EVENTS, &to);
}

static void test_out_of_range_asserts(void **state)
{
        void (*const fns[])(void) = {sub_next_out_of_range, sub_event_out_of_range,
                                     inv_next_out_of_range};
        char log[1024];
        int status = 0;

        (void)state;
        for (size_t i = 0; i < N(fns); i++) {
                assert_int_equal(run_child(fns[i], log, sizeof(log), &status), 0);
                assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
                assert_non_null(strstr(log, "assertion failed"));
                assert_non_null(strstr(log, "states.c"));
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_sub_table_whole),
            cmocka_unit_test(test_inv_table_whole),
            cmocka_unit_test(test_terminal_states),
            cmocka_unit_test(test_every_state_reachable),
            cmocka_unit_test(test_sub_names),
            cmocka_unit_test(test_inv_names),
            cmocka_unit_test(test_unknown_names_refused),
            cmocka_unit_test(test_out_of_range_asserts),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
