/*
 * Unit tests of ks_list: page sizes, page tokens (round trip; garbage,
 * altered, foreign tokens refused), the limit + 1 page with its
 * next_page_token, on results built in memory (no database), and the frame
 * of a list method (ks_list_reply): the reply built through its descriptor
 * from such a page, the refusals before the query, the service's
 * transaction's failures. The whole frame against a database is tested
 * through auth's list methods (tests/integration).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "keelson/test/v1/types.pb-c.h"
#include "ks_code.h"
#include "ks_crypto.h"
#include "ks_list.h"
#include "ks_rpc.h"

#ifdef __SANITIZE_ADDRESS__
/* test_finish_out_of_memory asks for an impossible calloc: let it fail as libc's does. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
        return "allocator_may_return_null=1";
}
#endif

#define UUID_A   "8c5e382b-f5fe-4723-b9d0-de982861f3fe"
#define UUID_B   "0b9d4c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b"
#define TENANT_1 "11111111-1111-4111-8111-111111111111"
#define TENANT_2 "22222222-2222-4222-8222-222222222222"

/* A row of the test's page query: (id, name, micros). */
typedef struct item {
        const char *id;
        const char *name;
} item;

static void fill_item(void *out, const PGresult *res, int row)
{
        item *it = out;

        it->id = PQgetvalue(res, row, 0);
        it->name = PQgetvalue(res, row, 1);
}

/* Sorted by (micros, id), as the auth lists of members, invitations and keys. */
#define BY_TIME(list_name)                                                                         \
        {                                                                                          \
                .name = (list_name), .page_size_default = 50, .page_size_max = 200, .n_keys = 2,   \
                .keys = {KS_LIST_DESC_MICROS(2), KS_LIST_DESC_UUID(0)}, .item_size = sizeof(item), \
                .item = fill_item,                                                                 \
        }
static const ks_list_spec by_time = BY_TIME("test.v1.Things/ListThings");

/* Another list with the same key kinds: its tokens must not be taken here. */
static const ks_list_spec by_time_other = BY_TIME("test.v1.Things/ListOtherThings");

/* Sorted by a bigint id, as the audit log. */
static const ks_list_spec by_id = {
    .name = "test.v1.Things/ListEntries",
    .page_size_default = 3,
    .page_size_max = 5,
    .n_keys = 1,
    .keys = {KS_LIST_ASC_INT64(0)},
    .item_size = sizeof(item),
    .item = fill_item,
};

/* ---- results built in memory ------------------------------------------------ */

static PGresult *result_new(void)
{
        PGresAttDesc cols[3] = {
            {.name = "id", .format = 0, .typid = 25, .typlen = -1, .atttypmod = -1},
            {.name = "name", .format = 0, .typid = 25, .typlen = -1, .atttypmod = -1},
            {.name = "micros", .format = 0, .typid = 20, .typlen = 8, .atttypmod = -1},
        };
        PGresult *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);

        assert_non_null(res);
        assert_int_equal(PQsetResultAttrs(res, 3, cols), 1);
        return res;
}

static void result_add(PGresult *res, const char *id, const char *name, const char *micros)
{
        int row = PQntuples(res);
        const char *v[3] = {id, name, micros};

        for (int c = 0; c < 3; c++) {
                assert_int_equal(
                    PQsetvalue(res, row, c, (char *)v[c], v[c] ? (int)strlen(v[c]) : -1), 1);
        }
}

/* n rows for by_id: ids 100, 101, ... */
static PGresult *result_rows(int n)
{
        PGresult *res = result_new();
        char id[16], micros[24];

        for (int i = 0; i < n; i++) {
                snprintf(id, sizeof(id), "%d", 100 + i);
                snprintf(micros, sizeof(micros), "%d", 1000 + i);
                result_add(res, id, "row", micros);
        }
        return res;
}

/* ---- page sizes ----------------------------------------------------------------- */

static void test_page_size(void **state)
{
        (void)state;
        assert_int_equal(ks_list_page_size(0, 50, 200), 50);
        assert_int_equal(ks_list_page_size(1, 50, 200), 1);
        assert_int_equal(ks_list_page_size(200, 50, 200), 200);
        assert_int_equal(ks_list_page_size(201, 50, 200), 200); /* coerced, not refused */
        assert_int_equal(ks_list_page_size(INT32_MAX, 50, 200), 200);
        assert_int_equal(ks_list_page_size(INT64_MAX, 50, 200), 200);
        assert_int_equal(ks_list_page_size(-1, 50, 200), -1);
        assert_int_equal(ks_list_page_size(INT32_MIN, 50, 200), -1);
        assert_int_equal(ks_list_page_size(0, 50, 10), 10); /* a default above the maximum */
}

