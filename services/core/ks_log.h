/*
 * ks_log: one JSON object per line on stderr:
 *   {"ts":"2026-12-02T16:04:52.123Z","level":"info","service":"auth",
 *    "request_id":"…","msg":"…", …fields}
 * Fields come from a jansson json_pack() format describing an object. A field
 * whose name looks like a secret (password, token, secret, key,
 * authorization, cookie, body) is written as "[redacted]" whatever its value:
 * the logger is the last line of defence, not the first.
 */
#ifndef KS_LOG_H
#define KS_LOG_H

typedef enum ks_log_level {
        KS_LOG_DEBUG = 0,
        KS_LOG_INFO = 1,
        KS_LOG_WARN = 2,
        KS_LOG_ERROR = 3,
} ks_log_level;

/* Sets the service name written in every line, and the minimum level. */
void ks_log_init(const char *service, ks_log_level min_level);

/* "debug", "info", "warn", "error", NULL: in level order. */
extern const char *const ks_log_level_names[];

/* Parses "debug"/"info"/"warn"/"error"; -1 if none of them. */
int ks_log_level_parse(const char *s);

/*
 * Writes one line. request_id may be NULL. fields_fmt may be NULL, or a
 * json_pack() format for an object, e.g. "{s:s, s:i}", "addr", a, "port", p.
 * Thread-safe: each line is written with one write(2).
 */
void ks_log(ks_log_level level, const char *request_id, const char *msg, const char *fields_fmt,
            ...);

/*
 * Writes one line with fields that skip the name-based redaction, because the
 * caller has already decided what is secret from a declarative table (the
 * effective configuration: KS_CFG_SECRET values arrive as "(secret)", and a
 * name such as KEELSON_GATEWAY_BODY_MAX_BYTES is not a body). Takes the
 * reference to fields (a jansson object). Nothing else should use this.
 */
typedef struct json_t json_t;
void ks_log_prechecked(ks_log_level level, const char *request_id, const char *msg, json_t *fields);

#define ks_log_debug(rid, msg, ...) ks_log(KS_LOG_DEBUG, (rid), (msg), __VA_ARGS__)
#define ks_log_info(rid, msg, ...)  ks_log(KS_LOG_INFO, (rid), (msg), __VA_ARGS__)
#define ks_log_warn(rid, msg, ...)  ks_log(KS_LOG_WARN, (rid), (msg), __VA_ARGS__)
#define ks_log_error(rid, msg, ...) ks_log(KS_LOG_ERROR, (rid), (msg), __VA_ARGS__)

#endif
