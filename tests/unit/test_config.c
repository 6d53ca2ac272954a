/*
 * ks_config: defaults, environment overrides, every rejection and its
 * message, secrets kept out of messages, help and logs, and the exit codes
 * of ks_config_init.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "ks_config.h"
#include "ks_log.h"

#define DEFAULT_SECRET "postgresql://app:default-pw-7731@db/keelson"

typedef struct test_config {
        int64_t workers;
        int64_t offset;
        char *dsn;
        bool debug;
        char *name;
        char *note;
} test_config;

static const ks_config_var vars[] = {
    KS_CFG_INT("KS_TEST_WORKERS", test_config, workers, "4", 1, 256, "worker threads"),
    KS_CFG_INT("KS_TEST_OFFSET", test_config, offset, "-3", -10, 10, "signed offset"),
    KS_CFG_STR("KS_TEST_DSN", test_config, dsn, DEFAULT_SECRET, KS_CFG_SECRET | KS_CFG_NONEMPTY,
               "database connection string"),
    KS_CFG_BOOL("KS_TEST_DEBUG", test_config, debug, "false", "verbose diagnostics"),
    KS_CFG_STR("KS_TEST_NAME", test_config, name, "keelson", KS_CFG_NONEMPTY, "instance name"),
    KS_CFG_STR("KS_TEST_NOTE", test_config, note, "", 0, "free text, may be empty"),
};
#define N_VARS (sizeof(vars) / sizeof(vars[0]))

static const char *const var_names[] = {"KS_TEST_WORKERS",  "KS_TEST_OFFSET", "KS_TEST_DSN",
                                        "KS_TEST_DEBUG",    "KS_TEST_NAME",   "KS_TEST_NOTE",
                                        "KS_TEST_REQUIRED", "KS_TEST_PIN",    "KS_TEST_WIDE"};

static int clear_env(void **state)
{
        size_t i;
        (void)state;
        for (i = 0; i < sizeof(var_names) / sizeof(var_names[0]); i++) {
                unsetenv(var_names[i]);
        }
        return 0;
}

/* Loads the table expecting failure; returns the message. */
static const char *load_fails(const ks_config_var *v, size_t n)
{
        static char err[512];
        test_config cfg;
        size_t i;

        memset(&cfg, 0x5a, sizeof(cfg));
        err[0] = '\0';
        assert_int_equal(ks_config_load(v, n, &cfg, err, sizeof(err)), -1);
        /* Strings loaded before the failure were freed and cleared. */
        for (i = 0; i < n; i++) {
                if (v[i].type == KS_CFG_TYPE_STR) {
                        assert_null(*(char **)((char *)&cfg + v[i].offset));
                }
        }
        assert_true(strlen(err) > 0);
        return err;
}

static void assert_contains(const char *hay, const char *needle)
{
        if (strstr(hay, needle) == NULL) {
                fail_msg("\"%s\" does not contain \"%s\"", hay, needle);
        }
}

static void assert_lacks(const char *hay, const char *needle)
{
        if (strstr(hay, needle) != NULL) {
                fail_msg("\"%s\" contains \"%s\"", hay, needle);
        }
}

/* ---- loading ------------------------------------------------------------- */

static void test_defaults(void **state)
{
        test_config cfg;
        char err[256];
        (void)state;

        assert_int_equal(ks_config_load(vars, N_VARS, &cfg, err, sizeof(err)), 0);
        assert_int_equal(cfg.workers, 4);
        assert_int_equal(cfg.offset, -3);
        assert_string_equal(cfg.dsn, DEFAULT_SECRET);
        assert_false(cfg.debug);
        assert_string_equal(cfg.name, "keelson");
        assert_string_equal(cfg.note, "");
        ks_config_free(vars, N_VARS, &cfg);
        assert_null(cfg.dsn);
        assert_null(cfg.name);
        ks_config_free(vars, N_VARS, NULL);
}

