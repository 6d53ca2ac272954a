/*
 * The admin console's session cookie and its CSRF rule (console_session.h).
 */
#include "console_session.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "connect.h"
#include "ks_clock.h"

#define MS_PER_S 1000

/* The cookie's attributes: __Host- demands Secure, Path=/ and no Domain. */
#define COOKIE_ATTRS "Path=/; HttpOnly; Secure; SameSite=Strict"

bool gw_console_marked(const char *value)
{
        return value != NULL && strcmp(value, "1") == 0;
}

static bool is_ows(char ch)
{
        return ch == ' ' || ch == '\t';
}

/* base64url, as auth makes session tokens (and a cookie-octet besides). */
static bool token_ok(const char *s, size_t len)
{
        if (len == 0 || len > GW_TOKEN_MAX) {
                return false;
        }
        for (size_t i = 0; i < len; i++) {
                char ch = s[i];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_')) {
                        return false;
                }
        }
        return true;
}

/* Looks through one Cookie line; *found counts the session cookies seen so far. */
static int scan_line(const char *line, int *found, const char **tok, size_t *len)
{
        static const char name[] = GW_SESSION_COOKIE;
        const size_t name_len = sizeof(name) - 1;
        const char *p = line;
        while (*p != '\0') {
                while (is_ows(*p) || *p == ';') {
                        p++;
                }
                const char *end = strchr(p, ';');
                size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
                while (n > 0 && is_ows(p[n - 1])) {
                        n--;
                }
                if (n > name_len && memcmp(p, name, name_len) == 0 && p[name_len] == '=') {
                        if (++*found > 1) {
                                return -1; /* which one is the caller's? neither */
                        }
                        *tok = p + name_len + 1;
                        *len = n - name_len - 1;
                        if (!token_ok(*tok, *len)) {
                                return -1;
                        }
                } else if (n == name_len && memcmp(p, name, name_len) == 0) {
                        return -1; /* the name without a value */
                }
                if (end == NULL) {
                        break;
                }
                p = end + 1;
        }
        return 0;
}

int gw_console_cookie(const char *const *lines, size_t n, const char **tok, size_t *len)
{
        int found = 0;
        *tok = NULL;
        *len = 0;
        for (size_t i = 0; i < n; i++) {
                if (lines[i] != NULL && scan_line(lines[i], &found, tok, len) != 0) {
                        *tok = NULL;
                        *len = 0;
                        return -1;
                }
        }
        return found == 1 ? 1 : 0;
}

/* Whether origin ("https://host[:port]") names host ("host[:port]"). */
static bool origin_is_host(const char *origin, const char *host)
{
        const char *authority = NULL;
        if (strncasecmp(origin, "https://", 8) == 0) {
                authority = origin + 8;
        } else if (strncasecmp(origin, "http://", 7) == 0) {
                authority = origin + 7;
        } else {
                return false; /* "null", another scheme */
        }
        return host != NULL && host[0] != '\0' && strcasecmp(authority, host) == 0;
}

int gw_console_csrf(const char *console, const char *origin, const char *host,
                    const char *fetch_site)
{
        if (!gw_console_marked(console)) {
                return GW_CONSOLE_NOT_CONSOLE;
        }
        if (origin != NULL && !origin_is_host(origin, host)) {
                return GW_CONSOLE_CROSS_SITE;
        }
        if (fetch_site != NULL && strcmp(fetch_site, "same-origin") != 0) {
                return GW_CONSOLE_CROSS_SITE;
        }
        return GW_CONSOLE_OK;
}

int gw_console_set_cookie(char *out, size_t cap, const char *token, int64_t max_age_s)
{
        int n = 0;
        if (token == NULL) {
                n = snprintf(out, cap, "%s=; Max-Age=0; %s", GW_SESSION_COOKIE, COOKIE_ATTRS);
        } else {
                if (!token_ok(token, strlen(token))) {
                        return -1;
                }
                n = snprintf(out, cap, "%s=%s; Max-Age=%lld; %s", GW_SESSION_COOKIE, token,
                             (long long)(max_age_s > 0 ? max_age_s : 1), COOKIE_ATTRS);
        }
        return n > 0 && (size_t)n < cap ? n : -1;
}