static void test_begin_first_page(void **state)
{
        ks_list_page p;
        const char *err = "unset";

        (void)state;
        assert_int_equal(ks_list_page_begin(&p, &by_time, 0, "", TENANT_1, &err), KS_OK);
        assert_null(err);
        assert_int_equal(p.page_size, 50);
        assert_int_equal(p.n_params, 3);
        /* The first page's cursor: past every row, so the query's keyset condition is one. */
        assert_string_equal(p.params[0], KS_LIST_FIRST_DESC_MICROS);
        assert_string_equal(p.params[1], "ffffffff-ffff-ffff-ffff-ffffffffffff");
        assert_string_equal(p.params[2], "51"); /* one row more than the page */
        ks_list_page_clear(&p);

        assert_int_equal(ks_list_page_begin(&p, &by_id, 500, NULL, NULL, &err), KS_OK);
        assert_int_equal(p.page_size, 5);
        assert_int_equal(p.n_params, 2);
        assert_string_equal(p.params[0], "-9223372036854775808");
        assert_string_equal(p.params[1], "6");
        ks_list_page_clear(&p);
}

static void test_begin_refuses(void **state)
{
        ks_list_page p;
        const char *err = NULL;

        (void)state;
        assert_int_equal(ks_list_page_begin(&p, &by_time, -1, "", TENANT_1, &err),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "page_size: must not be negative");
        ks_list_page_clear(&p);
        assert_int_equal(ks_list_page_begin(&p, &by_time, 10, "nonsense", TENANT_1, &err),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "page_token: not from this list");
        ks_list_page_clear(&p);
}

/* ---- tokens ------------------------------------------------------------------------ */

static void test_token_round_trip(void **state)
{
        const char *keys[2] = {"1796230311020412", UUID_A};
        const char *extremes[][1] = {{"0"}, {"9223372036854775807"}, {"-9223372036854775808"}};
        char token[KS_LIST_TOKEN_BYTES_MAX], back[KS_LIST_KEYS_MAX][KS_LIST_KEY_BYTES_MAX];
        ks_list_page p;
        const char *err;

        (void)state;
        assert_int_equal(ks_list_token_encode(&by_time, TENANT_1, keys, token, sizeof(token)), 0);
        /* Opaque and URL-safe: base64url without padding. */
        assert_int_equal(strspn(token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                       "0123456789-_"),
                         strlen(token));
        assert_null(strstr(token, UUID_A));
        assert_int_equal(ks_list_token_decode(&by_time, TENANT_1, token, back), 0);
        assert_string_equal(back[0], "1796230311020412");
        assert_string_equal(back[1], UUID_A);

        /* What the page hands to the query. */
        assert_int_equal(ks_list_page_begin(&p, &by_time, 2, token, TENANT_1, &err), KS_OK);
        assert_string_equal(p.params[0], "1796230311020412");
        assert_string_equal(p.params[1], UUID_A);
        assert_string_equal(p.params[2], "3");
        ks_list_page_clear(&p);

        for (size_t i = 0; i < sizeof(extremes) / sizeof(extremes[0]); i++) {
                assert_int_equal(
                    ks_list_token_encode(&by_id, NULL, extremes[i], token, sizeof(token)), 0);
                assert_true(strlen(token) < KS_LIST_TOKEN_BYTES_MAX);
                assert_int_equal(ks_list_token_decode(&by_id, NULL, token, back), 0);
                assert_string_equal(back[0], extremes[i][0]);
        }
        /* No scope and an empty scope are the same scope. */
        assert_int_equal(ks_list_token_decode(&by_id, "", token, back), 0);
}

