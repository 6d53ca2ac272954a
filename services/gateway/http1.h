/*
 * http1.c: a strict reader of HTTP/1.1 request framing (RFC 9112). Pure
 * functions over bytes; front.c feeds them. Every framing ambiguity that a
 * request-smuggling attack relies on is an error here, which the front
 * answers with the status below and Connection: close:
 *
 *   400  a bare CR or LF, obs-fold, whitespace or a non-tchar in a field
 *        name (so "Content-Length : 2"), a CTL in a field value, a bad
 *        request line, a missing or second Host (HTTP/1.1), a
 *        Content-Length that is not 1*DIGIT, two differing Content-Lengths,
 *        Transfer-Encoding with Content-Length, a Transfer-Encoding whose
 *        last coding is not chunked ("xchunked"), Transfer-Encoding on
 *        HTTP/1.0, a chunk size that is not 1*HEXDIG ("0x2", "+2", "2zz")
 *   501  a transfer coding other than chunked before the final chunked
 *   431  a head over the caller's limit or over GW_H1_FIELDS_MAX fields
 *   413  a Content-Length or chunk size over the caller's body limit
 *
 * Field semantics beyond framing are the caller's: two Authorization fields
 * pass here, and gw_h1_count tells how many came.
 */
#ifndef GW_HTTP1_H
#define GW_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_H1_FIELDS_MAX      100
#define GW_H1_CHUNK_EXT_MAX   256 /* bytes of chunk extensions on one chunk line */
#define GW_H1_EMPTY_LINES_MAX 4   /* CRLFs tolerated before a request line (RFC 9112 §2.2) */

enum {
        GW_H1_DONE = 0,      /* a whole head (or chunk line, or trailer line) was read */
        GW_H1_INCOMPLETE = 1 /* not yet: read more */
        /* anything else: the HTTP status to answer, then close */
};

typedef struct gw_h1_field {
        const char *name;
        size_t name_len;
        const char *value; /* without leading and trailing whitespace */
        size_t value_len;
} gw_h1_field;

typedef struct gw_h1_head {
        const char *method;
        size_t method_len;
        const char *target;
        size_t target_len;
        int minor_version;    /* HTTP/1.x */
        size_t head_bytes;    /* request line and fields with the empty line, and any empty
                                 lines before the request line */
        bool chunked;         /* the body is chunked: read it with gw_h1_chunk_line */
        uint64_t body_bytes;  /* Content-Length (0 when absent); unused when chunked */
        bool keep_alive;      /* after this request, by version and Connection */
        bool expect_continue; /* Expect: 100-continue */
        bool expect_other;    /* an Expect this server does not meet (417) */
        size_t nfields;
        gw_h1_field fields[GW_H1_FIELDS_MAX];
} gw_h1_head;

/*
 * Reads a request head from buf[0..len). GW_H1_DONE fills *h (pointers into
 * buf); GW_H1_INCOMPLETE when the empty line has not come yet and the head
 * is still within head_max bytes; else a status. A Content-Length over
 * body_max is 413.
 */
int gw_h1_parse_head(const char *buf, size_t len, size_t head_max, uint64_t body_max,
                     gw_h1_head *h);

/*
 * Reads one chunk line, "chunk-size [BWS ; chunk-ext] CRLF", from
 * buf[0..len): GW_H1_DONE sets *size and *line_bytes (with the CRLF). A size
 * over body_max is 413.
 */
int gw_h1_chunk_line(const char *buf, size_t len, uint64_t body_max, uint64_t *size,
                     size_t *line_bytes);

/*
 * Reads one line of the trailer section after the last chunk: GW_H1_DONE
 * sets *line_bytes and *last (the empty line that ends the section). Trailer
 * fields are checked like header fields, then dropped.
 */
int gw_h1_trailer_line(const char *buf, size_t len, size_t *line_bytes, bool *last);

/* The number of fields named name (case-insensitive). */
size_t gw_h1_count(const gw_h1_head *h, const char *name);

/* The first field named name, or NULL. */
const gw_h1_field *gw_h1_find(const gw_h1_head *h, const char *name);

#endif
