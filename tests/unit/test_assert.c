/*
 * KS_ASSERT: a false condition aborts the process after one JSON line naming
 * the expression and file:line, whatever NDEBUG says; a true one costs
 * nothing and evaluates its argument once.
 */
#define NDEBUG 1 /* KS_ASSERT must not care */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "ks_assert.h"

#define LOG_MAX 4096

enum { FAILS_LINE = __LINE__ + 4 }; /* the KS_ASSERT line of fails() */
static void fails(void)
{
        int n_items = 3;
        KS_ASSERT(n_items == 4 && "items \"counted\"");
}

static void holds(void)
{
        KS_ASSERT(1 + 1 == 2);
}

static void test_false_aborts_with_expression_and_line(void **state)
{
        (void)state;
        char log[LOG_MAX], want[64];
        int status = 0;
        assert_int_equal(run_child(fails, log, sizeof(log), &status), 0);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGABRT);
        assert_non_null(strstr(log, "\"msg\":\"assertion failed\""));
        /* The quotes inside the expression are escaped: the line stays one JSON object. */
        assert_non_null(strstr(log, "\"expr\":\"n_items == 4 && \\\"items \\\\\\\"counted"));
        assert_non_null(strstr(log, "test_assert.c"));
        snprintf(want, sizeof(want), "\"line\":%d}", FAILS_LINE);
        assert_non_null(strstr(log, want));
        assert_int_equal(strchr(log, '\n') - log, (long)strlen(log) - 1);
}

static void test_true_continues(void **state)
{
        (void)state;
        char log[LOG_MAX];
        int status = 0;
        assert_int_equal(run_child(holds, log, sizeof(log), &status), 0);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        assert_string_equal(log, "");
}

static void test_evaluates_once(void **state)
{
        (void)state;
        int calls = 0;
        KS_ASSERT(++calls == 1);
        assert_int_equal(calls, 1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_false_aborts_with_expression_and_line),
            cmocka_unit_test(test_true_continues),
            cmocka_unit_test(test_evaluates_once),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
