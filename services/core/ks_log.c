/*
 * ks_log: JSON lines on stderr, built with jansson.
 *
 * Each line is assembled in memory and handed to one write(2), so lines from
 * concurrent threads (and from replicas sharing a pipe, up to PIPE_BUF) do not
 * interleave. Field values whose key looks like a secret are replaced before
 * serialisation, at every nesting level.
 */
#include "ks_log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

/* Bounds: a line longer than this is replaced by a short error line. */
#define LOG_LINE_MAX    (64 * 1024)
#define LOG_STACK_BUF   4096
#define LOG_MSG_SHORT   512
#define LOG_DEPTH_MAX   8
#define LOG_SERVICE_MAX 64
#define LOG_REDACTED    "[redacted]"

static char log_service[LOG_SERVICE_MAX];
static atomic_int log_min_level = KS_LOG_INFO;

const char *const ks_log_level_names[] = {"debug", "info", "warn", "error", NULL};

#define LEVELS_N 4

void ks_log_init(const char *service, ks_log_level min_level)
{
        /* Called once at start-up, before any thread logs. */
        snprintf(log_service, sizeof(log_service), "%s", service != NULL ? service : "");
        if (min_level < KS_LOG_DEBUG || min_level > KS_LOG_ERROR) {
                min_level = KS_LOG_INFO;
        }
        atomic_store(&log_min_level, (int)min_level);
}

int ks_log_level_parse(const char *s)
{
        int i;

        if (s == NULL) {
                return -1;
        }
        for (i = 0; i < LEVELS_N; i++) {
                if (strcasecmp(s, ks_log_level_names[i]) == 0) {
                        return i;
                }
        }
        return -1;
}

/*
 * True for a field name that may carry a secret: it contains one of the
 * words below (case-insensitive) or ends in "key" (api_key, signing_key).
 */
static bool key_is_secret(const char *key)
{
        static const char *const words[] = {"password",      "passwd", "token", "secret",
                                            "authorization", "cookie", "body",  "credential"};
        size_t i, len = strlen(key);

        for (i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
                if (strcasestr(key, words[i]) != NULL) {
                        return true;
                }
        }
        return len >= 3 && strcasecmp(key + len - 3, "key") == 0;
}

/* Replaces secret-looking values in v, recursing into objects and arrays. */
static void redact(json_t *v, int depth)
{
        void *it;
        size_t i;

        if (json_is_object(v)) {
                for (it = json_object_iter(v); it != NULL; it = json_object_iter_next(v, it)) {
                        json_t *child = json_object_iter_value(it);
                        if (key_is_secret(json_object_iter_key(it))) {
                                json_object_iter_set_new(v, it, json_string(LOG_REDACTED));
                        } else if (depth >= LOG_DEPTH_MAX &&
                                   (json_is_object(child) || json_is_array(child))) {
                                /* Too deep to inspect: do not print what we did not check. */
                                json_object_iter_set_new(v, it, json_string("[too deep]"));
                        } else {
                                redact(child, depth + 1);
                        }
                }
        } else if (json_is_array(v)) {
                for (i = 0; i < json_array_size(v); i++) {
                        json_t *child = json_array_get(v, i);
                        if (depth >= LOG_DEPTH_MAX &&
                            (json_is_object(child) || json_is_array(child))) {
                                json_array_set_new(v, i, json_string("[too deep]"));
                        } else {
                                redact(child, depth + 1);
                        }
                }
        }
}

/* A JSON string for s, even when s is not UTF-8 (its high bytes become '?'). */
static json_t *safe_string(const char *s, size_t max)
{
        size_t len = strnlen(s, max), i;
        json_t *j = json_stringn(s, len);
        char *copy;

        if (j != NULL || (copy = malloc(len + 1)) == NULL) {
                return j;
        }
        for (i = 0; i < len; i++) {
                copy[i] = (unsigned char)s[i] >= 0x80 ? '?' : s[i];
        }
        j = json_stringn(copy, len);
        free(copy);
        return j;
}

