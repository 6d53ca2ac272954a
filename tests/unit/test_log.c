/*
 * ks_log: what lands on stderr. stderr is pointed at a temporary file around
 * each call, then every line is parsed back with jansson.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "ks_log.h"

/* ---- capturing stderr ---------------------------------------------------- */

static int saved_stderr = -1;
static FILE *capture_file;

static void capture_begin(void)
{
        fflush(stderr);
        capture_file = tmpfile();
        assert_non_null(capture_file);
        saved_stderr = dup(STDERR_FILENO);
        assert_true(saved_stderr >= 0);
        assert_true(dup2(fileno(capture_file), STDERR_FILENO) >= 0);
}

/* Restores stderr and returns everything written meanwhile (caller frees). */
static char *capture_end(void)
{
        long size;
        char *buf;

        fflush(stderr);
        assert_true(dup2(saved_stderr, STDERR_FILENO) >= 0);
        close(saved_stderr);
        size = lseek(fileno(capture_file), 0, SEEK_END);
        assert_true(size >= 0);
        buf = malloc((size_t)size + 1);
        assert_non_null(buf);
        assert_int_equal(pread(fileno(capture_file), buf, (size_t)size, 0), size);
        buf[size] = '\0';
        fclose(capture_file);
        return buf;
}

static size_t count_lines(const char *s)
{
        size_t n = 0;
        for (; *s != '\0'; s++) {
                n += *s == '\n';
        }
        return n;
}

/* The single line in out, parsed; fails unless out is exactly one line. */
static json_t *parse_one_line(const char *out)
{
        json_error_t err;
        json_t *j;
        size_t len = strlen(out);

        assert_true(len > 0);
        assert_int_equal(out[len - 1], '\n');
        assert_int_equal(count_lines(out), 1);
        j = json_loadb(out, len - 1, 0, &err);
        if (j == NULL) {
                fail_msg("not JSON (%s): %s", err.text, out);
        }
        assert_true(json_is_object(j));
        return j;
}

static const char *str_field(json_t *j, const char *key)
{
        json_t *v = json_object_get(j, key);
        if (!json_is_string(v)) {
                fail_msg("field %s is not a string", key);
        }
        return json_string_value(v);
}

static int setup(void **state)
{
        (void)state;
        ks_log_init("testsvc", KS_LOG_DEBUG);
        return 0;
}

/* ---- tests --------------------------------------------------------------- */

static void assert_rfc3339_ms_utc(const char *ts)
{
        struct tm tm = {0};
        const char *rest;
        time_t t, now = time(NULL);

        /* 2026-12-02T16:04:52.123Z */
        assert_int_equal(strlen(ts), 24);
        rest = strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm);
        assert_non_null(rest);
        assert_int_equal(rest[0], '.');
        assert_true(rest[1] >= '0' && rest[1] <= '9' && rest[2] >= '0' && rest[2] <= '9' &&
                    rest[3] >= '0' && rest[3] <= '9');
        assert_string_equal(rest + 4, "Z");
        /* It is UTC and it is today's date, give or take a clock change. */
        t = timegm(&tm);
        assert_true(t > now - 86400 && t < now + 86400);
}

static void test_line_fields(void **state)
{
        char *out;
        json_t *j;
        (void)state;

        capture_begin();
        ks_log(KS_LOG_INFO, "req-42", "listening", "{s:s, s:i, s:b}", "addr", "127.0.0.1", "port",
               7400, "tls", 0);
        out = capture_end();
        j = parse_one_line(out);
        assert_rfc3339_ms_utc(str_field(j, "ts"));
        assert_string_equal(str_field(j, "level"), "info");
        assert_string_equal(str_field(j, "service"), "testsvc");
        assert_string_equal(str_field(j, "request_id"), "req-42");
        assert_string_equal(str_field(j, "msg"), "listening");
        assert_string_equal(str_field(j, "addr"), "127.0.0.1");
        assert_int_equal(json_integer_value(json_object_get(j, "port")), 7400);
        assert_true(json_is_false(json_object_get(j, "tls")));
        assert_int_equal(json_object_size(j), 8);
        /* The line starts with the timestamp, as documented. */
        assert_int_equal(strncmp(out, "{\"ts\":", 6), 0);
        json_decref(j);
        free(out);
}

static void test_no_request_id_no_fields(void **state)
{
        char *out;
        json_t *j;
        (void)state;

        capture_begin();
        ks_log_error(NULL, "boom", NULL);
        out = capture_end();
        j = parse_one_line(out);
        assert_string_equal(str_field(j, "level"), "error");
        assert_string_equal(str_field(j, "msg"), "boom");
        assert_null(json_object_get(j, "request_id"));
        assert_int_equal(json_object_size(j), 4);
        json_decref(j);
        free(out);
}