static void test_env_overrides(void **state)
{
        test_config cfg;
        char err[256];
        (void)state;

        setenv("KS_TEST_WORKERS", "256", 1);
        setenv("KS_TEST_OFFSET", "-10", 1);
        setenv("KS_TEST_DSN", "postgresql://elsewhere", 1);
        setenv("KS_TEST_DEBUG", "YES", 1);
        setenv("KS_TEST_NAME", "replica-2", 1);
        setenv("KS_TEST_NOTE", "hello", 1);
        assert_int_equal(ks_config_load(vars, N_VARS, &cfg, err, sizeof(err)), 0);
        assert_int_equal(cfg.workers, 256);
        assert_int_equal(cfg.offset, -10);
        assert_string_equal(cfg.dsn, "postgresql://elsewhere");
        assert_true(cfg.debug);
        assert_string_equal(cfg.name, "replica-2");
        assert_string_equal(cfg.note, "hello");
        ks_config_free(vars, N_VARS, &cfg);

        /* Empty is allowed where the table does not forbid it. */
        setenv("KS_TEST_NOTE", "", 1);
        assert_int_equal(ks_config_load(vars, N_VARS, &cfg, err, sizeof(err)), 0);
        assert_string_equal(cfg.note, "");
        ks_config_free(vars, N_VARS, &cfg);
}

static void test_bool_spellings(void **state)
{
        static const char *const yes[] = {"true", "TRUE", "1", "yes", "Yes", "on", "ON"};
        static const char *const no[] = {"false", "False", "0", "no", "NO", "off", "Off"};
        test_config cfg;
        char err[256];
        size_t i;
        (void)state;

        for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
                setenv("KS_TEST_DEBUG", yes[i], 1);
                assert_int_equal(ks_config_load(vars, N_VARS, &cfg, err, sizeof(err)), 0);
                assert_true(cfg.debug);
                ks_config_free(vars, N_VARS, &cfg);
                setenv("KS_TEST_DEBUG", no[i], 1);
                assert_int_equal(ks_config_load(vars, N_VARS, &cfg, err, sizeof(err)), 0);
                assert_false(cfg.debug);
                ks_config_free(vars, N_VARS, &cfg);
        }
}

/* The full int64 range parses; one past either end is an overflow. */
static void test_int64_limits(void **state)
{
        static const ks_config_var wide[] = {
            KS_CFG_INT("KS_TEST_WIDE", test_config, workers, "0", INT64_MIN, INT64_MAX, "any"),
        };
        test_config cfg;
        char err[256];
        (void)state;

        setenv("KS_TEST_WIDE", "9223372036854775807", 1);
        assert_int_equal(ks_config_load(wide, 1, &cfg, err, sizeof(err)), 0);
        assert_true(cfg.workers == INT64_MAX);
        setenv("KS_TEST_WIDE", "-9223372036854775808", 1);
        assert_int_equal(ks_config_load(wide, 1, &cfg, err, sizeof(err)), 0);
        assert_true(cfg.workers == INT64_MIN);
        setenv("KS_TEST_WIDE", "0042", 1);
        assert_int_equal(ks_config_load(wide, 1, &cfg, err, sizeof(err)), 0);
        assert_true(cfg.workers == 42);
        setenv("KS_TEST_WIDE", "9223372036854775808", 1);
        assert_int_equal(ks_config_load(wide, 1, &cfg, err, sizeof(err)), -1);
        assert_contains(err, "KS_TEST_WIDE=9223372036854775808");
        setenv("KS_TEST_WIDE", "-9223372036854775809", 1);
        assert_int_equal(ks_config_load(wide, 1, &cfg, err, sizeof(err)), -1);
        assert_contains(err, "KS_TEST_WIDE=-9223372036854775809");
}

/* ---- rejections ---------------------------------------------------------- */

