/*
 * ks_list: page sizes, page tokens and the limit + 1 page (see ks_list.h).
 *
 * A token is the base64url (unpadded) of
 *
 *   version (1 byte) | the sort key as text, keys joined by '.' | check (8 bytes)
 *
 * where check is the start of HMAC-SHA256(scope digest, version | key text)
 * and the scope digest is HMAC-SHA256(list name, scope). So a token made for
 * another list or another scope, or altered in any byte, fails the check;
 * only the canonical base64url spelling of a token is accepted, so a list
 * position has exactly one token. The scope is the caller's tenant, and for
 * a list whose tokens are bound to its filters (ks_list_reply_bound) the
 * filters' text after it.
 *
 * ks_list_reply is the frame of a whole list method around those steps: the
 * page query runs in the service's own tenant transaction (a callback), and
 * the reply is filled through its descriptor, so that what stays with each
 * method is its spec, its SQL, its filters and how a row becomes its item.
 */
#include "ks_list.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_code.h"
#include "ks_crypto.h"
#include "ks_log.h"
#include "ks_pg.h"
#include "ks_rpc.h"

#define TOKEN_VERSION     1
#define TOKEN_CHECK_BYTES 8
#define KEY_TEXT_MAX      (KS_LIST_KEYS_MAX * KS_LIST_KEY_BYTES_MAX)
#define TOKEN_RAW_MAX     (1 + KEY_TEXT_MAX + TOKEN_CHECK_BYTES)
#define SCOPE_TENANT_MAX  64 /* a caller's tenant id: a uuid is 36 */

_Static_assert(KS_BASE64_LEN(TOKEN_RAW_MAX) <= KS_LIST_TOKEN_BYTES_MAX,
               "the longest token fits KS_LIST_TOKEN_BYTES_MAX");

int ks_list_page_size(int64_t requested, int size_default, int size_max)
{
        if (requested < 0) {
                return -1;
        }
        if (requested == 0) {
                return size_default < size_max ? size_default : size_max;
        }
        /* Above the maximum is coerced to it, as AIP-158 asks. */
        return requested > size_max ? size_max : (int)requested;
}

static bool int64_text_valid(const char *s)
{
        const char *digits = s[0] == '-' ? s + 1 : s;
        size_t n = strspn(digits, "0123456789");
        char *end = NULL;

        if (n == 0 || n > 19 || digits[n] != '\0') {
                return false;
        }
        errno = 0;
        (void)strtoll(s, &end, 10);
        return errno == 0 && end != NULL && *end == '\0';
}

static bool key_valid(ks_list_key_kind kind, const char *s)
{
        if (s == NULL || strlen(s) >= KS_LIST_KEY_BYTES_MAX) {
                return false;
        }
        switch (kind) {
        case KS_LIST_KEY_INT64:
                return int64_text_valid(s);
        case KS_LIST_KEY_UUID:
                return ks_uuid_valid(s);
        }
        return false;
}

static bool spec_valid(const ks_list_spec *spec)
{
        return spec != NULL && spec->name != NULL && spec->n_keys >= 1 &&
               spec->n_keys <= KS_LIST_KEYS_MAX && spec->page_size_max >= 1 &&
               spec->page_size_default >= 1 && spec->item_size > 0 && spec->item != NULL;
}

static int scope_digest(const ks_list_spec *spec, const char *scope,
                        uint8_t out[KS_LIST_DIGEST_BYTES])
{
        const char *s = scope != NULL ? scope : "";

        return ks_hmac_sha256(spec->name, strlen(spec->name), s, strlen(s), out);
}

static int token_check(const uint8_t digest[KS_LIST_DIGEST_BYTES], const uint8_t *raw, size_t len,
                       uint8_t out[TOKEN_CHECK_BYTES])
{
        uint8_t mac[KS_SHA256_BYTES];

        if (ks_hmac_sha256(digest, KS_LIST_DIGEST_BYTES, raw, len, mac) != 0) {
                return -1;
        }
        memcpy(out, mac, TOKEN_CHECK_BYTES);
        return 0;
}