static void test_level_filter(void **state)
{
        char *out;
        json_t *j;
        (void)state;

        ks_log_init("testsvc", KS_LOG_WARN);
        capture_begin();
        ks_log_debug(NULL, "debug line", NULL);
        ks_log_info(NULL, "info line", "{s:i}", "n", 1);
        ks_log_warn(NULL, "warn line", NULL);
        ks_log_error(NULL, "error line", NULL);
        out = capture_end();
        ks_log_init("testsvc", KS_LOG_DEBUG);

        assert_int_equal(count_lines(out), 2);
        assert_null(strstr(out, "debug line"));
        assert_null(strstr(out, "info line"));
        j = parse_one_line(strchr(out, '\n') + 1);
        assert_string_equal(str_field(j, "level"), "error");
        json_decref(j);
        *(strchr(out, '\n') + 1) = '\0';
        j = parse_one_line(out);
        assert_string_equal(str_field(j, "level"), "warn");
        assert_string_equal(str_field(j, "msg"), "warn line");
        json_decref(j);
        free(out);

        /* Debug lines appear once the level allows them. */
        capture_begin();
        ks_log_debug(NULL, "debug line", NULL);
        out = capture_end();
        j = parse_one_line(out);
        assert_string_equal(str_field(j, "level"), "debug");
        json_decref(j);
        free(out);
}

static void test_level_parse(void **state)
{
        (void)state;
        assert_int_equal(ks_log_level_parse("debug"), KS_LOG_DEBUG);
        assert_int_equal(ks_log_level_parse("info"), KS_LOG_INFO);
        assert_int_equal(ks_log_level_parse("warn"), KS_LOG_WARN);
        assert_int_equal(ks_log_level_parse("error"), KS_LOG_ERROR);
        assert_int_equal(ks_log_level_parse("ERROR"), KS_LOG_ERROR);
        assert_int_equal(ks_log_level_parse("verbose"), -1);
        assert_int_equal(ks_log_level_parse(""), -1);
        assert_int_equal(ks_log_level_parse(NULL), -1);
}

static void test_redaction(void **state)
{
        char *out;
        json_t *j, *user;
        (void)state;

        capture_begin();
        ks_log_info("r", "login", "{s:s, s:s, s:s, s:s, s:s, s:{s:s, s:s}, s:s, s:i}", "password",
                    "hunter2-pw", "api_key", "ak_live_SECRETVALUE", "Authorization",
                    "Bearer tok_ABC", "session_token", "st_XYZ", "request_body",
                    "{\"card\":\"4242\"}", "user", "email", "a@example.com", "Password",
                    "nested-pw", "keyspace", "visible", "attempts", 3);
        out = capture_end();
        j = parse_one_line(out);
        assert_string_equal(str_field(j, "password"), "[redacted]");
        assert_string_equal(str_field(j, "api_key"), "[redacted]");
        assert_string_equal(str_field(j, "Authorization"), "[redacted]");
        assert_string_equal(str_field(j, "session_token"), "[redacted]");
        assert_string_equal(str_field(j, "request_body"), "[redacted]");
        user = json_object_get(j, "user");
        assert_string_equal(str_field(user, "email"), "a@example.com");
        assert_string_equal(str_field(user, "Password"), "[redacted]");
        /* Names that merely start with "key" are not secrets. */
        assert_string_equal(str_field(j, "keyspace"), "visible");
        assert_int_equal(json_integer_value(json_object_get(j, "attempts")), 3);
        /* No secret survives anywhere in the raw line. */
        assert_null(strstr(out, "hunter2"));
        assert_null(strstr(out, "SECRETVALUE"));
        assert_null(strstr(out, "tok_ABC"));
        assert_null(strstr(out, "st_XYZ"));
        assert_null(strstr(out, "4242"));
        assert_null(strstr(out, "nested-pw"));
        json_decref(j);
        free(out);
}

/* A secret object or array is replaced whole, not inspected. */
static void test_redaction_containers(void **state)
{
        char *out;
        json_t *j;
        (void)state;

        capture_begin();
        ks_log_info(NULL, "m", "{s:{s:s}, s:[s]}", "secrets", "a", "x-one", "cookie", "x-two");
        out = capture_end();
        j = parse_one_line(out);
        assert_string_equal(str_field(j, "secrets"), "[redacted]");
        assert_string_equal(str_field(j, "cookie"), "[redacted]");
        assert_null(strstr(out, "x-one"));
        assert_null(strstr(out, "x-two"));
        json_decref(j);
        free(out);
}

static void assert_logged_with_error(char *out)
{
        json_t *j = parse_one_line(out);
        assert_string_equal(str_field(j, "msg"), "still here");
        assert_string_equal(str_field(j, "request_id"), "rid");
        assert_true(strlen(str_field(j, "log_error")) > 0);
        json_decref(j);
        free(out);
}

static void test_bad_format_still_logs(void **state)
{
        (void)state;
        capture_begin();
        ks_log_warn("rid", "still here", "{s:s", "k", "v"); /* unbalanced */
        assert_logged_with_error(capture_end());
        capture_begin();
        ks_log_warn("rid", "still here", "{s:q}", "k", "v"); /* unknown conversion */
        assert_logged_with_error(capture_end());
        capture_begin();
        ks_log_warn("rid", "still here", "i", 5); /* not an object */
        assert_logged_with_error(capture_end());
        capture_begin();
        ks_log_warn("rid", "still here", "{s:s}", "k", (const char *)NULL); /* json_pack refuses */
        assert_logged_with_error(capture_end());
}