static void test_token_longest_fits(void **state)
{
        static const ks_list_spec two_uuids = {
            .name = "test.v1.Things/ListPairs",
            .page_size_default = 1,
            .page_size_max = 1,
            .n_keys = 2,
            .keys = {{KS_LIST_KEY_UUID, 0, NULL}, {KS_LIST_KEY_UUID, 1, NULL}},
            .item_size = sizeof(item),
            .item = fill_item,
        };
        const char *keys[2] = {UUID_A, UUID_B};
        const char *big[2] = {"-9223372036854775808", UUID_B};
        char token[KS_LIST_TOKEN_BYTES_MAX], back[KS_LIST_KEYS_MAX][KS_LIST_KEY_BYTES_MAX];

        (void)state;
        assert_int_equal(ks_list_token_encode(&two_uuids, TENANT_1, keys, token, sizeof(token)), 0);
        assert_int_equal(ks_list_token_decode(&two_uuids, TENANT_1, token, back), 0);
        assert_string_equal(back[1], UUID_B);
        assert_int_equal(ks_list_token_encode(&by_time, TENANT_1, big, token, sizeof(token)), 0);
        /* Too small an output is refused, not cut. */
        assert_int_equal(ks_list_token_encode(&by_time, TENANT_1, big, token, 16), -1);
}

static void test_token_encode_refuses_bad_keys(void **state)
{
        const char *bad[][2] = {
            {"12a", UUID_A},   {"", UUID_A},   {"9223372036854775808", UUID_A}, /* past int8 */
            {"+1", UUID_A},    {" 1", UUID_A}, {"1", "not-a-uuid"},
            {"1", UUID_A "0"}, {"1", NULL},    {NULL, UUID_A},
        };
        char token[KS_LIST_TOKEN_BYTES_MAX];

        (void)state;
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_int_equal(
                    ks_list_token_encode(&by_time, TENANT_1, bad[i], token, sizeof(token)), -1);
        }
}

static void test_token_garbage_refused(void **state)
{
        static const char *const garbage[] = {
            "",
            "nonsense",
            "4",                        /* an audit token as it used to be */
            "1796230311020412." UUID_A, /* a members token as it used to be */
            "!!!!",
            "AAAA",
            "AQ",                                   /* a version byte and nothing else */
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", /* zeros */
        };
        char long_token[300], back[KS_LIST_KEYS_MAX][KS_LIST_KEY_BYTES_MAX];

        (void)state;
        for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
                assert_int_equal(ks_list_token_decode(&by_time, TENANT_1, garbage[i], back), -1);
                assert_int_equal(ks_list_token_decode(&by_id, TENANT_1, garbage[i], back), -1);
        }
        assert_int_equal(ks_list_token_decode(&by_time, TENANT_1, NULL, back), -1);
        memset(long_token, 'A', sizeof(long_token) - 1);
        long_token[sizeof(long_token) - 1] = '\0';
        assert_int_equal(ks_list_token_decode(&by_time, TENANT_1, long_token, back), -1);
}

/* Every one-character change of a good token is refused, as are cut and lengthened ones. */
static void test_token_tampered_refused(void **state)
{
        static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                       "0123456789-_+/=.";
        const char *keys[2] = {"1796230311020412", UUID_A};
        char token[KS_LIST_TOKEN_BYTES_MAX], t[KS_LIST_TOKEN_BYTES_MAX + 2];
        char back[KS_LIST_KEYS_MAX][KS_LIST_KEY_BYTES_MAX];
        size_t len;
        int changes = 0;

        (void)state;
        assert_int_equal(ks_list_token_encode(&by_time, TENANT_1, keys, token, sizeof(token)), 0);
        len = strlen(token);
        for (size_t i = 0; i < len; i++) {
                for (const char *c = alphabet; *c != '\0'; c++) {
                        if (*c == token[i]) {
                                continue;
                        }
                        memcpy(t, token, len + 1);
                        t[i] = *c;
                        if (ks_list_token_decode(&by_time, TENANT_1, t, back) == 0) {
                                fail_msg("token changed at %zu to '%c' was accepted", i, *c);
                        }
                        changes++;
                }
        }
        assert_true(changes > 1000);
        memcpy(t, token, len + 1);
        t[len - 1] = '\0';
        assert_int_equal(ks_list_token_decode(&by_time, TENANT_1, t, back), -1);
        snprintf(t, sizeof(t), "%sA", token);
        assert_int_equal(ks_list_token_decode(&by_time, TENANT_1, t, back), -1);
        snprintf(t, sizeof(t), "%s=", token);
        assert_int_equal(ks_list_token_decode(&by_time, TENANT_1, t, back), -1);
}

