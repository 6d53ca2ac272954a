/*
 * libFuzzer target: the gateway's strict HTTP/1.1 framing reader (http1.c),
 * as front.c drives it: a head, then a chunked body chunk line by chunk line
 * and its trailer section. It checks what the front relies on:
 *
 * - nothing is read outside the input, and a head or line that is accepted
 *   lies within it, ends in CRLF, and never holds a bare CR or LF;
 * - every field's name is tchars and its value has no CTL but HTAB, with no
 *   whitespace at either end;
 * - framing is unambiguous: chunked and a Content-Length never both stand,
 *   a Content-Length never exceeds the body limit, and HTTP/1.0 is never
 *   chunked;
 * - the status of a refusal is one the front knows how to answer.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http1.h"

#define HEAD_MAX 2048
#define BODY_MAX 4096

static void die(const char *what)
{
        fprintf(stderr, "fuzz_http1: %s\n", what);
        abort();
}

static bool is_status(int rv)
{
        return rv == 400 || rv == 413 || rv == 431 || rv == 501;
}

static bool is_tchar(unsigned char c)
{
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static void check_field(const gw_h1_field *f, const char *buf, size_t len)
{
        if (f->name < buf || f->name + f->name_len > buf + len || f->value < buf ||
            f->value + f->value_len > buf + len || f->name_len == 0)
                die("a field outside the input");
        for (size_t i = 0; i < f->name_len; i++)
                if (!is_tchar((unsigned char)f->name[i]))
                        die("a field name with a non-tchar");
        for (size_t i = 0; i < f->value_len; i++) {
                unsigned char c = (unsigned char)f->value[i];
                if ((c < 0x20 && c != '\t') || c == 0x7f)
                        die("a field value with a CTL");
        }
        if (f->value_len > 0 &&
            (f->value[0] == ' ' || f->value[0] == '\t' || f->value[f->value_len - 1] == ' ' ||
             f->value[f->value_len - 1] == '\t'))
                die("a field value with whitespace at an end");
}

/* A line accepted at buf[0..n) ends in CRLF and has no other CR or LF. */
static void check_line(const char *buf, size_t n)
{
        if (n < 2 || buf[n - 2] != '\r' || buf[n - 1] != '\n')
                die("a line without CRLF");
        if (memchr(buf, '\n', n - 1) != NULL || memchr(buf, '\r', n - 2) != NULL)
                die("a bare CR or LF inside a line");
}

static void chunked_body(const char *buf, size_t len)
{
        size_t pos = 0;
        uint64_t total = 0;
        for (;;) {
                uint64_t size = 0;
                size_t line = 0;
                int rv = gw_h1_chunk_line(buf + pos, len - pos, BODY_MAX - total, &size, &line);
                if (rv == GW_H1_INCOMPLETE)
                        return;
                if (rv != GW_H1_DONE) {
                        if (!is_status(rv))
                                die("a chunk line refused with an unknown status");
                        return;
                }
                if (line > len - pos)
                        die("a chunk line past the input");
                check_line(buf + pos, line);
                pos += line;
                if (size == 0)
                        break;
                if ((total += size) > BODY_MAX)
                        die("a chunk past the body limit");
                if (len - pos < size + 2)
                        return;
                pos += size + 2; /* the front checks the CRLF after the data */
        }
        for (;;) {
                size_t line = 0;
                bool last = false;
                int rv = gw_h1_trailer_line(buf + pos, len - pos, &line, &last);
                if (rv != GW_H1_DONE) {
                        if (rv != GW_H1_INCOMPLETE && !is_status(rv))
                                die("a trailer refused with an unknown status");
                        return;
                }
                if (line > len - pos)
                        die("a trailer line past the input");
                check_line(buf + pos, line);
                pos += line;
                if (last)
                        return;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        /* a copy of exactly size bytes: ASan catches any read past the end */
        char *buf = malloc(size > 0 ? size : 1);
        if (buf == NULL)
                return 0;
        memcpy(buf, data, size);
        static gw_h1_head h;
        int rv = gw_h1_parse_head(buf, size, HEAD_MAX, BODY_MAX, &h);
        if (rv == GW_H1_DONE) {
                if (h.head_bytes > size || h.head_bytes < 4 ||
                    memcmp(buf + h.head_bytes - 4, "\r\n\r\n", 4) != 0)
                        die("a head that does not end in an empty line within the input");
                if (h.chunked && h.body_bytes != 0)
                        die("chunked and a Content-Length both stand");
                if (h.chunked && h.minor_version == 0)
                        die("HTTP/1.0 chunked");
                if (h.body_bytes > BODY_MAX)
                        die("a Content-Length past the body limit");
                if (h.nfields > GW_H1_FIELDS_MAX)
                        die("more fields than the limit");
                for (size_t i = 0; i < h.nfields; i++)
                        check_field(&h.fields[i], buf, h.head_bytes);
                if (h.chunked)
                        chunked_body(buf + h.head_bytes, size - h.head_bytes);
        } else if (rv != GW_H1_INCOMPLETE && !is_status(rv)) {
                die("a head refused with an unknown status");
        } else if (rv == GW_H1_INCOMPLETE && size > HEAD_MAX + 2 * GW_H1_EMPTY_LINES_MAX) {
                die("a head past the limit still incomplete");
        }
        free(buf);
        return 0;
}
