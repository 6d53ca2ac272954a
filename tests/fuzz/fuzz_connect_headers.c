/*
 * libFuzzer target: the gateway's Connect header rules (services/gateway/
 * connect.c) over one untrusted header value, the input up to its first
 * NUL: Content-Type, Connect-Protocol-Version, Connect-Timeout-Ms,
 * Content-Encoding, X-Request-Id,
 * Authorization: Bearer, and the error body that may echo client text.
 *
 * Checks, aborting on a violation, what connect.h promises of each function
 * against a small independent reading of the same rule.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "connect.h"
#include "ks_code.h"

#define VALUE_MAX 2048

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

__attribute__((noreturn)) static void die(const char *what)
{
        fprintf(stderr, "fuzz_connect_headers: %s\n", what);
        abort();
}

static bool is_space(char c)
{
        return c == ' ' || c == '\t';
}

/* The media type of v (before any ';', spaces and tabs trimmed) is want. */
static bool ref_media_is(const char *v, const char *want)
{
        while (is_space(*v))
                v++;
        size_t n = strcspn(v, ";");
        while (n > 0 && is_space(v[n - 1]))
                n--;
        return n == strlen(want) && strncasecmp(v, want, n) == 0;
}

static void check_codec(const char *v)
{
        gw_codec codec = (gw_codec)-1;
        bool json = ref_media_is(v, "application/json");
        bool proto = ref_media_is(v, "application/proto");
        int rc = gw_connect_codec(v, &codec);

        if ((rc == 0) != (json || proto))
                die("gw_connect_codec disagrees on whether the media type is known");
        if (rc == 0 && codec != (json ? GW_CODEC_JSON : GW_CODEC_PROTO))
                die("gw_connect_codec chose the wrong codec");
}

static void check_timeout(const char *v)
{
        int64_t ms = -1;
        bool has = true;
        size_t len = strlen(v);
        bool digits = len >= 1 && len <= GW_TIMEOUT_DIGITS_MAX && strspn(v, "0123456789") == len;
        int rc = gw_connect_timeout(v, &ms, &has);

        if ((rc == 0) != digits)
                die(digits ? "gw_connect_timeout refuses 1..10 digits"
                           : "gw_connect_timeout accepts something other than 1..10 digits");
        if (rc == 0 && (!has || ms != strtoll(v, NULL, 10)))
                die("gw_connect_timeout gives another value than the digits");
        if (rc != 0 && (has || ms != 0))
                die("gw_connect_timeout refused but set a value");
}

static bool ref_request_id(const char *v)
{
        size_t n = strlen(v);
        for (size_t i = 0; i < n; i++) {
                if (!isalnum((unsigned char)v[i]) && strchr("._-", v[i]) == NULL)
                        return false;
        }
        return n >= 1 && n <= GW_REQUEST_ID_MAX;
}

/* The id of a request whose X-Request-Id header is v. */
static void check_request_id_header(const char *v)
{
        char out[GW_REQUEST_ID_MAX + 1];
        memset(out, 'x', sizeof(out));
        gw_connect_request_id(v, out);
        if (memchr(out, '\0', sizeof(out)) == NULL || !gw_request_id_valid(out))
                die("gw_connect_request_id produced an invalid id");
        if (ref_request_id(v) ? strcmp(out, v) != 0 : strlen(out) != 36)
                die("gw_connect_request_id neither kept a valid id nor made a uuid");
}

static bool is_token_char(char c)
{
        return isalnum((unsigned char)c) || (c != '\0' && strchr("-._~+/", c) != NULL);
}

static void check_bearer(const char *v)
{
        const char *tok = NULL;
        size_t len = 0, i = 0;

        if (gw_bearer_token(v, &tok, &len) != 0)
                return;
        if (strncasecmp(v, "Bearer", 6) != 0 || !is_space(v[6]))
                die("gw_bearer_token accepted another scheme");
        if (tok < v + 7 || tok + len > v + strlen(v) || len < 1 || len > GW_TOKEN_MAX)
                die("gw_bearer_token's token is outside the value or too long");
        for (const char *p = v + 6; p < tok; p++) {
                if (!is_space(*p))
                        die("gw_bearer_token skipped more than spaces");
        }
        for (const char *p = tok + len; *p != '\0'; p++) {
                if (!is_space(*p))
                        die("gw_bearer_token dropped more than trailing spaces");
        }
        while (i < len && is_token_char(tok[i]))
                i++;
        while (i > 0 && i < len && tok[i] == '=')
                i++;
        if (i == 0 || i != len)
                die("gw_bearer_token accepted a token that is not an RFC 6750 b64token");
}

static void check_error_json(const char *v, int code)
{
        char *out = NULL;
        size_t len = 0;
        json_error_t je;

        if (gw_error_json(code, v, &out, &len) != 0)
                die("gw_error_json failed");
        json_t *root = json_loadb(out, len, 0, &je);
        if (strlen(out) != len || root == NULL)
                die("gw_error_json wrote invalid JSON");
        json_t *probe = json_string(v); /* NULL when v is not valid UTF-8 */
        const char *got_code = json_string_value(json_object_get(root, "code"));
        const char *got_msg = json_string_value(json_object_get(root, "message"));
        if (got_code == NULL || strcmp(got_code, ks_code_name(code)) != 0)
                die("gw_error_json wrote another code");
        if (got_msg == NULL || (probe != NULL && strcmp(got_msg, v) != 0))
                die("gw_error_json changed a valid UTF-8 message");
        json_decref(probe);
        json_decref(root);
        free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char v[VALUE_MAX + 1];

        if (size > VALUE_MAX)
                return 0;
        memcpy(v, data, size);
        v[size] = '\0';
        check_codec(v);
        if (gw_connect_version_ok(v) != (strcmp(v, "1") == 0))
                die("gw_connect_version_ok accepts something other than \"1\"");
        check_timeout(v);
        if (gw_identity_encoding(v) != ref_media_is(v, "identity"))
                die("gw_identity_encoding disagrees on identity");
        if (gw_request_id_valid(v) != ref_request_id(v))
                die("gw_request_id_valid disagrees with [A-Za-z0-9._-]{1,64}");
        check_request_id_header(v);
        check_bearer(v);
        check_error_json(v, size > 0 ? data[0] % (KS_CODE_COUNT + 2) : 0);
        return 0;
}
