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

#include "ks_log.h"
#include "ks_shutdown.h"

/* Runs child() in a forked process with stderr captured; returns its wait status. */
static int run_child(void (*child)(void), char *log, size_t log_size)
{
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                dup2(fds[1], STDERR_FILENO);
                close(fds[0]);
                close(fds[1]);
                child();
                _exit(0);
        }
        close(fds[1]);
        size_t used = 0;
        ssize_t n;
        while (used + 1 < log_size && (n = read(fds[0], log + used, log_size - 1 - used)) > 0) {
                used += (size_t)n;
        }
        log[used] = '\0';
        close(fds[0]);
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        return status;
}

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
        int status = run_child(hangs, log, sizeof(log));
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 1);
        assert_non_null(strstr(log, "\"msg\":\"stop did not finish in time: exiting\""));
        assert_non_null(strstr(log, "\"deadline_ms\":100"));
}

static void test_a_finished_stop_keeps_its_status(void **state)
{
        (void)state;
        char log[4096];
        int status = run_child(finishes, log, sizeof(log));
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
