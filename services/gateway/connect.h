/*
 * connect.c: the Connect protocol's rules for unary RPCs over HTTP/1.1:
 * content types, headers, request ids, bearer tokens, the error JSON, and
 * the one way a reply is written (through front.c).
 */
#ifndef GW_CONNECT_H
#define GW_CONNECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "front.h"

#define GW_REQUEST_ID_MAX     64  /* X-Request-Id: [A-Za-z0-9._-]{1,64} */
#define GW_TOKEN_MAX          512 /* bearer tokens; longer ones are refused unread */
#define GW_TIMEOUT_DIGITS_MAX 10

typedef enum gw_codec { GW_CODEC_JSON, GW_CODEC_PROTO } gw_codec;

/* The codec of a Content-Type ("application/json; charset=utf-8"); -1 if none. */
int gw_connect_codec(const char *content_type, gw_codec *out);
/* The Content-Type a successful reply carries for a codec. */
const char *gw_codec_content_type(gw_codec codec);
/* Accepted: no Connect-Protocol-Version header, or exactly "1". */
bool gw_connect_version_ok(const char *value);
/*
 * Connect-Timeout-Ms: NULL -> 0 and *has = false; 1..10 ASCII digits -> the
 * value and *has = true. Returns 0, or -1 for anything else.
 */
int gw_connect_timeout(const char *value, int64_t *ms, bool *has);
/* Stripe's bound on an Idempotency-Key. */
#define GW_IDEMPOTENCY_KEY_MAX 255
/*
 * Idempotency-Key: NULL -> "" (none); 1..255 printable ASCII characters
 * (0x21..0x7e and inner spaces) -> copied into out. Returns 0, or -1 for
 * anything else (empty, too long, a control or non-ASCII byte).
 */
int gw_idempotency_key(const char *value, char out[GW_IDEMPOTENCY_KEY_MAX + 1]);
/* Accepted: no Content-Encoding header, or "identity". */
bool gw_identity_encoding(const char *value);
/* True when s is [A-Za-z0-9._-]{1,64}. */
bool gw_request_id_valid(const char *s);
/* given (the client's X-Request-Id, or NULL) when valid, else a fresh uuid v4. */
void gw_connect_request_id(const char *given, char out[GW_REQUEST_ID_MAX + 1]);
/*
 * Finds the token of "Authorization: Bearer <token>" (RFC 6750 b64token, at
 * most GW_TOKEN_MAX bytes). Returns 0 with *tok pointing into value, or -1.
 */
int gw_bearer_token(const char *value, const char **tok, size_t *len);
/* {"code":"<name>","message":"<message>"}: malloc'd into *out. Returns 0 or -1. */
int gw_error_json(int code, const char *message, char **out, size_t *len);

/*
 * Writes a reply with X-Request-Id (request_id may be NULL): req is gone
 * afterwards (gw_req_reply).
 */
void gw_send(gw_req *req, int status, const char *content_type, const void *body, size_t len,
             const char *request_id);
/* A Connect error reply: JSON body, Content-Type application/json. */
void gw_send_error(gw_req *req, int status, int code, const char *message, const char *request_id);

#endif
