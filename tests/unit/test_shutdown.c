/*
 * ks_shutdown: a process that does not finish stopping is ended by the
 * deadline with status 1 and a log line saying so; one that finishes first
 * keeps its own status.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child.h"
#include "ks_log.h"
#include "ks_shutdown.h"

static void hangs(void)
{
        ks_log_init("test", KS_LOG_INFO);
        ks_shutdown_deadline(100);
        for (;;) {
                pause(); /* a close that never returns */
        }
}

static void finishes(void)
{
        ks_log_init("test", KS_LOG_INFO);
        ks_shutdown_deadline(60000);
        _exit(7);
}

static void test_a_hung_stop_is_ended(void **state)
{
        (void)state;
        char log[4096];
        int status = 0;
        assert_int_equal(run_child(hangs, log, sizeof(log), &status), 0);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 1);
        assert_non_null(strstr(log, "\"msg\":\"stop did not finish in time: exiting\""));
        assert_non_null(strstr(log, "\"deadline_ms\":100"));
}

static void test_a_finished_stop_keeps_its_status(void **state)
{
        (void)state;
        char log[4096];
        int status = 0;
        assert_int_equal(run_child(finishes, log, sizeof(log), &status), 0);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 7);
        assert_null(strstr(log, "stop did not finish"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_a_hung_stop_is_ended),
            cmocka_unit_test(test_a_finished_stop_keeps_its_status),
        };
        return cmocka_run_group_tests_name("shutdown", tests, NULL, NULL);
}
