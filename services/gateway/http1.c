/*
 * See http1.h. Lines end in CRLF only: a bare LF or CR is a 400, because a
 * recipient that takes bare LF as a line end and one that does not frame the
 * same bytes differently (RFC 9112 §2.2, §11.2).
 */
#include "http1.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

#define ST_BAD             400
#define ST_BODY_TOO_LARGE  413
#define ST_HEAD_TOO_LARGE  431
#define ST_NOT_IMPLEMENTED 501
#define CL_DIGITS_MAX      18 /* below 2^63: no overflow */

/* tchar (RFC 9110 §5.6.2). */
static bool is_tchar(unsigned char c)
{
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
                return true;
        }
        return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-vchar, SP or HTAB: what a field value (or a chunk extension) may hold. */
static bool is_value_char(unsigned char c)
{
        return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static bool is_ows(char c)
{
        return c == ' ' || c == '\t';
}

static int hex_value(unsigned char c)
{
        if (c >= '0' && c <= '9') {
                return c - '0';
        }
        if (c >= 'a' && c <= 'f') {
                return c - 'a' + 10;
        }
        if (c >= 'A' && c <= 'F') {
                return c - 'A' + 10;
        }
        return -1;
}

static bool name_is(const gw_h1_field *f, const char *name, size_t name_len)
{
        return f->name_len == name_len && strncasecmp(f->name, name, name_len) == 0;
}

static bool value_is(const char *s, size_t n, const char *want)
{
        return n == strlen(want) && strncasecmp(s, want, n) == 0;
}

/*
 * The line at buf[pos..): *eol = the index of its CR. GW_H1_INCOMPLETE when
 * no LF has come within max bytes of start; 400 for an LF without a CR
 * before it, or a CR anywhere else in the line.
 */
static int find_line(const char *buf, size_t len, size_t pos, size_t start, size_t max, size_t *eol)
{
        const char *lf = memchr(buf + pos, '\n', len - pos);
        if (lf == NULL) {
                return len - start > max ? ST_HEAD_TOO_LARGE : GW_H1_INCOMPLETE;
        }
        size_t at = (size_t)(lf - buf);
        if (at == pos || lf[-1] != '\r') {
                return ST_BAD;
        }
        if (at + 1 - start > max) {
                return ST_HEAD_TOO_LARGE;
        }
        if (memchr(buf + pos, '\r', at - 1 - pos) != NULL) {
                return ST_BAD; /* a bare CR inside the line */
        }
        *eol = at - 1;
        return GW_H1_DONE;
}

/* One field line buf[pos..eol): name, the colon at once, OWS, value, OWS. */
static int parse_field(const char *buf, size_t pos, size_t eol, gw_h1_field *f)
{
        size_t i = pos;
        if (is_ows(buf[i])) {
                return ST_BAD; /* obs-fold, or whitespace after the start line */
        }
        while (i < eol && is_tchar((unsigned char)buf[i])) {
                i++;
        }
        if (i == pos || i == eol || buf[i] != ':') {
                return ST_BAD; /* "Content-Length : 2" stops here */
        }
        f->name = buf + pos;
        f->name_len = i - pos;
        for (i++; i < eol && is_ows(buf[i]); i++) {
        }
        size_t end = i;
        for (; end < eol; end++) {
                if (!is_value_char((unsigned char)buf[end])) {
                        return ST_BAD; /* NUL or another CTL */
                }
        }
        while (end > i && is_ows(buf[end - 1])) {
                end--;
        }
        f->value = buf + i;
        f->value_len = end - i;
        return GW_H1_DONE;
}

/* "METHOD SP request-target SP HTTP/1.x" in buf[pos..eol). */
static int parse_request_line(const char *buf, size_t pos, size_t eol, gw_h1_head *h)
{
        size_t i = pos;
        while (i < eol && is_tchar((unsigned char)buf[i])) {
                i++;
        }
        if (i == pos || i == eol || buf[i] != ' ') {
                return ST_BAD;
        }
        h->method = buf + pos;
        h->method_len = i - pos;
        pos = ++i;
        while (i < eol && buf[i] > 0x20 && buf[i] < 0x7f) {
                i++;
        }
        if (i == pos || i == eol || buf[i] != ' ') {
                return ST_BAD;
        }
        h->target = buf + pos;
        h->target_len = i - pos;
        i++;
        if (eol - i != 8 || memcmp(buf + i, "HTTP/1.", 7) != 0 ||
            (buf[i + 7] != '0' && buf[i + 7] != '1')) {
                return ST_BAD;
        }
        h->minor_version = buf[i + 7] - '0';
        return GW_H1_DONE;
}

/* What the fields say about framing, gathered while they are read. */
typedef struct framing {
        bool cl_seen, te_seen, te_last_chunked, te_chunked_twice, te_other;
        bool conn_close, conn_keep_alive;
        int hosts;
        uint64_t cl;
} framing;

static int note_content_length(const gw_h1_field *f, framing *fr)
{
        uint64_t v = 0;
        if (f->value_len == 0 || f->value_len > CL_DIGITS_MAX) {
                return ST_BAD;
        }
        for (size_t i = 0; i < f->value_len; i++) {
                if (f->value[i] < '0' || f->value[i] > '9') {
                        return ST_BAD; /* "+5", "5, 5", "0x5" */
                }
                v = v * 10 + (uint64_t)(f->value[i] - '0');
        }
        if (fr->cl_seen && v != fr->cl) {
                return ST_BAD;
        }
        fr->cl_seen = true;
        fr->cl = v;
        return GW_H1_DONE;
}

typedef void (*element_fn)(const char *s, size_t n, framing *fr, gw_h1_head *h);

/* Calls fn on each element of a comma-separated list, trimmed; empty ones skipped. */
static void each_element(const gw_h1_field *f, element_fn fn, framing *fr, gw_h1_head *h)
{
        size_t i = 0;
        while (i < f->value_len) {
                while (i < f->value_len && is_ows(f->value[i])) {
                        i++;
                }
                size_t start = i;
                while (i < f->value_len && f->value[i] != ',') {
                        i++;
                }
                size_t end = i++;
                while (end > start && is_ows(f->value[end - 1])) {
                        end--;
                }
                if (end > start) {
                        fn(f->value + start, end - start, fr, h);
                }
        }
}

static void note_coding(const char *s, size_t n, framing *fr, gw_h1_head *h)
{
        (void)h;
        if (value_is(s, n, "chunked")) {
                fr->te_chunked_twice |= fr->te_last_chunked;
                fr->te_last_chunked = true;
        } else {
                fr->te_other = true; /* "xchunked", "gzip", "chunked;x=1" */
                fr->te_last_chunked = false;
        }
}

static void note_connection(const char *s, size_t n, framing *fr, gw_h1_head *h)
{
        (void)h;
        if (value_is(s, n, "close")) {
                fr->conn_close = true;
        } else if (value_is(s, n, "keep-alive")) {
                fr->conn_keep_alive = true;
        }
}

static void note_expect(const char *s, size_t n, framing *fr, gw_h1_head *h)
{
        (void)fr;
        if (value_is(s, n, "100-continue")) {
                h->expect_continue = true;
        } else {
                h->expect_other = true;
        }
}

static int note_field(const gw_h1_field *f, framing *fr, gw_h1_head *h)
{
        if (name_is(f, "content-length", 14)) {
                return note_content_length(f, fr);
        }
        if (name_is(f, "transfer-encoding", 17)) {
                fr->te_seen = true;
                each_element(f, note_coding, fr, h);
        } else if (name_is(f, "host", 4)) {
                fr->hosts++;
        } else if (name_is(f, "connection", 10)) {
                each_element(f, note_connection, fr, h);
        } else if (name_is(f, "expect", 6)) {
                each_element(f, note_expect, fr, h);
        }
        return GW_H1_DONE;
}

/* RFC 9112 §6.1, §6.3 and §3.2 over what the fields said. */
static int decide_framing(const framing *fr, uint64_t body_max, gw_h1_head *h)
{
        if (fr->hosts > 1 || (h->minor_version == 1 && fr->hosts == 0)) {
                return ST_BAD;
        }
        h->chunked = false;
        h->body_bytes = 0;
        if (fr->te_seen) {
                if (h->minor_version == 0 || fr->cl_seen || !fr->te_last_chunked ||
                    fr->te_chunked_twice) {
                        return ST_BAD;
                }
                if (fr->te_other) {
                        return ST_NOT_IMPLEMENTED;
                }
                h->chunked = true;
        } else if (fr->cl_seen) {
                if (fr->cl > body_max) {
                        return ST_BODY_TOO_LARGE;
                }
                h->body_bytes = fr->cl;
        }
        h->keep_alive =
            h->minor_version == 1 ? !fr->conn_close : fr->conn_keep_alive && !fr->conn_close;
        return GW_H1_DONE;
}

int gw_h1_parse_head(const char *buf, size_t len, size_t head_max, uint64_t body_max, gw_h1_head *h)
{
        size_t pos = 0, eol = 0;
        for (int i = 0;
             i < GW_H1_EMPTY_LINES_MAX && pos + 1 < len && buf[pos] == '\r' && buf[pos + 1] == '\n';
             i++) {
                pos += 2;
        }
        size_t start = pos;
        int rv = find_line(buf, len, pos, start, head_max, &eol);
        if (rv != GW_H1_DONE) {
                return rv;
        }
        memset(h, 0, offsetof(gw_h1_head, fields));
        if ((rv = parse_request_line(buf, pos, eol, h)) != GW_H1_DONE) {
                return rv;
        }
        framing fr;
        memset(&fr, 0, sizeof(fr));
        for (pos = eol + 2;; pos = eol + 2) {
                if ((rv = find_line(buf, len, pos, start, head_max, &eol)) != GW_H1_DONE) {
                        return rv;
                }
                if (eol == pos) {
                        break; /* the empty line */
                }
                if (h->nfields == GW_H1_FIELDS_MAX) {
                        return ST_HEAD_TOO_LARGE;
                }
                gw_h1_field *f = &h->fields[h->nfields];
                if ((rv = parse_field(buf, pos, eol, f)) != GW_H1_DONE ||
                    (rv = note_field(f, &fr, h)) != GW_H1_DONE) {
                        return rv;
                }
                h->nfields++;
        }
        h->head_bytes = eol + 2;
        return decide_framing(&fr, body_max, h);
}

int gw_h1_chunk_line(const char *buf, size_t len, uint64_t body_max, uint64_t *size,
                     size_t *line_bytes)
{
        size_t i = 0;
        int digit;
        *size = 0;
        while (i < len && (digit = hex_value((unsigned char)buf[i])) >= 0) {
                *size = *size * 16 + (uint64_t)digit;
                if (*size > body_max) {
                        return ST_BODY_TOO_LARGE;
                }
                i++;
        }
        if (i == 0 && len > 0) {
                return ST_BAD; /* "+2", " 2", ";x" */
        }
        size_t ext = i;
        while (i < len && is_ows(buf[i])) {
                i++;
        }
        if (i < len && buf[i] == ';') {
                while (i < len && buf[i] != '\r' && is_value_char((unsigned char)buf[i])) {
                        i++;
                }
        } else if (i < len && i != ext) {
                return ST_BAD; /* whitespace not followed by ';' */
        }
        if (i - ext > GW_H1_CHUNK_EXT_MAX) {
                return ST_BAD;
        }
        if (i + 1 >= len) {
                return GW_H1_INCOMPLETE;
        }
        if (buf[i] != '\r' || buf[i + 1] != '\n') {
                return ST_BAD; /* "0x2" stops here, at the 'x' */
        }
        *line_bytes = i + 2;
        return GW_H1_DONE;
}

int gw_h1_trailer_line(const char *buf, size_t len, size_t *line_bytes, bool *last)
{
        size_t eol = 0;
        int rv = find_line(buf, len, 0, 0, len + 1, &eol);
        if (rv != GW_H1_DONE) {
                return rv;
        }
        *last = eol == 0;
        if (!*last) {
                gw_h1_field f;
                if ((rv = parse_field(buf, 0, eol, &f)) != GW_H1_DONE) {
                        return rv;
                }
        }
        *line_bytes = eol + 2;
        return GW_H1_DONE;
}

size_t gw_h1_count(const gw_h1_head *h, const char *name)
{
        size_t n = 0, name_len = strlen(name);
        for (size_t i = 0; i < h->nfields; i++) {
                n += name_is(&h->fields[i], name, name_len) ? 1u : 0u;
        }
        return n;
}

const gw_h1_field *gw_h1_find(const gw_h1_head *h, const char *name)
{
        size_t name_len = strlen(name);
        for (size_t i = 0; i < h->nfields; i++) {
                if (name_is(&h->fields[i], name, name_len)) {
                        return &h->fields[i];
                }
        }
        return NULL;
}