static int cookie_of(const gw_req *req, const char **tok, size_t *len)
{
        const char *lines[GW_COOKIE_LINES_MAX];
        if (gw_req_header_count(req, "Cookie") > GW_COOKIE_LINES_MAX) {
                return -1; /* more than we read: one could hide a second cookie */
        }
        size_t n = gw_req_header_last(req, "Cookie", lines, GW_COOKIE_LINES_MAX);
        return gw_console_cookie(lines, n, tok, len);
}

int gw_console_caller_token(const gw_req *req, const char **tok, size_t *len)
{
        const char *authz = gw_req_header(req, "Authorization");
        if (authz != NULL) { /* decides alone: a cookie beside it is not looked at */
                return gw_bearer_token(authz, tok, len) == 0 ? GW_CONSOLE_OK
                                                             : GW_CONSOLE_BAD_BEARER;
        }
        int found = cookie_of(req, tok, len);
        if (found == 0) {
                return GW_CONSOLE_NO_TOKEN;
        }
        if (found < 0) {
                return GW_CONSOLE_BAD_COOKIE;
        }
        int rc =
            gw_console_csrf(gw_req_header(req, GW_CONSOLE_HEADER), gw_req_header(req, "Origin"),
                            gw_req_header(req, "Host"), gw_req_header(req, "Sec-Fetch-Site"));
        gw_codec codec = GW_CODEC_PROTO;
        if (rc == GW_CONSOLE_OK &&
            (gw_connect_codec(gw_req_header(req, "Content-Type"), &codec) != 0 ||
             codec != GW_CODEC_JSON)) {
                rc = GW_CONSOLE_NOT_JSON; /* a proto reply would carry tokens unblanked */
        }
        if (rc != GW_CONSOLE_OK) {
                *tok = NULL;
                *len = 0;
        }
        return rc;
}

const char *gw_console_refusal_message(int refusal)
{
        switch (refusal) {
        case GW_CONSOLE_BAD_COOKIE:
                return "malformed session cookie";
        case GW_CONSOLE_NOT_CONSOLE:
                return "session cookie refused: send X-Keelson-Console: 1 (or use a bearer token)";
        case GW_CONSOLE_CROSS_SITE:
                return "session cookie refused: the request is not from the console's own origin";
        case GW_CONSOLE_NOT_JSON:
                return "session cookie refused: console requests are application/json";
        default:
                return "missing bearer token"; /* no token, or a malformed Authorization */
        }
}

static void add_cookie(gw_req *req, const char *token, int64_t max_age_s)
{
        char value[GW_SET_COOKIE_MAX];
        if (gw_console_set_cookie(value, sizeof(value), token, max_age_s) > 0) {
                gw_req_add_header(req, "Set-Cookie", value);
        }
        explicit_bzero(value, sizeof(value));
}

/* The seconds until expires_at_unix_ms (a field of msg), or a day when msg has none. */
static int64_t max_age_of(const ProtobufCMessage *msg)
{
        const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(
            msg->descriptor, GW_SESSION_EXPIRY_FIELD);
        if (f == NULL || f->type != PROTOBUF_C_TYPE_INT64 ||
            f->label == PROTOBUF_C_LABEL_REPEATED) {
                return 24 * 3600;
        }
        int64_t expires_ms = *(const int64_t *)(const void *)((const char *)msg + f->offset);
        return (expires_ms - ks_now_ms()) / MS_PER_S;
}

void gw_console_reply(gw_req *req, const char *method, ProtobufCMessage *msg)
{
        if (req == NULL || msg == NULL ||
            !gw_console_marked(gw_req_header(req, GW_CONSOLE_HEADER))) {
                return;
        }
        if (method != NULL && strcmp(method, GW_CONSOLE_LOGOUT) == 0) {
                add_cookie(req, NULL, 0);
                return;
        }
        const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(
            msg->descriptor, GW_SESSION_TOKEN_FIELD);
        if (f == NULL || f->type != PROTOBUF_C_TYPE_STRING ||
            f->label == PROTOBUF_C_LABEL_REPEATED) {
                return;
        }
        char *token = *(char **)(void *)((char *)msg + f->offset);
        if (token == NULL || token[0] == '\0') {
                return;
        }
        int rc =
            gw_console_csrf(gw_req_header(req, GW_CONSOLE_HEADER), gw_req_header(req, "Origin"),
                            gw_req_header(req, "Host"), gw_req_header(req, "Sec-Fetch-Site"));
        if (rc == GW_CONSOLE_OK) {
                add_cookie(req, token, max_age_of(msg));
        }
        /* Blanked in place: the message still owns (and frees) the string. */
        explicit_bzero(token, strlen(token));
}
