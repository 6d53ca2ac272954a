/*
 * The admin console's static files under /console/ (console.h).
 */
#include "console.h"

#include <string.h>
#include <strings.h>

#include "connect.h"
#include "ks_rpc.h"

#define CONSOLE_ROOT     "/console"
#define SEGMENTS_MAX     8   /* /console/a/b/...: deeper is refused */
#define NAME_MAX_BYTES   128 /* one file name */
#define ETAG_LIST_MAX    16  /* entity tags looked at in one If-None-Match */
#define CACHE_CONTROL    "no-cache"
#define PERMISSIONS_NONE "camera=(), microphone=(), geolocation=(), payment=(), usb=()"

bool gw_console_path(const char *path)
{
        if (path == NULL) {
                return false;
        }
        return strcmp(path, CONSOLE_ROOT) == 0 ||
               strncmp(path, GW_CONSOLE_PREFIX, strlen(GW_CONSOLE_PREFIX)) == 0;
}

static bool path_byte_ok(char ch)
{
        return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
               ch == '.' || ch == '_' || ch == '-' || ch == '/';
}

static const gw_console_file *file_named(const char *name, size_t len)
{
        for (size_t i = 0; i < gw_console_files_count; i++) {
                const gw_console_file *f = &gw_console_files[i];
                if (strlen(f->name) == len && memcmp(f->name, name, len) == 0) {
                        return f;
                }
        }
        return NULL;
}

/*
 * Walks the segments after "/console/": each non-empty, not starting with
 * a dot (no ".", "..", hidden names), at most SEGMENTS_MAX of them. A
 * trailing slash is allowed ("/console/members/"). *last points at the last
 * segment (length *last_len; 0 for "/console/"), *count says how many.
 */
static int walk(const char *rest, const char **last, size_t *last_len, int *count)
{
        *last = rest;
        *last_len = 0;
        *count = 0;
        const char *p = rest;
        while (*p != '\0') {
                const char *end = strchr(p, '/');
                size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
                if (n == 0 || p[0] == '.' || n > NAME_MAX_BYTES || ++*count > SEGMENTS_MAX) {
                        return -1;
                }
                *last = p;
                *last_len = n;
                if (end == NULL) {
                        break;
                }
                p = end + 1; /* "a/" ends here with the segment "a" */
        }
        return 0;
}

gw_console_kind gw_console_find(const char *path, const gw_console_file **file)
{
        *file = NULL;
        if (!gw_console_path(path)) {
                return GW_CONSOLE_MISSING;
        }
        if (strcmp(path, CONSOLE_ROOT) == 0) {
                return GW_CONSOLE_REDIRECT;
        }
        const char *rest = path + strlen(GW_CONSOLE_PREFIX);
        for (const char *p = rest; *p != '\0'; p++) {
                if (!path_byte_ok(*p)) {
                        return GW_CONSOLE_MISSING; /* %-escapes, spaces, backslashes, ... */
                }
        }
        const char *last = NULL;
        size_t last_len = 0;
        int count = 0;
        if (walk(rest, &last, &last_len, &count) != 0) {
                return GW_CONSOLE_MISSING;
        }
        bool is_file = last_len > 0 && memchr(last, '.', last_len) != NULL;
        if (!is_file) { /* a page: the console's router shows it */
                *file = file_named(GW_CONSOLE_INDEX, strlen(GW_CONSOLE_INDEX));
        } else if (count == 1 && rest[last_len] == '\0') {
                *file = file_named(last, last_len); /* the files sit in one folder */
        }
        return *file != NULL ? GW_CONSOLE_FILE : GW_CONSOLE_MISSING;
}