static int encode_with(const ks_list_spec *spec, const uint8_t digest[KS_LIST_DIGEST_BYTES],
                       const char *const *keys, char *out, size_t out_len)
{
        uint8_t raw[TOKEN_RAW_MAX];
        size_t len = 1;

        raw[0] = TOKEN_VERSION;
        for (int i = 0; i < spec->n_keys; i++) {
                size_t n;

                if (!key_valid(spec->keys[i].kind, keys[i])) {
                        return -1;
                }
                n = strlen(keys[i]);
                if (i > 0) {
                        raw[len++] = '.';
                }
                memcpy(raw + len, keys[i], n);
                len += n;
        }
        if (token_check(digest, raw, len, raw + len) != 0) {
                return -1;
        }
        len += TOKEN_CHECK_BYTES;
        return ks_base64url_encode(raw, len, out, out_len) < 0 ? -1 : 0;
}

/* Splits the key text (len bytes, no NUL among them) into n_keys keys of their kinds. */
static int split_keys(const ks_list_spec *spec, const uint8_t *text, size_t len,
                      char keys[][KS_LIST_KEY_BYTES_MAX])
{
        size_t start = 0;

        for (int i = 0; i < spec->n_keys; i++) {
                const uint8_t *dot = memchr(text + start, '.', len - start);
                size_t end = dot != NULL ? (size_t)(dot - text) : len;

                if ((i + 1 < spec->n_keys) != (dot != NULL) ||
                    end - start >= KS_LIST_KEY_BYTES_MAX) {
                        return -1;
                }
                memcpy(keys[i], text + start, end - start);
                keys[i][end - start] = '\0';
                if (!key_valid(spec->keys[i].kind, keys[i])) {
                        return -1;
                }
                start = end + 1;
        }
        return 0;
}

static int decode_with(const ks_list_spec *spec, const uint8_t digest[KS_LIST_DIGEST_BYTES],
                       const char *token, char keys[][KS_LIST_KEY_BYTES_MAX])
{
        uint8_t raw[TOKEN_RAW_MAX], check[TOKEN_CHECK_BYTES];
        char canonical[KS_LIST_TOKEN_BYTES_MAX];
        size_t token_len = token != NULL ? strnlen(token, KS_LIST_TOKEN_BYTES_MAX) : 0;
        int n;

        if (token_len == 0 || token_len >= KS_LIST_TOKEN_BYTES_MAX) {
                return -1;
        }
        if ((n = ks_base64_decode(token, token_len, raw, sizeof(raw))) <
                1 + 1 + TOKEN_CHECK_BYTES ||
            ks_base64url_encode(raw, (size_t)n, canonical, sizeof(canonical)) < 0 ||
            strcmp(canonical, token) != 0 || raw[0] != TOKEN_VERSION) {
                return -1;
        }
        n -= TOKEN_CHECK_BYTES;
        if (token_check(digest, raw, (size_t)n, check) != 0 ||
            !ks_consttime_equal(check, raw + n, TOKEN_CHECK_BYTES) ||
            memchr(raw + 1, '\0', (size_t)n - 1) != NULL) {
                return -1;
        }
        return split_keys(spec, raw + 1, (size_t)n - 1, keys);
}

int ks_list_token_encode(const ks_list_spec *spec, const char *scope, const char *const *keys,
                         char *out, size_t out_len)
{
        uint8_t digest[KS_LIST_DIGEST_BYTES];

        if (!spec_valid(spec) || keys == NULL || out == NULL ||
            scope_digest(spec, scope, digest) != 0) {
                return -1;
        }
        return encode_with(spec, digest, keys, out, out_len);
}

int ks_list_token_decode(const ks_list_spec *spec, const char *scope, const char *token,
                         char keys[][KS_LIST_KEY_BYTES_MAX])
{
        uint8_t digest[KS_LIST_DIGEST_BYTES];

        if (!spec_valid(spec) || keys == NULL || scope_digest(spec, scope, digest) != 0) {
                return -1;
        }
        return decode_with(spec, digest, token, keys);
}