static void test_token_foreign_refused(void **state)
{
        const char *keys[2] = {"1796230311020412", UUID_A};
        const char *id_key[1] = {"4"};
        char token[KS_LIST_TOKEN_BYTES_MAX], back[KS_LIST_KEYS_MAX][KS_LIST_KEY_BYTES_MAX];
        ks_list_page p;
        const char *err;

        (void)state;
        assert_int_equal(ks_list_token_encode(&by_time, TENANT_1, keys, token, sizeof(token)), 0);
        /* Another list with the same kind of key. */
        assert_int_equal(ks_list_token_decode(&by_time_other, TENANT_1, token, back), -1);
        /* Another list with another kind of key. */
        assert_int_equal(ks_list_token_decode(&by_id, TENANT_1, token, back), -1);
        /* The same list in another tenant. */
        assert_int_equal(ks_list_token_decode(&by_time, TENANT_2, token, back), -1);
        assert_int_equal(ks_list_token_decode(&by_time, NULL, token, back), -1);
        assert_int_equal(ks_list_page_begin(&p, &by_time, 0, token, TENANT_2, &err),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "page_token: not from this list");
        ks_list_page_clear(&p);

        assert_int_equal(ks_list_token_encode(&by_id, TENANT_1, id_key, token, sizeof(token)), 0);
        assert_int_equal(ks_list_token_decode(&by_time, TENANT_1, token, back), -1);
        assert_int_equal(ks_list_token_decode(&by_id, TENANT_1, token, back), 0);
}

/* ---- the limit + 1 page ---------------------------------------------------------- */

static void finish_rows(const ks_list_spec *spec, int32_t page_size, int rows, ks_list_page *p)
{
        const char *err;

        assert_int_equal(ks_list_page_begin(p, spec, page_size, "", TENANT_1, &err), KS_OK);
        assert_int_equal(ks_list_page_finish(p, result_rows(rows)), KS_OK);
}

static void test_next_token_presence(void **state)
{
        char back[KS_LIST_KEYS_MAX][KS_LIST_KEY_BYTES_MAX];
        ks_list_page p;

        (void)state;
        /* Exactly page_size rows: the last page, no token. */
        finish_rows(&by_id, 2, 2, &p);
        assert_int_equal(p.n_items, 2);
        assert_string_equal(p.next_page_token, "");
        ks_list_page_clear(&p);

        /* page_size + 1 rows: page_size shown, a token after the last one shown. */
        finish_rows(&by_id, 2, 3, &p);
        assert_int_equal(p.n_items, 2);
        assert_string_equal(((item *)p.items[0])->id, "100");
        assert_string_equal(((item *)p.items[1])->id, "101");
        assert_true(p.next_page_token[0] != '\0');
        assert_int_equal(ks_list_token_decode(&by_id, TENANT_1, p.next_page_token, back), 0);
        assert_string_equal(back[0], "101");
        ks_list_page_clear(&p);

        /* Fewer rows than the page, and none. */
        finish_rows(&by_id, 2, 1, &p);
        assert_int_equal(p.n_items, 1);
        assert_string_equal(p.next_page_token, "");
        ks_list_page_clear(&p);
        finish_rows(&by_id, 2, 0, &p);
        assert_int_equal(p.n_items, 0);
        assert_non_null(p.items);
        assert_string_equal(p.next_page_token, "");
        ks_list_page_clear(&p);
}

/* A two-column key: the token holds the last row's (micros, id). */
static void test_next_token_two_keys(void **state)
{
        char back[KS_LIST_KEYS_MAX][KS_LIST_KEY_BYTES_MAX];
        PGresult *res = result_new();
        ks_list_page p;
        const char *err;

        (void)state;
        result_add(res, UUID_A, "a", "1796230303551123");
        result_add(res, UUID_B, "b", "1796230311020412");
        assert_int_equal(ks_list_page_begin(&p, &by_time, 1, "", TENANT_1, &err), KS_OK);
        assert_int_equal(ks_list_page_finish(&p, res), KS_OK);
        assert_int_equal(p.n_items, 1);
        assert_string_equal(((item *)p.items[0])->name, "a");
        assert_int_equal(ks_list_token_decode(&by_time, TENANT_1, p.next_page_token, back), 0);
        assert_string_equal(back[0], "1796230303551123");
        assert_string_equal(back[1], UUID_A);
        ks_list_page_clear(&p);
}