const char *gw_console_content_type(const char *name)
{
        static const struct {
                const char *ext;
                const char *type;
        } types[] = {
            {".html", "text/html; charset=utf-8"},
            {".js", "text/javascript; charset=utf-8"},
            {".mjs", "text/javascript; charset=utf-8"},
            {".css", "text/css; charset=utf-8"},
            {".svg", "image/svg+xml"},
            {".png", "image/png"},
            {".ico", "image/x-icon"},
            {".json", "application/json"},
            {".webmanifest", "application/manifest+json"},
            {".txt", "text/plain; charset=utf-8"},
            {".woff2", "font/woff2"},
        };
        const char *dot = name != NULL ? strrchr(name, '.') : NULL;
        if (dot != NULL) {
                for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
                        if (strcasecmp(dot, types[i].ext) == 0) {
                                return types[i].type;
                        }
                }
        }
        return "application/octet-stream";
}

/* One entity tag of a list at *p ("W/" allowed): its opaque part, quotes included. */
static int next_etag(const char **p, const char **tag, size_t *len)
{
        const char *s = *p;
        while (*s == ' ' || *s == '\t' || *s == ',') {
                s++;
        }
        if (*s == '\0') {
                return -1;
        }
        if (s[0] == 'W' && s[1] == '/') {
                s += 2; /* If-None-Match compares weakly (RFC 9110 §13.1.2) */
        }
        const char *end = s[0] == '"' ? strchr(s + 1, '"') : NULL;
        if (end == NULL) {
                return -1; /* malformed: nothing after it is trusted */
        }
        *tag = s;
        *len = (size_t)(end - s) + 1;
        *p = end + 1;
        return 0;
}

bool gw_console_etag_match(const char *if_none_match, const char *etag)
{
        if (if_none_match == NULL || etag == NULL) {
                return false;
        }
        const char *p = if_none_match;
        while (*p == ' ' || *p == '\t') {
                p++;
        }
        if (p[0] == '*' && (p[1] == '\0' || p[1] == ' ')) {
                return true;
        }
        size_t etag_len = strlen(etag);
        const char *tag = NULL;
        size_t len = 0;
        for (int i = 0; i < ETAG_LIST_MAX && next_etag(&p, &tag, &len) == 0; i++) {
                if (len == etag_len && memcmp(tag, etag, len) == 0) {
                        return true;
                }
        }
        return false;
}

static void security_headers(gw_req *req)
{
        gw_req_add_header(req, "Content-Security-Policy", GW_CONSOLE_CSP);
        gw_req_add_header(req, "X-Content-Type-Options", "nosniff");
        gw_req_add_header(req, "Referrer-Policy", "no-referrer");
        gw_req_add_header(req, "X-Frame-Options", "DENY");
        gw_req_add_header(req, "Cross-Origin-Opener-Policy", "same-origin");
        gw_req_add_header(req, "Cross-Origin-Resource-Policy", "same-origin");
        gw_req_add_header(req, "Permissions-Policy", PERMISSIONS_NONE);
}

void gw_console_serve(gw_req *req, const char *request_id)
{
        security_headers(req);
        const char *method = gw_req_method(req);
        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
                gw_req_add_header(req, "Allow", "GET, HEAD");
                gw_send_error(req, 405, KS_UNIMPLEMENTED, "method not allowed: use GET",
                              request_id);
                return;
        }
        const gw_console_file *f = NULL;
        switch (gw_console_find(gw_req_path(req), &f)) {
        case GW_CONSOLE_REDIRECT:
                gw_req_add_header(req, "Location", GW_CONSOLE_PREFIX);
                gw_send(req, 308, NULL, NULL, 0, request_id);
                return;
        case GW_CONSOLE_MISSING:
                gw_send_error(req, 404, KS_NOT_FOUND, "no such console file", request_id);
                return;
        case GW_CONSOLE_FILE:
                break;
        }
        gw_req_add_header(req, "ETag", f->etag);
        gw_req_add_header(req, "Cache-Control", CACHE_CONTROL);
        if (gw_console_etag_match(gw_req_header(req, "If-None-Match"), f->etag)) {
                gw_send(req, 304, NULL, NULL, 0, request_id);
                return;
        }
        gw_send(req, 200, gw_console_content_type(f->name), f->data, f->len, request_id);
}
