/*
 * h1_strict.h: a strict reader of HTTP/1.1 request framing (RFC 9112), for
 * the minimal_strict prototype. It reads a request head from a contiguous
 * buffer and, for a chunked body, finds where the body ends. Every framing
 * ambiguity a smuggling attack uses is an error here, answered by the caller
 * with the status below and Connection: close:
 *
 *   400  bare CR or LF, obs-fold, whitespace or any non-tchar in a field
 *        name, a CTL in a value, a bad request line, a missing or second
 *        Host (HTTP/1.1), a Content-Length that is not 1*DIGIT, two
 *        differing Content-Lengths, Transfer-Encoding with Content-Length,
 *        a Transfer-Encoding whose last coding is not chunked, TE on
 *        HTTP/1.0, a chunk size that is not 1*HEXDIG (0x2, +2, 2zz)
 *   501  a transfer coding other than chunked before the final chunked
 *   431  a head over H1_HEAD_BYTES_MAX or over H1_FIELDS_MAX fields
 *   413  a body over H1_BODY_BYTES_MAX
 *
 * It does not judge field semantics beyond framing: two Authorization
 * fields pass, and the caller sees both in `fields` (h1_count_fields).
 */
#ifndef H1_STRICT_H
#define H1_STRICT_H

#include <stddef.h>
#include <stdint.h>

#define H1_HEAD_BYTES_MAX      8192
#define H1_FIELDS_MAX          64
#define H1_BODY_BYTES_MAX      (1u << 20)
#define H1_CHUNK_EXT_BYTES_MAX 256

enum h1_result {
        H1_DONE = 0,      /* a whole head (or chunked body) is in the buffer */
        H1_INCOMPLETE = 1 /* not yet: read more (the caller enforces the caps) */
                          /* otherwise: an HTTP status (400, 413, 431, 501) to answer and close */
};

struct h1_field {
        const char *name;
        size_t name_len;
        const char *value; /* without leading and trailing OWS */
        size_t value_len;
};

struct h1_request {
        const char *method;
        size_t method_len;
        const char *target;
        size_t target_len;
        int minor_version;   /* HTTP/1.x */
        size_t head_bytes;   /* request line and fields, with the empty line */
        int chunked;         /* the body is chunked: see h1_chunked_length */
        uint64_t body_bytes; /* Content-Length (0 when absent), not chunked */
        int keep_alive;      /* after this request, per version and Connection */
        size_t nfields;
        struct h1_field fields[H1_FIELDS_MAX];
};

/* Reads a request head from buf[0..len). H1_DONE fills *req (pointers into
 * buf); H1_INCOMPLETE when the empty line has not come yet; else a status. */
int h1_parse_head(const char *buf, size_t len, struct h1_request *req);

/* Reads a chunked body (chunks, last chunk, trailer section) from
 * buf[0..len). H1_DONE sets *wire_bytes to the bytes it spans and
 * *data_bytes to the decoded length; trailers are checked, then dropped. */
int h1_chunked_length(const char *buf, size_t len, size_t *wire_bytes, size_t *data_bytes);

/* The number of fields named `name` (case-insensitive). */
size_t h1_count_fields(const struct h1_request *req, const char *name);

#endif