/* Pages through ten rows as a query would: every row once, in order, then no token. */
static void test_walk_all_pages(void **state)
{
        char token[KS_LIST_TOKEN_BYTES_MAX] = "";
        int seen = 0, pages = 0;

        (void)state;
        for (;;) {
                ks_list_page p;
                PGresult *res = result_new();
                const char *err;
                long after;
                int limit;

                assert_int_equal(ks_list_page_begin(&p, &by_id, 3, token, TENANT_1, &err), KS_OK);
                after = strtol(p.params[0], NULL, 10);
                limit = (int)strtol(p.params[1], NULL, 10);
                /* SELECT ... WHERE id > $1 ORDER BY id LIMIT $2, over ids 0..9. */
                for (long id = 0; id < 10 && PQntuples(res) < limit; id++) {
                        char text[24];

                        if (id <= after) {
                                continue;
                        }
                        snprintf(text, sizeof(text), "%ld", id);
                        result_add(res, text, "row", "0");
                }
                assert_int_equal(ks_list_page_finish(&p, res), KS_OK);
                for (size_t i = 0; i < p.n_items; i++) {
                        assert_int_equal(strtol(((item *)p.items[i])->id, NULL, 10), seen);
                        seen++;
                }
                pages++;
                snprintf(token, sizeof(token), "%s", p.next_page_token);
                ks_list_page_clear(&p);
                if (token[0] == '\0') {
                        break;
                }
                assert_true(pages < 10);
        }
        assert_int_equal(seen, 10);
        assert_int_equal(pages, 4); /* 3 + 3 + 3 + 1 */
}

/* A sort key column that holds no key is the query's mistake: internal, not a bad token. */
static void test_finish_bad_key_column(void **state)
{
        PGresult *res = result_new();
        ks_list_page p;
        const char *err;

        (void)state;
        result_add(res, "not-a-number", "a", "1");
        result_add(res, "2", "b", "2");
        assert_int_equal(ks_list_page_begin(&p, &by_id, 1, "", TENANT_1, &err), KS_OK);
        assert_int_equal(ks_list_page_finish(&p, res), KS_INTERNAL);
        ks_list_page_clear(&p);

        res = result_new();
        result_add(res, NULL, "a", "1");
        result_add(res, "2", "b", "2");
        assert_int_equal(ks_list_page_begin(&p, &by_id, 1, "", TENANT_1, &err), KS_OK);
        assert_int_equal(ks_list_page_finish(&p, res), KS_INTERNAL);
        ks_list_page_clear(&p);

        /* No result at all (the query failed before): internal, and nothing leaks. */
        assert_int_equal(ks_list_page_begin(&p, &by_id, 1, "", TENANT_1, &err), KS_OK);
        assert_int_equal(ks_list_page_finish(&p, NULL), KS_INTERNAL);
        ks_list_page_clear(&p);
}

/* Items that cannot be allocated: resource_exhausted, and the result is still freed. */
static void test_finish_out_of_memory(void **state)
{
        static const ks_list_spec huge_items = {
            .name = "test.v1.Things/ListHuge",
            .page_size_default = 1,
            .page_size_max = 1,
            .n_keys = 1,
            .keys = {{KS_LIST_KEY_INT64, 0, NULL}},
            .item_size = SIZE_MAX / 4, /* calloc(2, SIZE_MAX / 4) cannot succeed */
            .item = fill_item,
        };
        ks_list_page p;
        const char *err;

        (void)state;
        assert_int_equal(ks_list_page_begin(&p, &huge_items, 0, "", TENANT_1, &err), KS_OK);
        assert_int_equal(ks_list_page_finish(&p, result_rows(1)), KS_RESOURCE_EXHAUSTED);
        assert_int_equal(p.n_items, 0);
        ks_list_page_clear(&p);
}

/* Clear frees a finished page and leaves it empty; clearing again (or NULL) is harmless. */
static void test_clear_is_safe(void **state)
{
        ks_list_page p;
        const char *err;

        (void)state;
        assert_int_equal(ks_list_page_begin(&p, &by_id, 2, "", TENANT_1, &err), KS_OK);
        assert_int_equal(ks_list_page_finish(&p, result_rows(3)), KS_OK);
        assert_int_equal(p.n_items, 2);
        assert_non_null(p.items);
        assert_true(p.next_page_token[0] != '\0');
        ks_list_page_clear(&p);
        assert_null(p.res);
        assert_null(p.items);
        assert_int_equal(p.n_items, 0);
        assert_string_equal(p.next_page_token, "");
        ks_list_page_clear(&p); /* the sanitizer build sees any double free */
        assert_null(p.items);
        ks_list_page_clear(NULL);
}