static void test_int_rejections(void **state)
{
        static const char *const bad[] = {
            "abc",
            "12x",
            " 12",
            "12 ",
            "+12",
            "",
            "-",
            "1.5",
            "0x10",
            "0",
            "257",
            "-1",
            "99999999999999999999999",
        };
        size_t i;
        (void)state;

        for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char want[64];
                const char *err;
                setenv("KS_TEST_WORKERS", bad[i], 1);
                err = load_fails(vars, N_VARS);
                snprintf(want, sizeof(want), "KS_TEST_WORKERS=%s:", bad[i]);
                assert_contains(err, want);
                assert_contains(err, "an integer in [1, 256]");
        }
        setenv("KS_TEST_WORKERS", "8", 1);
        setenv("KS_TEST_OFFSET", "11", 1);
        assert_contains(load_fails(vars, N_VARS),
                        "KS_TEST_OFFSET=11: expected an integer in [-10, 10]");
        setenv("KS_TEST_OFFSET", "-11", 1);
        assert_contains(load_fails(vars, N_VARS), "KS_TEST_OFFSET=-11");
}

static void test_bool_rejections(void **state)
{
        static const char *const bad[] = {"maybe", "", "2", "t", "yess", "true "};
        size_t i;
        (void)state;

        for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                const char *err;
                char want[64];
                setenv("KS_TEST_DEBUG", bad[i], 1);
                err = load_fails(vars, N_VARS);
                snprintf(want, sizeof(want), "KS_TEST_DEBUG=%s:", bad[i]);
                assert_contains(err, want);
                assert_contains(err, "true/false");
        }
}

static void test_required_missing(void **state)
{
        static const ks_config_var req[] = {
            KS_CFG_INT("KS_TEST_WORKERS", test_config, workers, "4", 1, 256, "workers"),
            KS_CFG_STR("KS_TEST_REQUIRED", test_config, name, NULL, KS_CFG_REQUIRED,
                       "must be given"),
        };
        test_config cfg;
        char err[256];
        (void)state;

        assert_contains(load_fails(req, 2), "KS_TEST_REQUIRED is not set");
        setenv("KS_TEST_REQUIRED", "given", 1);
        assert_int_equal(ks_config_load(req, 2, &cfg, err, sizeof(err)), 0);
        assert_string_equal(cfg.name, "given");
        ks_config_free(req, 2, &cfg);
}

static void test_empty_nonempty(void **state)
{
        const char *err;
        (void)state;

        setenv("KS_TEST_NAME", "", 1);
        err = load_fails(vars, N_VARS);
        assert_contains(err, "KS_TEST_NAME=: expected a non-empty string");
}

/* ---- secrets ------------------------------------------------------------- */

static void test_secret_not_in_errors(void **state)
{
        static const ks_config_var pin[] = {
            {.name = "KS_TEST_PIN",
             .type = KS_CFG_TYPE_INT,
             .offset = offsetof(test_config, workers),
             .default_value = "1",
             .min = 1,
             .max = 9999,
             .flags = KS_CFG_SECRET,
             .help = "a secret number"},
        };
        char *long_secret = malloc(10000);
        const char *err;
        (void)state;

        setenv("KS_TEST_PIN", "hunter2-pin", 1);
        err = load_fails(pin, 1);
        assert_contains(err, "KS_TEST_PIN");
        assert_contains(err, "an integer in [1, 9999]");
        assert_lacks(err, "hunter2");

        /* A secret string too long to accept: named, not shown. */
        assert_non_null(long_secret);
        memset(long_secret, 'S', 9999);
        long_secret[9999] = '\0';
        memcpy(long_secret, "pw-9f3e", 7);
        setenv("KS_TEST_DSN", long_secret, 1);
        err = load_fails(vars, N_VARS);
        assert_contains(err, "KS_TEST_DSN");
        assert_lacks(err, "pw-9f3e");
        assert_lacks(err, "SSSS");
        free(long_secret);

        setenv("KS_TEST_DSN", "", 1);
        err = load_fails(vars, N_VARS);
        assert_contains(err, "KS_TEST_DSN");
        assert_contains(err, "non-empty");
}