static void test_core_keys_not_overwritten(void **state)
{
        char *out;
        json_t *j;
        (void)state;

        capture_begin();
        ks_log_info(NULL, "real", "{s:s, s:s}", "level", "fake", "msg", "fake msg");
        out = capture_end();
        j = parse_one_line(out);
        assert_string_equal(str_field(j, "level"), "info");
        assert_string_equal(str_field(j, "msg"), "real");
        assert_string_equal(str_field(j, "field_level"), "fake");
        assert_string_equal(str_field(j, "field_msg"), "fake msg");
        json_decref(j);
        free(out);
}

static void test_not_utf8_and_control_chars(void **state)
{
        char *out;
        json_t *j;
        (void)state;

        capture_begin();
        ks_log_info(NULL, "caf\xe9 \x01 line\nbreak", NULL);
        out = capture_end();
        j = parse_one_line(out);
        assert_string_equal(str_field(j, "msg"), "caf? \x01 line\nbreak");
        json_decref(j);
        free(out);
}

static void test_long_lines(void **state)
{
        size_t big = 10000, huge = 100000;
        char *msg = malloc(huge + 1), *out;
        json_t *j;
        (void)state;

        assert_non_null(msg);
        memset(msg, 'x', huge);
        /* Past the stack buffer: written whole. */
        msg[big] = '\0';
        capture_begin();
        ks_log_info(NULL, msg, NULL);
        out = capture_end();
        j = parse_one_line(out);
        assert_int_equal(strlen(str_field(j, "msg")), big);
        json_decref(j);
        free(out);
        /* A field past the stack buffer, after a short message: written whole. */
        capture_begin();
        ks_log_info(NULL, "short", "{s:s, s:i}", "detail", msg, "n", 7);
        out = capture_end();
        j = parse_one_line(out);
        assert_int_equal(strlen(str_field(j, "detail")), big);
        assert_int_equal(json_integer_value(json_object_get(j, "n")), 7);
        assert_string_equal(str_field(j, "msg"), "short");
        json_decref(j);
        free(out);
        /* Past the line bound: still one valid line, shortened, saying so. */
        msg[big] = 'x';
        msg[huge] = '\0';
        capture_begin();
        ks_log_info("rid", msg, NULL);
        out = capture_end();
        j = parse_one_line(out);
        assert_true(strlen(out) < 64 * 1024);
        assert_true(strlen(str_field(j, "msg")) > 0);
        assert_true(strlen(str_field(j, "log_error")) > 0);
        assert_string_equal(str_field(j, "request_id"), "rid");
        json_decref(j);
        free(out);
        free(msg);
}

#define THREADS          4
#define LINES_PER_THREAD 200

static void *log_many(void *arg)
{
        char pad[1500];
        int i, t = (int)(intptr_t)arg;

        memset(pad, 'a' + t, sizeof(pad) - 1);
        pad[sizeof(pad) - 1] = '\0';
        for (i = 0; i < LINES_PER_THREAD; i++) {
                ks_log_info(NULL, "concurrent", "{s:i, s:i, s:s}", "thread", t, "i", i, "pad", pad);
        }
        return NULL;
}

/* Lines written from several threads at once never interleave. */
static void test_concurrent_lines_whole(void **state)
{
        pthread_t th[THREADS];
        char *out, *line, *save = NULL;
        size_t n = 0;
        int t;
        (void)state;

        capture_begin();
        for (t = 0; t < THREADS; t++) {
                assert_int_equal(pthread_create(&th[t], NULL, log_many, (void *)(intptr_t)t), 0);
        }
        for (t = 0; t < THREADS; t++) {
                pthread_join(th[t], NULL);
        }
        out = capture_end();
        for (line = strtok_r(out, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
                json_t *j = json_loads(line, 0, NULL);
                assert_non_null(j);
                assert_int_equal(strlen(str_field(j, "pad")), 1499);
                json_decref(j);
                n++;
        }
        assert_int_equal(n, THREADS * LINES_PER_THREAD);
        free(out);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup(test_line_fields, setup),
            cmocka_unit_test_setup(test_no_request_id_no_fields, setup),
            cmocka_unit_test_setup(test_level_filter, setup),
            cmocka_unit_test(test_level_parse),
            cmocka_unit_test_setup(test_redaction, setup),
            cmocka_unit_test_setup(test_redaction_containers, setup),
            cmocka_unit_test_setup(test_bad_format_still_logs, setup),
            cmocka_unit_test_setup(test_core_keys_not_overwritten, setup),
            cmocka_unit_test_setup(test_not_utf8_and_control_chars, setup),
            cmocka_unit_test_setup(test_long_lines, setup),
            cmocka_unit_test_setup(test_concurrent_lines_whole, setup),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