/* ---- a whole list method ------------------------------------------------------ */

/* A list reply as every list method has one: repeated items, next_page_token. */
typedef struct list_reply {
        ProtobufCMessage base;
        size_t n_items;
        Keelson__Test__V1__Inner **items;
        char *next_page_token;
} list_reply;

static const ProtobufCMessageDescriptor list_reply_desc;

static void list_reply_init(ProtobufCMessage *m)
{
        list_reply init = {PROTOBUF_C_MESSAGE_INIT(&list_reply_desc), 0, NULL,
                           (char *)protobuf_c_empty_string};
        *(list_reply *)m = init;
}

static const ProtobufCFieldDescriptor list_reply_fields[] = {
    {"items", 1, PROTOBUF_C_LABEL_REPEATED, PROTOBUF_C_TYPE_MESSAGE, offsetof(list_reply, n_items),
     offsetof(list_reply, items), &keelson__test__v1__inner__descriptor, NULL, 0, 0, NULL, NULL},
    {"next_page_token", 2, PROTOBUF_C_LABEL_NONE, PROTOBUF_C_TYPE_STRING, 0,
     offsetof(list_reply, next_page_token), NULL, &protobuf_c_empty_string, 0, 0, NULL, NULL},
};
static const unsigned list_reply_by_name[] = {0, 1};
static const ProtobufCIntRange list_reply_ranges[] = {{1, 0}, {0, 2}};
static const ProtobufCMessageDescriptor list_reply_desc = {PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,
                                                           "keelson.test.v1.ListInnersResponse",
                                                           "ListInnersResponse",
                                                           "ListInnersResponse",
                                                           "keelson.test.v1",
                                                           sizeof(list_reply),
                                                           2,
                                                           list_reply_fields,
                                                           list_reply_by_name,
                                                           1,
                                                           list_reply_ranges,
                                                           list_reply_init,
                                                           NULL,
                                                           NULL,
                                                           NULL};

/* A row of result_rows as a reply item: count from the id, name from the name. */
static void inner_item(void *out, const PGresult *res, int row)
{
        Keelson__Test__V1__Inner *it = out;

        keelson__test__v1__inner__init(it);
        it->count = (int32_t)strtol(PQgetvalue(res, row, 0), NULL, 10);
        it->name = PQgetvalue(res, row, 1);
}

static const ks_list_method list_inners = {
    .page = KS_LIST_PAGE("keelson.test.v1.Things/ListInners", Keelson__Test__V1__Inner, inner_item,
                         {KS_LIST_KEY_INT64, 0, NULL}),
    .sql = "SELECT id, name, micros FROM things WHERE ($1::int8 IS NULL OR id > $1)"
           " ORDER BY id LIMIT $2",
    .items_field = "items",
};

static const ks_method inners_method = {
    .name = "keelson.test.v1.Things/ListInners",
    .input = &keelson__test__v1__inner__descriptor,
    .output = &list_reply_desc,
};

/* A call of ListInners by a caller of tenant. */
typedef struct fake_call {
        ks_caller caller;
        ks_call call;
} fake_call;

static void fake_call_init(fake_call *f, const char *tenant)
{
        memset(f, 0, sizeof(*f));
        keelson__rpc__v1__caller_context__init(&f->caller);
        f->caller.authenticated = 1;
        f->caller.tenant_id = (char *)tenant;
        f->call.method = &inners_method;
        f->call.request_id = "test-list-reply";
        f->call.caller = &f->caller;
        f->call.idempotency_key = "";
}

static list_reply *unpack_reply(const ks_call *call)
{
        list_reply *r = (list_reply *)protobuf_c_message_unpack(&list_reply_desc, NULL,
                                                                call->out_len, call->out_payload);

        assert_non_null(r);
        return r;
}