static char *help_text(void)
{
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);

        assert_non_null(f);
        ks_config_print_help(f, "keelson-test", "keelson-test: a test binary", vars, N_VARS);
        assert_int_equal(fclose(f), 0);
        return buf;
}

static void test_help(void **state)
{
        char *help = help_text();
        size_t i;
        (void)state;

        assert_contains(help, "keelson-test: a test binary");
        for (i = 0; i < N_VARS; i++) {
                assert_contains(help, vars[i].name);
                assert_contains(help, vars[i].help);
        }
        assert_contains(help, "[1, 256]");
        assert_contains(help, "[-10, 10]");
        assert_contains(help, "\"4\"");
        assert_contains(help, "\"keelson\"");
        assert_contains(help, "(secret)");
        assert_contains(help, "boolean");
        assert_lacks(help, "default-pw-7731");
        free(help);
}

/* ---- the log line -------------------------------------------------------- */

static char *capture_stderr_of_config_log(const test_config *cfg)
{
        FILE *tmp = tmpfile();
        int saved = dup(STDERR_FILENO);
        long size;
        char *buf;

        assert_non_null(tmp);
        assert_int_equal(dup2(fileno(tmp), STDERR_FILENO), STDERR_FILENO);
        ks_config_log(vars, N_VARS, cfg);
        assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
        close(saved);
        size = lseek(fileno(tmp), 0, SEEK_END);
        buf = calloc(1, (size_t)size + 1);
        assert_non_null(buf);
        assert_int_equal(pread(fileno(tmp), buf, (size_t)size, 0), size);
        fclose(tmp);
        return buf;
}

static void test_config_log(void **state)
{
        test_config cfg;
        char err[256], *out;
        json_t *line, *c;
        (void)state;

        ks_log_init("test", KS_LOG_INFO);
        setenv("KS_TEST_WORKERS", "12", 1);
        assert_int_equal(ks_config_load(vars, N_VARS, &cfg, err, sizeof(err)), 0);
        out = capture_stderr_of_config_log(&cfg);
        line = json_loads(out, 0, NULL);
        assert_non_null(line);
        assert_string_equal(json_string_value(json_object_get(line, "level")), "info");
        c = json_object_get(line, "config");
        assert_true(json_is_object(c));
        assert_int_equal(json_integer_value(json_object_get(c, "KS_TEST_WORKERS")), 12);
        assert_int_equal(json_integer_value(json_object_get(c, "KS_TEST_OFFSET")), -3);
        assert_true(json_is_false(json_object_get(c, "KS_TEST_DEBUG")));
        assert_string_equal(json_string_value(json_object_get(c, "KS_TEST_NAME")), "keelson");
        assert_string_equal(json_string_value(json_object_get(c, "KS_TEST_DSN")), "(secret)");
        assert_lacks(out, "default-pw-7731");
        json_decref(line);
        free(out);
        ks_config_free(vars, N_VARS, &cfg);
}

/* ---- ks_config_init: exit codes, in a child process ------------------------ */

typedef struct child_result {
        int status; /* exit code, or -1 if it did not exit normally */
        char out[8192];
        char err[8192];
} child_result;

static void read_all(int fd, char *buf, size_t cap)
{
        size_t len = 0;
        ssize_t n;
        while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0) {
                len += (size_t)n;
        }
        buf[len] = '\0';
}