int ks_list_page_begin(ks_list_page *p, const ks_list_spec *spec, int32_t page_size,
                       const char *page_token, const char *scope, const char **err)
{
        bool first_page = page_token == NULL || page_token[0] == '\0';

        memset(p, 0, sizeof(*p));
        *err = NULL;
        if (!spec_valid(spec) || scope_digest(spec, scope, p->scope_digest) != 0) {
                *err = "internal error";
                return KS_INTERNAL;
        }
        p->spec = spec;
        if ((p->page_size =
                 ks_list_page_size(page_size, spec->page_size_default, spec->page_size_max)) < 0) {
                *err = KS_LIST_PAGE_SIZE_NEGATIVE_MSG;
                return KS_INVALID_ARGUMENT;
        }
        if (!first_page && decode_with(spec, p->scope_digest, page_token, p->keys) != 0) {
                *err = KS_LIST_TOKEN_FOREIGN_MSG;
                return KS_INVALID_ARGUMENT;
        }
        for (int i = 0; i < spec->n_keys; i++) {
                p->params[i] = first_page ? spec->keys[i].first : p->keys[i];
        }
        /* One row more than the page: its presence says there is a next page. */
        snprintf(p->limit, sizeof(p->limit), "%d", p->page_size + 1);
        p->params[spec->n_keys] = p->limit;
        p->n_params = spec->n_keys + 1;
        return KS_OK;
}

/* The next token from the sort key of the page's last row. */
static int next_token(ks_list_page *p, int row)
{
        const ks_list_spec *spec = p->spec;
        const char *keys[KS_LIST_KEYS_MAX];

        for (int i = 0; i < spec->n_keys; i++) {
                int col = spec->keys[i].column;

                if (col < 0 || col >= PQnfields(p->res) || PQgetisnull(p->res, row, col)) {
                        return -1;
                }
                keys[i] = PQgetvalue(p->res, row, col);
        }
        return encode_with(spec, p->scope_digest, keys, p->next_page_token,
                           sizeof(p->next_page_token));
}