/* The reply's fields are found by name and filled from the page: items and token. */
static void test_reply_page(void **state)
{
        char back[KS_LIST_KEYS_MAX][KS_LIST_KEY_BYTES_MAX];
        fake_call f;
        ks_list_page p;
        list_reply *r;
        const char *err;

        (void)state;
        fake_call_init(&f, TENANT_1);
        assert_int_equal(ks_list_page_begin(&p, &list_inners.page, 2, "", TENANT_1, &err), KS_OK);
        assert_int_equal(ks_list_page_finish(&p, result_rows(3)), KS_OK);
        assert_int_equal(ks_list_reply_page(&f.call, list_inners.items_field, &p), KS_OK);
        r = unpack_reply(&f.call);
        assert_int_equal(r->n_items, 2);
        assert_int_equal(r->items[0]->count, 100);
        assert_string_equal(r->items[0]->name, "row");
        assert_int_equal(r->items[1]->count, 101);
        assert_string_equal(r->next_page_token, p.next_page_token);
        assert_int_equal(
            ks_list_token_decode(&list_inners.page, TENANT_1, r->next_page_token, back), 0);
        assert_string_equal(back[0], "101");
        protobuf_c_message_free_unpacked(&r->base, NULL);
        ks_list_page_clear(&p);

        /* The last page: its items, no token. */
        assert_int_equal(ks_list_page_begin(&p, &list_inners.page, 5, "", TENANT_1, &err), KS_OK);
        assert_int_equal(ks_list_page_finish(&p, result_rows(1)), KS_OK);
        assert_int_equal(ks_list_reply_page(&f.call, list_inners.items_field, &p), KS_OK);
        r = unpack_reply(&f.call);
        assert_int_equal(r->n_items, 1);
        assert_string_equal(r->next_page_token, "");
        protobuf_c_message_free_unpacked(&r->base, NULL);
        ks_list_page_clear(&p);
        free(f.call.out_payload);
}

/* A fake tenant transaction: counts its runs, keeps what it was handed, runs nothing. */
typedef struct fake_tx {
        int runs;
        ks_pg_stmt query; /* the page query it was handed */
        bool skip_query;  /* a transaction that commits without running it */
} fake_tx;

static int fake_run(ks_call *call, const ks_pg_stmt *query, void *run_arg)
{
        fake_tx *t = run_arg;

        t->runs++;
        t->query = *query;
        if (t->skip_query) {
                return KS_OK;
        }
        return ks_call_fail(call, KS_UNAVAILABLE, "the service's own message");
}

static int list_inners_reply(fake_call *f, fake_tx *t, int32_t page_size, const char *token,
                             int n_filters)
{
        static const char *const filters[KS_LIST_FILTERS_MAX + 1] = {"a", "b", "c", "d", "e"};
        const ks_list_runner r = {.run = fake_run, .run_arg = t, .internal_msg = "test internal"};

        return ks_list_reply(&f->call, &list_inners, page_size, token, filters, n_filters, &r);
}

/* What the client got wrong is refused before the transaction, with core's messages. */
static void test_reply_refuses_before_query(void **state)
{
        const char *keys[1] = {"100"};
        char token[KS_LIST_TOKEN_BYTES_MAX];
        fake_tx t = {0};
        fake_call f;

        (void)state;
        fake_call_init(&f, TENANT_2);
        assert_int_equal(list_inners_reply(&f, &t, -1, "", 0), KS_INVALID_ARGUMENT);
        assert_string_equal(f.call.message, "page_size: must not be negative");
        /* A token of the same list, issued to a caller of another tenant. */
        assert_int_equal(
            ks_list_token_encode(&list_inners.page, TENANT_1, keys, token, sizeof(token)), 0);
        assert_int_equal(list_inners_reply(&f, &t, 0, token, 0), KS_INVALID_ARGUMENT);
        assert_string_equal(f.call.message, "page_token: not from this list");
        /* More filters than the frame holds: the method's mistake, the service's message. */
        assert_int_equal(list_inners_reply(&f, &t, 0, "", KS_LIST_FILTERS_MAX + 1), KS_INTERNAL);
        assert_string_equal(f.call.message, "test internal");
        assert_int_equal(list_inners_reply(&f, &t, 0, "", -1), KS_INTERNAL);
        assert_int_equal(t.runs, 0);
        assert_null(f.call.out_payload);
}

/* The transaction's refusal is the reply, as it set it; the query's code went to it. */
static void test_reply_transaction_fails(void **state)
{
        fake_tx t = {0};
        fake_call f;

        (void)state;
        fake_call_init(&f, TENANT_1);
        assert_int_equal(list_inners_reply(&f, &t, 0, "", KS_LIST_FILTERS_MAX), KS_UNAVAILABLE);
        assert_int_equal(t.runs, 1);
        /* The page query: the method's, the cursor (none), the limit, then the filters. */
        assert_ptr_equal(t.query.sql, list_inners.sql);
        assert_int_equal(t.query.n_params, list_inners.page.n_keys + 1 + KS_LIST_FILTERS_MAX);
        assert_null(t.query.params[0]);
        assert_string_equal(t.query.params[list_inners.page.n_keys + 1], "a");
        assert_non_null(t.query.out);
        assert_string_equal(f.call.message, "the service's own message");
        assert_null(f.call.out_payload);

        /* A transaction that commits without a result: internal, logged, no reply. */
        t.skip_query = true;
        assert_int_equal(list_inners_reply(&f, &t, 0, "", 0), KS_INTERNAL);
        assert_int_equal(t.runs, 2);
        assert_string_equal(f.call.message, "test internal");
        assert_null(f.call.out_payload);
}

