/*
 * grpc.c: the gRPC protocol's rules over HTTP/2 (grpc/grpc
 * doc/PROTOCOL-HTTP2.md), as pure functions, no I/O: the length-prefixed
 * message framing (an incremental reader, an encoder), grpc-encoding,
 * grpc-timeout, grpc-message's percent-encoding, and the status mappings.
 * gRPC-Web's own pieces are grpcweb.c.
 */
#ifndef GW_GRPC_H
#define GW_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ks_code.h"

/* A message on the wire: 1-byte compressed flag, 4-byte big-endian length, the bytes. */
#define GW_GRPC_PREFIX_BYTES    5
#define GW_GRPC_FLAG_COMPRESSED 0x01
/* The default bound on a message, compressed and inflated (grpc-go's and grpc-java's). */
#define GW_GRPC_MESSAGE_BYTES_DEFAULT (4u * 1024 * 1024)
/* grpc-timeout: at most 8 digits then the unit. */
#define GW_GRPC_TIMEOUT_DIGITS_MAX 8
/* grpc-message as sent: the percent-encoded text, NUL excluded (longer messages are cut). */
#define GW_GRPC_MESSAGE_MAX 1024

/*
 * The services the gateway answers itself over gRPC, not through the broker
 * (health.c, reflection.c, hub.c): every method of theirs is served.
 */
extern const char *const gw_grpc_own_services[];
extern const size_t gw_grpc_own_services_n;
/* True when method ("grpc.health.v1.Health/Check") is a method of one of them. */
bool gw_grpc_own_method(const char *method);

/* Which of the gRPC family a request speaks, by its Content-Type. */
typedef enum gw_grpc_protocol {
        GW_GRPC = 0,          /* application/grpc, application/grpc+proto */
        GW_GRPC_WEB = 1,      /* application/grpc-web, application/grpc-web+proto */
        GW_GRPC_WEB_TEXT = 2, /* application/grpc-web-text, application/grpc-web-text+proto */
} gw_grpc_protocol;

/*
 * The protocol of a Content-Type (case-insensitive; parameters after ';'
 * allowed). Returns 0, or -1 for anything else, another codec ("+json")
 * included: the spec's 415.
 */
int gw_grpc_protocol_parse(const char *content_type, gw_grpc_protocol *out);

/* grpc-encoding of a stream's messages. */
typedef enum gw_grpc_encoding {
        GW_GRPC_IDENTITY = 0, /* absent, or "identity" */
        GW_GRPC_GZIP = 1,
} gw_grpc_encoding;

/*
 * grpc-encoding: NULL or "identity" -> GW_GRPC_IDENTITY, "gzip" ->
 * GW_GRPC_GZIP. Returns 0, or -1 for any other coding (the call is then
 * UNIMPLEMENTED, with grpc-accept-encoding: GW_GRPC_ACCEPT_ENCODING).
 */
int gw_grpc_encoding_parse(const char *value, gw_grpc_encoding *out);
#define GW_GRPC_ACCEPT_ENCODING "identity,gzip"

/*
 * The reader of one stream's messages: fed the DATA bytes as they come, it
 * hands back whole messages, inflated when compressed. Every message is
 * bounded by message_bytes_max, on the wire and once inflated.
 */
typedef struct gw_grpc_reader gw_grpc_reader;

/*
 * One whole message (len 0: empty). data points into the reader or into the
 * input it was fed: valid until the next feed or free, and while that input is.
 */
typedef struct gw_grpc_msg {
        const uint8_t *data;
        size_t len;
        bool compressed; /* it came compressed (and data is the inflated bytes) */
} gw_grpc_msg;

/* Returns 0, or -1 (out of memory; message_bytes_max 0 or over UINT32_MAX). */
int gw_grpc_reader_new(gw_grpc_reader **out, gw_grpc_encoding encoding, size_t message_bytes_max);
void gw_grpc_reader_free(gw_grpc_reader *r); /* NULL is fine */

