/*
 * ks_log: JSON lines on stderr. The fields are packed and serialised with
 * jansson; the keys every line has are written around them by hand.
 *
 * Each line is assembled in memory and handed to one write(2), so lines from
 * concurrent threads (and from replicas sharing a pipe, up to PIPE_BUF) do not
 * interleave. Field values whose key looks like a secret are replaced before
 * serialisation, at every nesting level.
 */
#include "ks_log.h"
#include "ks_text.h"

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
        char lower[64];
        size_t i, len = strlen(key);

        if (len >= sizeof(lower)) {
                for (i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
                        if (strcasestr(key, words[i]) != NULL) {
                                return true;
                        }
                }
                return strcasecmp(key + len - 3, "key") == 0;
        }
        /* Folded once, then searched for each word: cheaper than a strcasestr per word. */
        for (i = 0; i <= len; i++) {
                char c = key[i];
                lower[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
        }
        for (i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
                if (strstr(lower, words[i]) != NULL) {
                        return true;
                }
        }
        return len >= 3 && strcmp(lower + len - 3, "key") == 0;
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

/*
 * A line is written straight into a buffer: the core keys by hand, then the
 * fields object as jansson serialises it, its opening brace replaced by a
 * comma. No object is built for the line itself (that, and merging the
 * fields into it, was most of a line's cost).
 */
typedef struct linebuf {
        char *p;
        size_t len, cap;
        bool failed; /* out of memory or over LOG_LINE_MAX */
        char stack[LOG_STACK_BUF];
} linebuf;

static void lb_init(linebuf *b)
{
        b->p = b->stack;
        b->len = 0;
        b->cap = sizeof(b->stack);
        b->failed = false;
}

static void lb_free(linebuf *b)
{
        if (b->p != b->stack) {
                free(b->p);
        }
}

/*
 * Room for n more bytes; false (and failed) out of memory, or when even the
 * room asked is past what escaping a line of LOG_LINE_MAX could need (emit
 * checks the line's actual length against LOG_LINE_MAX).
 */
static bool lb_reserve(linebuf *b, size_t n)
{
        if (b->failed || b->len + n > KS_JSON_ESCAPED_MAX(LOG_LINE_MAX) + 64) {
                b->failed = true;
                return false;
        }
        if (b->len + n <= b->cap) {
                return true;
        }
        size_t cap = b->cap * 2;
        while (cap < b->len + n) {
                cap *= 2;
        }
        char *p = b->p == b->stack ? malloc(cap) : realloc(b->p, cap);
        if (p == NULL) {
                b->failed = true;
                return false;
        }
        if (b->p == b->stack) {
                memcpy(p, b->stack, b->len);
        }
        b->p = p;
        b->cap = cap;
        return true;
}

static void lb_add(linebuf *b, const char *s, size_t n)
{
        if (lb_reserve(b, n)) {
                memcpy(b->p + b->len, s, n);
                b->len += n;
        }
}

#define lb_lit(b, lit) lb_add((b), (lit), sizeof(lit) - 1)

/* A JSON value serialised by jansson (JSON_ENCODE_ANY: a string alone). */
static void lb_json(linebuf *b, const json_t *v)
{
        size_t room = b->failed ? 0 : b->cap - b->len;
        size_t n = json_dumpb(v, b->p + b->len, room, JSON_COMPACT | JSON_ENCODE_ANY);

        if (n == 0) {
                b->failed = true;
        } else if (n > room) {
                if (lb_reserve(b, n)) {
                        n = json_dumpb(v, b->p + b->len, n, JSON_COMPACT | JSON_ENCODE_ANY);
                        b->len += n;
                }
        } else {
                b->len += n;
        }
}

/*
 * s (at most max bytes) as a JSON string. Not valid UTF-8: each byte above
 * 0x7f becomes '?' (the rest of the line stays readable).
 */
static void lb_string(linebuf *b, const char *s, size_t max)
{
        size_t len = strnlen(s, max);
        bool valid = ks_utf8_valid(s, len);

        if (!lb_reserve(b, KS_JSON_ESCAPED_MAX(len) + 2)) {
                return;
        }
        b->p[b->len++] = '"';
        if (valid) {
                b->len += ks_json_escape(b->p + b->len, s, len);
        } else {
                for (size_t i = 0; i < len; i++) {
                        char c = (unsigned char)s[i] >= 0x80 ? '?' : s[i];
                        b->len += ks_json_escape(b->p + b->len, &c, 1);
                }
        }
        b->p[b->len++] = '"';
}

/*
 * "YYYY-MM-DDTHH:MM:SS.mmmZ". The part down to the second is kept per
 * thread and made again when the second changes.
 */
static void lb_ts(linebuf *b)
{
        static _Thread_local time_t cached_sec = -1;
        static _Thread_local char cached[32];
        static _Thread_local size_t cached_len;
        struct timespec ts;
        char ms[6];

        clock_gettime(CLOCK_REALTIME, &ts);
        if (ts.tv_sec != cached_sec) {
                struct tm tm;
                gmtime_r(&ts.tv_sec, &tm);
                cached_len = strftime(cached, sizeof(cached), "%Y-%m-%dT%H:%M:%S", &tm);
                cached_sec = ts.tv_sec;
        }
        long m = ts.tv_nsec / 1000000;
        ms[0] = '.';
        ms[1] = (char)('0' + m / 100);
        ms[2] = (char)('0' + m / 10 % 10);
        ms[3] = (char)('0' + m % 10);
        ms[4] = 'Z';
        ms[5] = '"';
        lb_lit(b, "\"");
        lb_add(b, cached, cached_len);
        lb_add(b, ms, sizeof(ms));
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
 * A field that would shadow a core key keeps its value under
 * "field_<name>" rather than overwrite it.
 */
static void rename_core_keys(json_t *fields)
{
        const char *key;
        json_t *value;
        void *tmp;
        char renamed[128];

        json_object_foreach_safe(fields, tmp, key, value)
        {
                if (is_core_key(key)) {
                        snprintf(renamed, sizeof(renamed), "field_%s", key);
                        json_object_set(fields, renamed, value);
                        json_object_del(fields, key);
                }
        }
}

/* The line up to its fields: the core keys, without the closing brace. */
static void build_line(linebuf *b, ks_log_level level, const char *request_id, const char *msg,
                       size_t msg_max)
{
        lb_lit(b, "{\"ts\":");
        lb_ts(b);
        lb_lit(b, ",\"level\":\"");
        lb_add(b, ks_log_level_names[level], strlen(ks_log_level_names[level]));
        lb_lit(b, "\",\"service\":");
        /* Before ks_log_init, the program's own name stands in for the service. */
        lb_string(b, log_service[0] != '\0' ? log_service : program_invocation_short_name,
                  LOG_SERVICE_MAX);
        if (request_id != NULL) {
                lb_lit(b, ",\"request_id\":");
                lb_string(b, request_id, 128);
        }
        lb_lit(b, ",\"msg\":");
        lb_string(b, msg != NULL ? msg : "", msg_max);
}

/* ,"log_error":"why" */
static void add_log_error(linebuf *b, const char *why)
{
        lb_lit(b, ",\"log_error\":");
        lb_string(b, why, 160);
}

/* The fields object's members after the core keys (fields may be NULL). */
static void add_fields(linebuf *b, json_t *fields)
{
        if (fields == NULL || json_object_size(fields) == 0) {
                return;
        }
        rename_core_keys(fields);
        size_t at = b->len;
        lb_json(b, fields);
        if (!b->failed) {
                b->p[at] = ','; /* its '{'; its '}' closes the line */
                b->len--;
        }
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

/* Closes the line and writes it; false if it is over the bound or out of memory. */
static bool emit(linebuf *b)
{
        lb_lit(b, "}\n");
        if (b->failed || b->len > LOG_LINE_MAX + 1) {
                return false;
        }
        write_all(b->p, b->len);
        return true;
}

static void emit_fallback(ks_log_level level, const char *request_id, const char *msg)
{
        linebuf b;

        lb_init(&b);
        build_line(&b, level, request_id, msg, LOG_MSG_SHORT);
        add_log_error(&b, "log line over 64 KiB");
        (void)emit(&b);
        lb_free(&b);
}

static void log_line(ks_log_level level, const char *request_id, const char *msg, json_t *fields,
                     const char *log_error)
{
        linebuf b;

        lb_init(&b);
        build_line(&b, level, request_id, msg, LOG_LINE_MAX);
        if (log_error != NULL) {
                add_log_error(&b, log_error);
        }
        add_fields(&b, fields);
        if (!emit(&b)) {
                emit_fallback(level, request_id, msg);
        }
        lb_free(&b);
}

static bool level_off(ks_log_level level)
{
        return level < KS_LOG_DEBUG || level > KS_LOG_ERROR ||
               (int)level < atomic_load_explicit(&log_min_level, memory_order_relaxed);
}

void ks_log_prechecked(ks_log_level level, const char *request_id, const char *msg, json_t *fields)
{
        if (!level_off(level)) {
                log_line(level, request_id, msg, json_is_object(fields) ? fields : NULL, NULL);
        }
        json_decref(fields);
}

void ks_log(ks_log_level level, const char *request_id, const char *msg, const char *fields_fmt,
            ...)
{
        json_t *fields = NULL;
        json_error_t jerr;
        const char *log_error = NULL;
        va_list ap;

        if (level_off(level)) {
                return;
        }
        if (fields_fmt != NULL) {
                va_start(ap, fields_fmt);
                fields = json_vpack_ex(&jerr, 0, fields_fmt, ap);
                va_end(ap);
                if (fields == NULL) {
                        log_error = jerr.text;
                } else if (!json_is_object(fields)) {
                        log_error = "fields_fmt is not an object";
                        json_decref(fields);
                        fields = NULL;
                } else {
                        redact(fields, 0);
                }
        }
        log_line(level, request_id, msg, fields, log_error);
        json_decref(fields);
}