int ks_list_page_finish(ks_list_page *p, PGresult *res)
{
        int rows = res != NULL ? PQntuples(res) : 0;
        int n = rows > p->page_size ? p->page_size : rows;
        char *block;

        PQclear(p->res);
        p->res = res;
        if (res == NULL || p->spec == NULL) {
                return KS_INTERNAL;
        }
        block = calloc((size_t)n + 1, p->spec->item_size);
        p->item_block = block;
        p->items = calloc((size_t)n + 1, sizeof(*p->items));
        if (block == NULL || p->items == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        for (int i = 0; i < n; i++) {
                p->items[i] = block + (size_t)i * p->spec->item_size;
                p->spec->item(p->items[i], res, i);
        }
        p->n_items = (size_t)n;
        p->next_page_token[0] = '\0';
        if (rows > n && next_token(p, n - 1) != 0) {
                return KS_INTERNAL;
        }
        return KS_OK;
}

void ks_list_page_clear(ks_list_page *p)
{
        if (p == NULL) {
                return;
        }
        PQclear(p->res);
        free(p->items);
        free(p->item_block);
        memset(p, 0, sizeof(*p));
}

/* ---- a whole list method ------------------------------------------------ */

typedef struct list_query {
        const char *params[KS_LIST_KEYS_MAX + 1 + KS_LIST_FILTERS_MAX];
        int n_params;
        PGresult *res;
} list_query;

/*
 * A token's scope: the caller's tenant, then the binding after a newline
 * (a tenant id holds none), so that neither can pass for the other. With no
 * binding, the tenant alone: the tokens of an unbound list. Returns 0, or
 * -1 when the binding is too long.
 */
static int list_scope(const ks_call *call, const char *binding, char *out, size_t out_len)
{
        const char *tenant = call->caller->tenant_id != NULL ? call->caller->tenant_id : "";
        int n;

        if (binding == NULL || binding[0] == '\0') {
                n = snprintf(out, out_len, "%s", tenant);
        } else if (strlen(binding) >= KS_LIST_BINDING_BYTES_MAX) {
                return -1;
        } else {
                n = snprintf(out, out_len, "%s\n%s", tenant, binding);
        }
        return n < 0 || (size_t)n >= out_len ? -1 : 0;
}

/* The page's items and next_page_token, or a code the call carries (page then cleared). */
static int list_page(ks_call *call, const ks_list_method *m, int32_t page_size,
                     const char *page_token, const char *const *filters, int n_filters,
                     const char *binding, const ks_list_runner *r, ks_list_page *page)
{
        char scope[SCOPE_TENANT_MAX + KS_LIST_BINDING_BYTES_MAX];
        list_query q = {.res = NULL};
        const char *err = NULL;
        int rc;

        memset(page, 0, sizeof(*page));
        if (n_filters < 0 || n_filters > KS_LIST_FILTERS_MAX ||
            list_scope(call, binding, scope, sizeof(scope)) != 0) {
                return ks_call_fail(call, KS_INTERNAL, "%s", r->internal_msg);
        }
        if ((rc = ks_list_page_begin(page, &m->page, page_size, page_token, scope, &err)) !=
            KS_OK) {
                ks_list_page_clear(page);
                return ks_call_fail(call, rc, "%s", rc == KS_INTERNAL ? r->internal_msg : err);
        }
        memcpy(q.params, page->params, (size_t)page->n_params * sizeof(q.params[0]));
        for (int i = 0; i < n_filters; i++) {
                q.params[page->n_params + i] = filters[i];
        }
        q.n_params = page->n_params + n_filters;
        const ks_pg_stmt query = {
            .sql = m->sql, .n_params = q.n_params, .params = q.params, .out = &q.res};
        if ((rc = r->run(call, &query, r->run_arg)) != KS_OK) {
                PQclear(q.res);
                ks_list_page_clear(page);
                return rc;
        }
        if ((rc = ks_list_page_finish(page, q.res)) != KS_OK) {
                ks_list_page_clear(page);
                if (rc == KS_RESOURCE_EXHAUSTED) {
                        return ks_call_oom(call);
                }
                ks_log_error(call->request_id, "list page: a sort key column holds no key", "{s:s}",
                             "list", m->page.name);
                return ks_call_fail(call, KS_INTERNAL, "%s", r->internal_msg);
        }
        return KS_OK;
}

int ks_list_reply_page(ks_call *call, const char *items_field, const ks_list_page *page)
{
        const ProtobufCMessageDescriptor *d = call->method->output;
        const ProtobufCFieldDescriptor *items =
            protobuf_c_message_descriptor_get_field_by_name(d, items_field);
        const ProtobufCFieldDescriptor *token =
            protobuf_c_message_descriptor_get_field_by_name(d, "next_page_token");
        char *resp;
        int rc;

        KS_ASSERT(items != NULL && items->label == PROTOBUF_C_LABEL_REPEATED &&
                  items->type == PROTOBUF_C_TYPE_MESSAGE);
        KS_ASSERT(token != NULL && token->type == PROTOBUF_C_TYPE_STRING);
        if ((resp = malloc(d->sizeof_message)) == NULL) {
                return ks_call_oom(call);
        }
        protobuf_c_message_init(d, resp);
        *(size_t *)(resp + items->quantifier_offset) = page->n_items;
        *(void ***)(resp + items->offset) = page->items;
        *(const char **)(resp + token->offset) = page->next_page_token;
        rc = ks_call_reply(call, (const ProtobufCMessage *)resp);
        free(resp);
        return rc;
}

int ks_list_reply_bound(ks_call *call, const ks_list_method *m, int32_t page_size,
                        const char *page_token, const char *const *filters, int n_filters,
                        const char *binding, const ks_list_runner *r)
{
        ks_list_page p;
        int rc;

        KS_ASSERT(r != NULL && r->run != NULL && r->internal_msg != NULL);
        if ((rc = list_page(call, m, page_size, page_token, filters, n_filters, binding, r, &p)) !=
            KS_OK) {
                return rc;
        }
        rc = ks_list_reply_page(call, m->items_field, &p);
        ks_list_page_clear(&p);
        return rc;
}

int ks_list_reply(ks_call *call, const ks_list_method *m, int32_t page_size, const char *page_token,
                  const char *const *filters, int n_filters, const ks_list_runner *r)
{
        return ks_list_reply_bound(call, m, page_size, page_token, filters, n_filters, NULL, r);
}
