/*
 * The Connect protocol's unary rules that the gateway checks and writes:
 * codecs, the protocol version and timeout headers, the encoding, request
 * ids, bearer tokens and the error body. Pure functions over header values
 * (no I/O) apart from the two senders at the end.
 *
 * Choices where the protocol leaves room (see README.md beside this file):
 * - A request without Connect-Protocol-Version is accepted, so plain curl
 *   works; one with any other value than "1" is refused (invalid_argument).
 * - Connect-Timeout-Ms "0" is accepted and means "already expired": the call
 *   ends with deadline_exceeded, as with connect-go.
 * - A Content-Encoding other than identity is refused with HTTP 415 and the
 *   Connect code unimplemented (Connect's code for an unsupported
 *   compression; 415 is what RFC 7231 §3.1.2.2 gives for a content coding
 *   the server does not accept), with "Accept-Encoding: identity".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "connect.h"
#include "ks_crypto.h"
#include "ks_log.h"
#include "ks_text.h"

#define MEDIA_JSON  "application/json"
#define MEDIA_PROTO "application/proto"

static bool is_space(char c)
{
        return c == ' ' || c == '\t';
}

/* Compares the media type of a header value (before any ';') with want. */
int gw_connect_codec(const char *content_type, gw_codec *out)
{
        if (content_type == NULL) {
                return -1;
        }
        if (ks_media_type_is(content_type, MEDIA_JSON)) {
                *out = GW_CODEC_JSON;
                return 0;
        }
        if (ks_media_type_is(content_type, MEDIA_PROTO)) {
                *out = GW_CODEC_PROTO;
                return 0;
        }
        return -1;
}

const char *gw_codec_content_type(gw_codec codec)
{
        return codec == GW_CODEC_PROTO ? MEDIA_PROTO : MEDIA_JSON;
}

bool gw_connect_version_ok(const char *value)
{
        return value == NULL || strcmp(value, "1") == 0;
}

int gw_connect_timeout(const char *value, int64_t *ms, bool *has)
{
        *ms = 0;
        *has = false;
        if (value == NULL) {
                return 0;
        }
        size_t len = strlen(value);
        if (len < 1 || len > GW_TIMEOUT_DIGITS_MAX) {
                return -1;
        }
        int64_t v = 0;
        for (size_t i = 0; i < len; i++) {
                if (value[i] < '0' || value[i] > '9') {
                        return -1;
                }
                v = v * 10 + (value[i] - '0'); /* at most 10 digits: no overflow */
        }
        *ms = v;
        *has = true;
        return 0;
}

int gw_idempotency_key(const char *value, char out[GW_IDEMPOTENCY_KEY_MAX + 1])
{
        out[0] = '\0';
        if (value == NULL) {
                return 0;
        }
        size_t len = strlen(value);
        if (len < 1 || len > GW_IDEMPOTENCY_KEY_MAX) {
                return -1;
        }
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)value[i];
                if (c < 0x20 || c > 0x7e) {
                        return -1;
                }
        }
        memcpy(out, value, len + 1);
        return 0;
}

bool gw_identity_encoding(const char *value)
{
        return value == NULL || ks_media_type_is(value, "identity");
}

static bool is_request_id_char(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
}

bool gw_request_id_valid(const char *s)
{
        if (s == NULL) {
                return false;
        }
        size_t i = 0;
        for (; s[i] != '\0'; i++) {
                if (i >= GW_REQUEST_ID_MAX || !is_request_id_char(s[i])) {
                        return false;
                }
        }
        return i > 0;
}

void gw_connect_request_id(const char *given, char out[GW_REQUEST_ID_MAX + 1])
{
        if (gw_request_id_valid(given)) {
                snprintf(out, GW_REQUEST_ID_MAX + 1, "%s", given);
                return;
        }
        char uuid[37];
        if (ks_uuid_v4(uuid) != 0) {
                /* No randomness left is not a reason to drop the request. */
                snprintf(uuid, sizeof(uuid), "00000000-0000-4000-8000-000000000000");
        }
        snprintf(out, GW_REQUEST_ID_MAX + 1, "%s", uuid);
}

/* RFC 6750 b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=" */
static bool is_b64token(const char *s, size_t len)
{
        size_t i = 0;
        while (i < len && ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                           (s[i] >= '0' && s[i] <= '9') || strchr("-._~+/", s[i]) != NULL)) {
                i++;
        }
        if (i == 0) {
                return false;
        }
        while (i < len && s[i] == '=') {
                i++;
        }
        return i == len;
}

int gw_bearer_token(const char *value, const char **tok, size_t *len)
{
        static const char scheme[] = "Bearer";
        size_t scheme_len = sizeof(scheme) - 1;

        if (value == NULL || strncasecmp(value, scheme, scheme_len) != 0 ||
            !is_space(value[scheme_len])) {
                return -1;
        }
        const char *p = value + scheme_len;
        while (is_space(*p)) {
                p++;
        }
        size_t n = strlen(p);
        while (n > 0 && is_space(p[n - 1])) {
                n--;
        }
        if (n == 0 || n > GW_TOKEN_MAX || !is_b64token(p, n)) {
                return -1;
        }
        *tok = p;
        *len = n;
        return 0;
}

int gw_error_json(int code, const char *message, char **out, size_t *len)
{
        static const char withheld[] = "(message withheld: not valid UTF-8)";
        const char *name = ks_code_name(code);
        size_t name_len = strlen(name), msg_len = message != NULL ? strlen(message) : 0;

        if (msg_len > 0 && !ks_utf8_valid(message, msg_len)) {
                /* Not valid UTF-8: the code still tells the client what happened. */
                message = withheld;
                msg_len = sizeof(withheld) - 1;
        }
        /* {"code":"…","message":"…"} */
        char *p = malloc(sizeof("{\"code\":\"\",\"message\":\"\"}") +
                         KS_JSON_ESCAPED_MAX(name_len) + KS_JSON_ESCAPED_MAX(msg_len));
        if (p == NULL) {
                return -1;
        }
        size_t n = 0;
        memcpy(p + n, "{\"code\":\"", 9);
        n += 9;
        n += ks_json_escape(p + n, name, name_len);
        memcpy(p + n, "\",\"message\":\"", 13);
        n += 13;
        n += ks_json_escape(p + n, message, msg_len);
        memcpy(p + n, "\"}", 3); /* with its NUL */
        *out = p;
        *len = n + 2;
        return 0;
}

void gw_send(gw_req *req, int status, const char *content_type, const void *body, size_t len,
             const char *request_id)
{
        if (request_id != NULL) {
                gw_req_add_header(req, "X-Request-Id", request_id);
        }
        gw_req_reply(req, status, content_type, body, len);
}

void gw_send_error(gw_req *req, int status, int code, const char *message, const char *request_id)
{
        char *json = NULL;
        size_t len = 0;
        if (gw_error_json(code, message, &json, &len) != 0) {
                static const char fallback[] = "{\"code\":\"internal\",\"message\":\"\"}";
                gw_send(req, 500, MEDIA_JSON, fallback, sizeof(fallback) - 1, request_id);
                return;
        }
        gw_send(req, status, MEDIA_JSON, json, len, request_id);
        free(json);
}