/* Runs ks_config_init(argv) in a child; the child exits 0 if it returns. */
static void run_init(char **argv, int argc, child_result *r)
{
        FILE *out = tmpfile(), *err = tmpfile();
        int st = 0;
        pid_t pid;

        assert_non_null(out);
        assert_non_null(err);
        fflush(stdout);
        fflush(stderr);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                test_config cfg;
                dup2(fileno(out), STDOUT_FILENO);
                dup2(fileno(err), STDERR_FILENO);
                ks_config_init(argc, argv, "keelson-test: a test binary", vars, N_VARS, &cfg);
                ks_config_free(vars, N_VARS, &cfg);
                _exit(0);
        }
        assert_int_equal(waitpid(pid, &st, 0), pid);
        r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        lseek(fileno(out), 0, SEEK_SET);
        lseek(fileno(err), 0, SEEK_SET);
        read_all(fileno(out), r->out, sizeof(r->out));
        read_all(fileno(err), r->err, sizeof(r->err));
        fclose(out);
        fclose(err);
}

static void test_init_help(void **state)
{
        char *argv_long[] = {"/usr/bin/keelson-test", "--help", NULL};
        char *argv_short[] = {"keelson-test", "-h", NULL};
        child_result *r = malloc(sizeof(*r));
        (void)state;

        assert_non_null(r);
        /* Help works even when the environment is bad. */
        setenv("KS_TEST_WORKERS", "bogus", 1);
        run_init(argv_long, 2, r);
        assert_int_equal(r->status, 0);
        assert_contains(r->out, "Usage: keelson-test");
        assert_contains(r->out, "KS_TEST_WORKERS");
        assert_contains(r->out, "KS_TEST_NOTE");
        assert_lacks(r->out, "default-pw-7731");
        run_init(argv_short, 2, r);
        assert_int_equal(r->status, 0);
        assert_contains(r->out, "KS_TEST_DSN");
        free(r);
}

static void test_init_bad_value_exits_2(void **state)
{
        char *argv[] = {"keelson-test", NULL};
        char *argv_extra[] = {"keelson-test", "--verbose", NULL};
        child_result *r = malloc(sizeof(*r));
        (void)state;

        assert_non_null(r);
        setenv("KS_TEST_WORKERS", "300", 1);
        run_init(argv, 1, r);
        assert_int_equal(r->status, 2);
        assert_contains(r->err, "KS_TEST_WORKERS=300: expected an integer in [1, 256]");
        assert_string_equal(r->out, "");

        unsetenv("KS_TEST_WORKERS");
        run_init(argv_extra, 2, r);
        assert_int_equal(r->status, 2);
        assert_contains(r->err, "--verbose");
        free(r);
}

static void test_init_ok_logs_config(void **state)
{
        char *argv[] = {"keelson-test", NULL};
        child_result *r = malloc(sizeof(*r));
        (void)state;

        assert_non_null(r);
        ks_log_init("test", KS_LOG_INFO);
        setenv("KS_TEST_DSN", "postgresql://u:live-pw-5521@h/db", 1);
        run_init(argv, 1, r);
        assert_int_equal(r->status, 0);
        assert_contains(r->err, "\"KS_TEST_WORKERS\":4");
        assert_contains(r->err, "\"KS_TEST_DSN\":\"(secret)\"");
        assert_lacks(r->err, "live-pw-5521");
        free(r);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup(test_defaults, clear_env),
            cmocka_unit_test_setup(test_env_overrides, clear_env),
            cmocka_unit_test_setup(test_bool_spellings, clear_env),
            cmocka_unit_test_setup(test_int64_limits, clear_env),
            cmocka_unit_test_setup(test_int_rejections, clear_env),
            cmocka_unit_test_setup(test_bool_rejections, clear_env),
            cmocka_unit_test_setup(test_required_missing, clear_env),
            cmocka_unit_test_setup(test_empty_nonempty, clear_env),
            cmocka_unit_test_setup(test_secret_not_in_errors, clear_env),
            cmocka_unit_test_setup(test_help, clear_env),
            cmocka_unit_test_setup(test_config_log, clear_env),
            cmocka_unit_test_setup(test_init_help, clear_env),
            cmocka_unit_test_setup(test_init_bad_value_exits_2, clear_env),
            cmocka_unit_test_setup(test_init_ok_logs_config, clear_env),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
