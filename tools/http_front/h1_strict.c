/*
 * h1_strict.c: see h1_strict.h. Lines end in CRLF only: a bare LF or CR is
 * a 400, because a recipient that takes bare LF as a line end and one that
 * does not frame the same bytes differently (RFC 9112 §2.2, §11.2).
 */
#include "h1_strict.h"

#include <string.h>
#include <strings.h>

#define H1_BAD             400
#define H1_BODY_TOO_LARGE  413
#define H1_HEAD_TOO_LARGE  431
#define H1_NOT_IMPLEMENTED 501

/* tchar (RFC 9110 §5.6.2). */
static int is_tchar(unsigned char c)
{
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
                return 1;
        switch (c) {
        case '!':
        case '#':
        case '$':
        case '%':
        case '&':
        case '\'':
        case '*':
        case '+':
        case '-':
        case '.':
        case '^':
        case '_':
        case '`':
        case '|':
        case '~':
                return 1;
        default:
                return 0;
        }
}

/* field-vchar, SP or HTAB: what a field value (or chunk-ext) may hold. */
static int is_value_char(unsigned char c)
{
        return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int hex_value(unsigned char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

static int name_is(const struct h1_field *f, const char *name, size_t name_len)
{
        return f->name_len == name_len && strncasecmp(f->name, name, name_len) == 0;
}

/* Finds the line at buf[pos..): *eol = index of its CR. H1_INCOMPLETE when
 * no LF has come; H1_BAD for an LF with no CR before it. */
static int find_line(const char *buf, size_t len, size_t pos, size_t *eol)
{
        const char *lf = memchr(buf + pos, '\n', len - pos);

        if (lf == NULL)
                return len - pos > H1_HEAD_BYTES_MAX ? H1_HEAD_TOO_LARGE : H1_INCOMPLETE;
        if ((size_t)(lf - buf) == pos || lf[-1] != '\r')
                return H1_BAD;
        *eol = (size_t)(lf - buf) - 1;
        return H1_DONE;
}

/* One field line buf[pos..eol): name, colon at once, OWS, value, OWS. */
static int parse_field(const char *buf, size_t pos, size_t eol, struct h1_field *f)
{
        size_t i = pos, end;

        if (buf[i] == ' ' || buf[i] == '\t')
                return H1_BAD; /* obs-fold, or whitespace after the start line */
        while (i < eol && is_tchar((unsigned char)buf[i]))
                i++;
        if (i == pos || i == eol || buf[i] != ':')
                return H1_BAD; /* "Content-Length : 2" stops here */
        f->name = buf + pos;
        f->name_len = i - pos;
        for (i++; i < eol && (buf[i] == ' ' || buf[i] == '\t'); i++)
                ;
        for (end = i; end < eol; end++) {
                if (!is_value_char((unsigned char)buf[end]))
                        return H1_BAD; /* CR, NUL or another CTL */
        }
        while (end > i && (buf[end - 1] == ' ' || buf[end - 1] == '\t'))
                end--;
        f->value = buf + i;
        f->value_len = end - i;
        return H1_DONE;
}

/* "METHOD SP target SP HTTP/1.x" in buf[pos..eol). */
static int parse_request_line(const char *buf, size_t pos, size_t eol, struct h1_request *req)
{
        size_t i = pos;

        while (i < eol && is_tchar((unsigned char)buf[i]))
                i++;
        if (i == pos || i == eol || buf[i] != ' ')
                return H1_BAD;
        req->method = buf + pos;
        req->method_len = i - pos;
        pos = ++i;
        while (i < eol && buf[i] > 0x20 && buf[i] < 0x7f)
                i++;
        if (i == pos || i == eol || buf[i] != ' ')
                return H1_BAD;
        req->target = buf + pos;
        req->target_len = i - pos;
        i++;
        if (eol - i != 8 || memcmp(buf + i, "HTTP/1.", 7) != 0 ||
            (buf[i + 7] != '0' && buf[i + 7] != '1'))
                return H1_BAD;
        req->minor_version = buf[i + 7] - '0';
        return H1_DONE;
}

/* What the fields say about framing, gathered while they are read. */
struct framing {
        int cl_seen, te_seen, te_last_chunked, te_chunked_twice, te_other;
        int hosts, conn_close, conn_keep_alive;
        uint64_t cl;
};

static int note_content_length(const struct h1_field *f, struct framing *fr)
{
        uint64_t v = 0;

        if (f->value_len == 0 || f->value_len > 18)
                return H1_BAD;
        for (size_t i = 0; i < f->value_len; i++) {
                if (f->value[i] < '0' || f->value[i] > '9')
                        return H1_BAD; /* "+5", "5, 5", "0x5" */
                v = v * 10 + (uint64_t)(f->value[i] - '0');
        }
        if (fr->cl_seen && v != fr->cl)
                return H1_BAD;
        fr->cl_seen = 1;
        fr->cl = v;
        return H1_DONE;
}

/* Calls fn on each element of a comma list, trimmed, empty ones skipped. */
static void each_element(const struct h1_field *f,
                         void (*fn)(const char *, size_t, struct framing *), struct framing *fr)
{
        size_t i = 0;

        while (i < f->value_len) {
                size_t start, end;

                while (i < f->value_len && (f->value[i] == ' ' || f->value[i] == '\t'))
                        i++;
                start = i;
                while (i < f->value_len && f->value[i] != ',')
                        i++;
                end = i++;
                while (end > start && (f->value[end - 1] == ' ' || f->value[end - 1] == '\t'))
                        end--;
                if (end > start)
                        fn(f->value + start, end - start, fr);
        }
}

static void note_coding(const char *s, size_t n, struct framing *fr)
{
        if (n == 7 && strncasecmp(s, "chunked", 7) == 0) {
                fr->te_chunked_twice |= fr->te_last_chunked;
                fr->te_last_chunked = 1;
        } else {
                fr->te_other = 1; /* "xchunked", "gzip", "chunked;x=1" */
                fr->te_last_chunked = 0;
        }
}

static void note_connection(const char *s, size_t n, struct framing *fr)
{
        if (n == 5 && strncasecmp(s, "close", 5) == 0)
                fr->conn_close = 1;
        else if (n == 10 && strncasecmp(s, "keep-alive", 10) == 0)
                fr->conn_keep_alive = 1;
}

static int note_field(const struct h1_field *f, struct framing *fr)
{
        if (name_is(f, "content-length", 14))
                return note_content_length(f, fr);
        if (name_is(f, "transfer-encoding", 17)) {
                fr->te_seen = 1;
                each_element(f, note_coding, fr);
        } else if (name_is(f, "host", 4)) {
                fr->hosts++;
        } else if (name_is(f, "connection", 10)) {
                each_element(f, note_connection, fr);
        }
        return H1_DONE;
}

/* RFC 9112 §6.1, §6.3 and §3.2 over what the fields said. */
static int decide_framing(const struct framing *fr, struct h1_request *req)
{
        if (fr->hosts > 1 || (req->minor_version == 1 && fr->hosts == 0))
                return H1_BAD;
        req->chunked = 0;
        req->body_bytes = 0;
        if (fr->te_seen) {
                if (req->minor_version == 0 || fr->cl_seen || !fr->te_last_chunked ||
                    fr->te_chunked_twice)
                        return H1_BAD;
                if (fr->te_other)
                        return H1_NOT_IMPLEMENTED;
                req->chunked = 1;
        } else if (fr->cl_seen) {
                if (fr->cl > H1_BODY_BYTES_MAX)
                        return H1_BODY_TOO_LARGE;
                req->body_bytes = fr->cl;
        }
        req->keep_alive =
            req->minor_version == 1 ? !fr->conn_close : fr->conn_keep_alive && !fr->conn_close;
        return H1_DONE;
}

int h1_parse_head(const char *buf, size_t len, struct h1_request *req)
{
        struct framing fr;
        size_t pos = 0, eol;
        int rv;

        /* RFC 9112 §2.2: ignore empty lines before the request line. */
        while (pos + 1 < len && buf[pos] == '\r' && buf[pos + 1] == '\n' && pos < 8)
                pos += 2;
        if ((rv = find_line(buf, len, pos, &eol)) != H1_DONE)
                return rv;
        if (eol + 2 > H1_HEAD_BYTES_MAX)
                return H1_HEAD_TOO_LARGE;
        if ((rv = parse_request_line(buf, pos, eol, req)) != H1_DONE)
                return rv;
        memset(&fr, 0, sizeof(fr));
        req->nfields = 0;
        for (pos = eol + 2;; pos = eol + 2) {
                if ((rv = find_line(buf, len, pos, &eol)) != H1_DONE)
                        return rv;
                if (eol + 2 > H1_HEAD_BYTES_MAX)
                        return H1_HEAD_TOO_LARGE;
                if (eol == pos)
                        break; /* the empty line */
                if (req->nfields == H1_FIELDS_MAX)
                        return H1_HEAD_TOO_LARGE;
                if ((rv = parse_field(buf, pos, eol, &req->fields[req->nfields])) != H1_DONE)
                        return rv;
                if ((rv = note_field(&req->fields[req->nfields++], &fr)) != H1_DONE)
                        return rv;
        }
        req->head_bytes = eol + 2;
        return decide_framing(&fr, req);
}

/* chunk-size [BWS ";" chunk-ext] CRLF at buf[*pos..): 1*HEXDIG only. */
static int parse_chunk_line(const char *buf, size_t len, size_t *pos, uint64_t *size)
{
        size_t i = *pos, start = *pos, ext;
        int h;

        *size = 0;
        while (i < len && (h = hex_value((unsigned char)buf[i])) >= 0) {
                *size = *size * 16 + (uint64_t)h;
                if (*size > H1_BODY_BYTES_MAX)
                        return H1_BODY_TOO_LARGE;
                i++;
        }
        if (i == start && i < len)
                return H1_BAD; /* "+2", " 2", ";x" */
        for (ext = i; i < len && (buf[i] == ' ' || buf[i] == '\t'); i++)
                ;
        if (i < len && buf[i] == ';') {
                while (i < len && buf[i] != '\r' && is_value_char((unsigned char)buf[i]))
                        i++;
        } else if (i < len && i != ext) {
                return H1_BAD; /* whitespace not followed by ';' */
        }
        if (i - ext > H1_CHUNK_EXT_BYTES_MAX)
                return H1_BAD;
        if (i + 1 >= len)
                return H1_INCOMPLETE;
        if (buf[i] != '\r' || buf[i + 1] != '\n')
                return H1_BAD; /* "0x2" stops here at the 'x' */
        *pos = i + 2;
        return H1_DONE;
}

/* The trailer section after the last chunk: field lines, then CRLF. */
static int skip_trailers(const char *buf, size_t len, size_t *pos)
{
        size_t start = *pos, eol;
        struct h1_field f;
        int rv;

        for (;;) {
                if ((rv = find_line(buf, len, *pos, &eol)) != H1_DONE)
                        return rv;
                if (eol + 2 - start > H1_HEAD_BYTES_MAX)
                        return H1_HEAD_TOO_LARGE;
                if (eol == *pos) {
                        *pos = eol + 2;
                        return H1_DONE;
                }
                if ((rv = parse_field(buf, *pos, eol, &f)) != H1_DONE)
                        return rv;
                *pos = eol + 2;
        }
}

int h1_chunked_length(const char *buf, size_t len, size_t *wire_bytes, size_t *data_bytes)
{
        size_t pos = 0, data = 0;
        uint64_t size;
        int rv;

        for (;;) {
                if ((rv = parse_chunk_line(buf, len, &pos, &size)) != H1_DONE)
                        return rv;
                if (size == 0)
                        break;
                if ((data += size) > H1_BODY_BYTES_MAX)
                        return H1_BODY_TOO_LARGE;
                if (len - pos < size + 2)
                        return H1_INCOMPLETE;
                pos += size;
                if (buf[pos] != '\r' || buf[pos + 1] != '\n')
                        return H1_BAD;
                pos += 2;
        }
        if ((rv = skip_trailers(buf, len, &pos)) != H1_DONE)
                return rv;
        *wire_bytes = pos;
        *data_bytes = data;
        return H1_DONE;
}

size_t h1_count_fields(const struct h1_request *req, const char *name)
{
        size_t n = 0, name_len = strlen(name);

        for (size_t i = 0; i < req->nfields; i++)
                n += name_is(&req->fields[i], name, name_len) ? 1u : 0u;
        return n;
}
