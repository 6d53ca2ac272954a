/*
 * grpcweb.c: gRPC-Web's own pieces (grpc/grpc doc/PROTOCOL-WEB.md), pure:
 * the trailers as the body's last frame, and the base64 of
 * application/grpc-web-text streamed in chunks. Messages are framed as in
 * gRPC (grpc.h).
 */
#ifndef GW_GRPCWEB_H
#define GW_GRPCWEB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ks_code.h"

/* The flag of the trailer frame (MSB set; 0x81 would be compressed trailers, never sent). */
#define GW_GRPCWEB_FLAG_TRAILERS 0x80
/* The trailer frame's bound: its headers as "name: value\r\n" lines. */
#define GW_GRPCWEB_TRAILERS_BYTES_MAX 8192
#define GW_GRPCWEB_TRAILERS_MAX       32

/* One trailer; name and value point into the caller's memory. */
typedef struct gw_grpcweb_header {
        const char *name;
        size_t name_len;
        const char *value;
        size_t value_len;
} gw_grpcweb_header;

/*
 * The trailer frame of h[0..n): the 5-byte prefix (flag 0x80) and
 * "name: value\r\n" lines, names lower-cased, malloc'd into *out. Returns
 * 0, or -1: a name that is not a token, a value with a control character
 * other than HTAB, over GW_GRPCWEB_TRAILERS_BYTES_MAX, out of memory.
 */
int gw_grpcweb_trailers(const gw_grpcweb_header *h, size_t n, uint8_t **out,
                        size_t *out_len) KS_MUST_CHECK;

/*
 * Reads the payload of a trailer frame (the bytes after the prefix) into
 * h (at most max), pointing into p: lines "name: value" ending in CRLF
 * (the last one may lack it), whitespace around the value dropped. Returns
 * the count, or -1 for a malformed block or more than max headers.
 */
int gw_grpcweb_trailers_parse(const uint8_t *p, size_t len, gw_grpcweb_header *h,
                              size_t max) KS_MUST_CHECK;

/*
 * application/grpc-web-text: the body is base64 (standard alphabet,
 * padded), and the spec lets padding end any chunk, so a stream is many
 * base64 texts back to back. Both directions work on a stream in pieces of
 * any size, keeping what is left over (OpenSSL's EVP_EncodeBlock and
 * EVP_DecodeBlock do the base64).
 */
typedef struct gw_grpcweb_text {
        uint8_t rest[3]; /* encoding: bytes not yet a whole group of 3 */
        char quad[4];    /* decoding: characters not yet a whole group of 4 */
        size_t n;        /* bytes in rest, or characters in quad */
} gw_grpcweb_text;

/* What out must hold to encode len more bytes (with any rest, padding, NUL). */
#define GW_GRPCWEB_TEXT_ENCODED_MAX(len) (4 * (((len) + 2 + 2) / 3) + 1)
/* What out must hold to decode len more characters (with any quad kept). */
#define GW_GRPCWEB_TEXT_DECODED_MAX(len) (3 * (((len) + 3) / 4 + 1))

/*
 * Encodes in[0..len) after what s kept. With flush, the rest is written too,
 * padded (at the end of every message: the client may read that far);
 * without, up to 2 bytes wait in s for the next call. out (out_len >=
 * GW_GRPCWEB_TEXT_ENCODED_MAX(len)) is NUL-terminated. Returns its length.
 */
size_t gw_grpcweb_text_encode(gw_grpcweb_text *s, const uint8_t *in, size_t len, bool flush,
                              char *out, size_t out_len);

/*
 * Decodes in[0..len) after what s kept into out (out_len >=
 * GW_GRPCWEB_TEXT_DECODED_MAX(len)); up to 3 characters wait in s. Padding
 * may close any group of 4. Returns the bytes written, or -1 for a
 * character outside the alphabet or misplaced padding (the stream is then
 * broken).
 */
long gw_grpcweb_text_decode(gw_grpcweb_text *s, const char *in, size_t len, uint8_t *out,
                            size_t out_len) KS_MUST_CHECK;

/* True when the decoded stream may end here (no partial group of 4 kept). */
bool gw_grpcweb_text_complete(const gw_grpcweb_text *s);

#endif