static int bound_reply(fake_call *f, fake_tx *t, const char *token, const char *binding)
{
        static const char *const filters[1] = {"a"};
        const ks_list_runner r = {.run = fake_run, .run_arg = t, .internal_msg = "test internal"};

        return ks_list_reply_bound(&f->call, &list_inners, 0, token, filters, 1, binding, &r);
}

/*
 * A bound list's token resumes under its own filters only (the scope is the
 * tenant, a newline, the binding); no binding is an unbound list's token; a
 * binding the frame cannot hold is internal. A token that passes reaches
 * the transaction, whose refusal (unavailable) is the reply.
 */
static void test_reply_bound_tokens(void **state)
{
        const char *keys[1] = {"100"};
        char long_binding[KS_LIST_BINDING_BYTES_MAX + 1];
        char bound[KS_LIST_TOKEN_BYTES_MAX], plain[KS_LIST_TOKEN_BYTES_MAX];
        fake_tx t = {0};
        fake_call f;

        (void)state;
        fake_call_init(&f, TENANT_1);
        assert_int_equal(ks_list_token_encode(&list_inners.page, TENANT_1 "\naction=a", keys, bound,
                                              sizeof(bound)),
                         0);
        assert_int_equal(
            ks_list_token_encode(&list_inners.page, TENANT_1, keys, plain, sizeof(plain)), 0);

        assert_int_equal(bound_reply(&f, &t, bound, "action=a"), KS_UNAVAILABLE);
        assert_int_equal(bound_reply(&f, &t, bound, "action=b"), KS_INVALID_ARGUMENT);
        assert_string_equal(f.call.message, "page_token: not from this list");
        assert_int_equal(bound_reply(&f, &t, bound, NULL), KS_INVALID_ARGUMENT);
        assert_int_equal(bound_reply(&f, &t, plain, NULL), KS_UNAVAILABLE);
        assert_int_equal(bound_reply(&f, &t, plain, ""), KS_UNAVAILABLE);
        assert_int_equal(bound_reply(&f, &t, plain, "action=a"), KS_INVALID_ARGUMENT);
        /* Another tenant with the same filters: refused too. */
        fake_call_init(&f, TENANT_2);
        assert_int_equal(bound_reply(&f, &t, bound, "action=a"), KS_INVALID_ARGUMENT);
        assert_int_equal(t.runs, 3);

        memset(long_binding, 'x', sizeof(long_binding) - 1);
        long_binding[sizeof(long_binding) - 1] = '\0';
        assert_int_equal(bound_reply(&f, &t, "", long_binding), KS_INTERNAL);
        assert_string_equal(f.call.message, "test internal");
        assert_int_equal(t.runs, 3);
        assert_null(f.call.out_payload);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_page_size),
            cmocka_unit_test(test_begin_first_page),
            cmocka_unit_test(test_begin_refuses),
            cmocka_unit_test(test_token_round_trip),
            cmocka_unit_test(test_token_longest_fits),
            cmocka_unit_test(test_token_encode_refuses_bad_keys),
            cmocka_unit_test(test_token_garbage_refused),
            cmocka_unit_test(test_token_tampered_refused),
            cmocka_unit_test(test_token_foreign_refused),
            cmocka_unit_test(test_next_token_presence),
            cmocka_unit_test(test_next_token_two_keys),
            cmocka_unit_test(test_walk_all_pages),
            cmocka_unit_test(test_finish_bad_key_column),
            cmocka_unit_test(test_finish_out_of_memory),
            cmocka_unit_test(test_clear_is_safe),
            cmocka_unit_test(test_reply_page),
            cmocka_unit_test(test_reply_refuses_before_query),
            cmocka_unit_test(test_reply_transaction_fails),
            cmocka_unit_test(test_reply_bound_tokens),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