/*
 * Reads from in[0..len) up to the end of the next whole message. *used is
 * how much was read; *have tells whether *msg holds a message (then call
 * again with the rest of the input, as it may hold more). Without a message
 * all the input was read and kept. Returns KS_OK, or the status that ends
 * the stream (the reader must not be fed again):
 *   KS_RESOURCE_EXHAUSTED  a length prefix, or an inflated message, over the bound
 *   KS_INTERNAL            a compressed message on an identity stream, a flag
 *                          other than 0 and 1, bytes gzip cannot inflate
 *   KS_INTERNAL            out of memory
 * *err then names the fault (a static string for grpc-message).
 */
int gw_grpc_reader_feed(gw_grpc_reader *r, const uint8_t *in, size_t len, size_t *used, bool *have,
                        gw_grpc_msg *msg, const char **err) KS_MUST_CHECK;

/* True between messages: the stream may end here (else it ended mid-message: INTERNAL). */
bool gw_grpc_reader_idle(const gw_grpc_reader *r);

/* The 5-byte prefix of a message of len bytes; -1 when len is over UINT32_MAX. */
int gw_grpc_prefix(uint8_t out[GW_GRPC_PREFIX_BYTES], bool compressed, size_t len);

/*
 * One message framed for the wire, malloc'd into *out. With GW_GRPC_GZIP
 * and len >= gzip_min_bytes the message is sent gzipped when that makes it
 * smaller (the flag says so per message). Returns 0, or -1 (out of memory,
 * or len over UINT32_MAX).
 */
int gw_grpc_frame(const uint8_t *msg, size_t len, gw_grpc_encoding encoding, size_t gzip_min_bytes,
                  uint8_t **out, size_t *out_len) KS_MUST_CHECK;

/*
 * grpc-timeout: 1..8 ASCII digits then one unit of H M S m u n, nothing
 * else. Into milliseconds, rounded up (1n is 1 ms, so that a deadline the
 * client gave is never 0 unless it said 0). Returns 0, or -1.
 */
int gw_grpc_timeout_parse(const char *value, int64_t *ms);

/*
 * grpc-message: percent-encodes UTF-8 text as the spec says (every byte but
 * 0x20-0x24 and 0x26-0x7E as %XX, upper-case hex) into out (out_len bytes,
 * NUL-terminated). A message that does not fit is cut before a character
 * (never inside a %XX or a UTF-8 sequence). Returns the length written.
 */
size_t gw_grpc_message_encode(const char *in, size_t in_len, char *out, size_t out_len);

/*
 * grpc-message, decoded: every valid %XX becomes its byte; anything else,
 * a malformed % included, is kept as it is (the spec: never fail on it).
 * out needs at most in_len + 1 bytes; it is NUL-terminated and cut to
 * out_len. Returns the length written.
 */
size_t gw_grpc_message_decode(const char *in, size_t in_len, char *out, size_t out_len);

/* grpc-status of a keelson code: the same number (ks_code is gRPC's); UNKNOWN when out of range. */
int gw_grpc_status_of_code(int code);
/* keelson's code of a grpc-status number; KS_UNKNOWN when out of range. */
int gw_code_of_grpc_status(long status);
/*
 * grpc-status: 1..9 ASCII digits -> the keelson code (KS_UNKNOWN past 16).
 * Returns 0, or -1 (then *code is KS_UNKNOWN, as a client reads a malformed
 * status).
 */
int gw_grpc_status_parse(const char *value, int *code);
/*
 * The status a client gives a response whose HTTP status is not 200 and
 * that carries no grpc-status (doc/http-grpc-status-mapping.md): 400
 * INTERNAL, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 UNIMPLEMENTED,
 * 429 502 503 504 UNAVAILABLE, anything else UNKNOWN. For reading an
 * upstream's reply only: a server never signals gRPC errors this way.
 */
int gw_grpc_status_of_http(int http_status);

#endif