static void format_ts(char *out, size_t out_len)
{
        struct timespec ts;
        struct tm tm;
        size_t n;

        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = strftime(out, out_len, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out + n, out_len - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

static const char *const core_keys[] = {"ts", "level", "service", "request_id", "msg"};

static bool is_core_key(const char *key)
{
        size_t i;

        for (i = 0; i < sizeof(core_keys) / sizeof(core_keys[0]); i++) {
                if (strcmp(key, core_keys[i]) == 0) {
                        return true;
                }
        }
        return false;
}

/*
 * Copies fields into line after the core keys. A field that would shadow a
 * core key keeps its value under "field_<name>" rather than overwrite it.
 */
static void merge_fields(json_t *line, json_t *fields)
{
        const char *key;
        json_t *value;
        char renamed[128];

        json_object_foreach(fields, key, value)
        {
                if (is_core_key(key)) {
                        snprintf(renamed, sizeof(renamed), "field_%s", key);
                        json_object_set(line, renamed, value);
                } else {
                        json_object_set(line, key, value);
                }
        }
}

static json_t *build_line(ks_log_level level, const char *request_id, const char *msg,
                          size_t msg_max)
{
        char ts[40];
        json_t *line = json_object();

        if (line == NULL) {
                return NULL;
        }
        format_ts(ts, sizeof(ts));
        json_object_set_new(line, "ts", json_string(ts));
        json_object_set_new(line, "level", json_string(ks_log_level_names[level]));
        /* Before ks_log_init, the program's own name stands in for the service. */
        json_object_set_new(
            line, "service",
            safe_string(log_service[0] != '\0' ? log_service : program_invocation_short_name,
                        LOG_SERVICE_MAX));
        if (request_id != NULL) {
                json_object_set_new(line, "request_id", safe_string(request_id, 128));
        }
        json_object_set_new(line, "msg", safe_string(msg != NULL ? msg : "", msg_max));
        return line;
}

static void write_all(const char *buf, size_t len)
{
        while (len > 0) {
                ssize_t n = write(STDERR_FILENO, buf, len);
                if (n < 0 && errno == EINTR) {
                        continue;
                }
                if (n <= 0) {
                        return; /* nowhere left to report a failing stderr */
                }
                buf += n;
                len -= (size_t)n;
        }
}

/* Serialises line plus '\n' and writes it; false if it is over the bound. */
static bool emit(const json_t *line)
{
        char stack[LOG_STACK_BUF], *buf = stack;
        size_t n = json_dumpb(line, stack, sizeof(stack) - 1, JSON_COMPACT);

        if (n == 0 || n > LOG_LINE_MAX) {
                return false;
        }
        if (n > sizeof(stack) - 1) {
                if ((buf = malloc(n + 1)) == NULL) {
                        return false;
                }
                n = json_dumpb(line, buf, n, JSON_COMPACT);
        }
        buf[n] = '\n';
        write_all(buf, n + 1);
        if (buf != stack) {
                free(buf);
        }
        return true;
}

static void emit_fallback(ks_log_level level, const char *request_id, const char *msg)
{
        json_t *line = build_line(level, request_id, msg, LOG_MSG_SHORT);

        if (line != NULL) {
                json_object_set_new(line, "log_error", json_string("log line over 64 KiB"));
                (void)emit(line);
                json_decref(line);
        }
}

void ks_log_prechecked(ks_log_level level, const char *request_id, const char *msg, json_t *fields)
{
        json_t *line;

        if (level < KS_LOG_DEBUG || level > KS_LOG_ERROR ||
            (int)level < atomic_load(&log_min_level) ||
            (line = build_line(level, request_id, msg, LOG_LINE_MAX)) == NULL) {
                json_decref(fields);
                return;
        }
        if (json_is_object(fields)) {
                merge_fields(line, fields);
        }
        json_decref(fields);
        if (!emit(line)) {
                emit_fallback(level, request_id, msg);
        }
        json_decref(line);
}

void ks_log(ks_log_level level, const char *request_id, const char *msg, const char *fields_fmt,
            ...)
{
        json_t *line, *fields = NULL;
        json_error_t jerr;
        va_list ap;

        if (level < KS_LOG_DEBUG || level > KS_LOG_ERROR ||
            (int)level < atomic_load(&log_min_level)) {
                return;
        }
        if ((line = build_line(level, request_id, msg, LOG_LINE_MAX)) == NULL) {
                return;
        }
        if (fields_fmt != NULL) {
                va_start(ap, fields_fmt);
                fields = json_vpack_ex(&jerr, 0, fields_fmt, ap);
                va_end(ap);
                if (fields == NULL) {
                        json_object_set_new(line, "log_error", safe_string(jerr.text, 160));
                } else if (!json_is_object(fields)) {
                        json_object_set_new(line, "log_error",
                                            json_string("fields_fmt is not an object"));
                } else {
                        redact(fields, 0);
                        merge_fields(line, fields);
                }
                json_decref(fields);
        }
        if (!emit(line)) {
                emit_fallback(level, request_id, msg);
        }
        json_decref(line);
}
