/*
 * Unit tests of the gateway's body decoder (decode.c): each limit holds
 * exactly at its value and refuses one past it, in protobuf and in JSON,
 * and bodies built to be expensive are refused by the walk before any
 * decoding.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "decode.h"
#include "keelson/ledger/v1/ledger.pb-c.h"
#include "keelson/test/v1/types.pb-c.h"

#define TRANSFERS_DESC (&keelson__ledger__v1__create_transfers_request__descriptor)
#define LOOKUP_DESC    (&keelson__ledger__v1__lookup_accounts_request__descriptor)
#define INNER_DESC     (&keelson__test__v1__inner__descriptor)

typedef struct buf {
        uint8_t *p;
        size_t len;
} buf;

/* n empty sub-messages in field 1 (CreateTransfersRequest.transfers). */
static buf empty_transfers(size_t n)
{
        buf b = {malloc(2 * n + 1), 2 * n};
        for (size_t i = 0; i < n; i++) {
                b.p[2 * i] = 0x0a;
                b.p[2 * i + 1] = 0x00;
        }
        return b;
}

/* {"transfers":[{},{},...]} with n objects. */
static buf json_transfers(size_t n)
{
        buf b = {malloc(3 * n + 32), 0};
        b.len = (size_t)sprintf((char *)b.p, "{\"transfers\":[");
        for (size_t i = 0; i < n; i++) {
                b.len += (size_t)sprintf((char *)b.p + b.len, i + 1 < n ? "{}," : "{}");
        }
        b.len += (size_t)sprintf((char *)b.p + b.len, "]}");
        return b;
}

/* LookupAccountsRequest with n ids (and n ids_hi when hi), packed. */
static buf lookup(size_t n, int hi)
{
        Keelson__Ledger__V1__LookupAccountsRequest m =
            KEELSON__LEDGER__V1__LOOKUP_ACCOUNTS_REQUEST__INIT;
        uint64_t *ids = calloc(n, sizeof(*ids));
        for (size_t i = 0; i < n; i++) {
                ids[i] = i + 1;
        }
        m.n_ids = n;
        m.ids = ids;
        if (hi) {
                m.n_ids_hi = n;
                m.ids_hi = ids;
        }
        buf b = {malloc(protobuf_c_message_get_packed_size(&m.base) + 1), 0};
        b.len = protobuf_c_message_pack(&m.base, b.p);
        free(ids);
        return b;
}

static int check(const ProtobufCMessageDescriptor *d, gw_codec codec, buf b, char *err)
{
        int rc = gw_decode_check(d, codec, b.p, b.len, err, 128);
        free(b.p);
        return rc;
}

static void test_repeated_field_at_and_past_its_maximum(void **state)
{
        (void)state;
        char err[128];
        assert_int_equal(
            check(TRANSFERS_DESC, GW_CODEC_PROTO, empty_transfers(KS_RPC_ITEMS_MAX), err), KS_OK);
        assert_int_equal(
            check(TRANSFERS_DESC, GW_CODEC_PROTO, empty_transfers(KS_RPC_ITEMS_MAX + 1), err),
            KS_INVALID_ARGUMENT);
        assert_string_equal(err, "transfers: at most 8190 elements");
        assert_int_equal(
            check(TRANSFERS_DESC, GW_CODEC_JSON, json_transfers(KS_RPC_ITEMS_MAX), err), KS_OK);
        assert_int_equal(
            check(TRANSFERS_DESC, GW_CODEC_JSON, json_transfers(KS_RPC_ITEMS_MAX + 1), err),
            KS_INVALID_ARGUMENT);
        assert_string_equal(err, "transfers: at most 8190 elements");
        /* packed scalars count their elements, not their fields */
        assert_int_equal(check(LOOKUP_DESC, GW_CODEC_PROTO, lookup(KS_RPC_ITEMS_MAX, 1), err),
                         KS_OK);
        assert_int_equal(check(LOOKUP_DESC, GW_CODEC_PROTO, lookup(KS_RPC_ITEMS_MAX + 1, 0), err),
                         KS_INVALID_ARGUMENT);
        assert_string_equal(err, "ids: at most 8190 elements");
}

/* The 1 MB body of 520,000 empty sub-messages: refused by the walk. */
static void test_expensive_body_is_refused_unread(void **state)
{
        (void)state;
        char err[256];
        buf b = empty_transfers(520000);
        uint8_t *payload = (uint8_t *)"x";
        size_t payload_len = 7;
        assert_int_equal(gw_decode(TRANSFERS_DESC, GW_CODEC_PROTO, b.p, b.len, &payload,
                                   &payload_len, err, sizeof(err)),
                         KS_INVALID_ARGUMENT);
        assert_null(payload);
        assert_int_equal(payload_len, 0);
        free(b.p);
        b = json_transfers(320000);
        assert_int_equal(gw_decode(TRANSFERS_DESC, GW_CODEC_JSON, b.p, b.len, &payload,
                                   &payload_len, err, sizeof(err)),
                         KS_INVALID_ARGUMENT);
        free(b.p);
}

/* Unknown fields count toward the total: protobuf-c keeps every one. */
static void test_unknown_fields_count(void **state)
{
        (void)state;
        char err[128];
        size_t n = GW_DECODE_TOTAL_MAX + 1;
        buf b = {malloc(2 * n), 2 * n};
        for (size_t i = 0; i < n; i++) {
                b.p[2 * i] = (15 << 3) | 0; /* field 15 (unknown), varint */
                b.p[2 * i + 1] = 0x01;
        }
        assert_int_equal(check(TRANSFERS_DESC, GW_CODEC_PROTO, b, err), KS_INVALID_ARGUMENT);
        assert_string_equal(err, "request: at most 16380 elements in all");
}

/* Inner.child nests: the walk stops at the depth bound, in both codecs. */
static void test_nesting_is_bounded(void **state)
{
        (void)state;
        char err[128];
        /* Inner{child: Inner{child: ...}} depth d: built inside out */
        for (int depth = GW_DECODE_DEPTH_MAX; depth <= GW_DECODE_DEPTH_MAX + 1; depth++) {
                uint8_t wire[256];
                size_t len = 0;
                for (int i = 1; i < depth; i++) { /* wrap: 0x1a len <previous> */
                        memmove(wire + 2, wire, len);
                        wire[0] = 0x1a;
                        wire[1] = (uint8_t)len;
                        len += 2;
                }
                buf b = {malloc(len + 1), len};
                memcpy(b.p, wire, len);
                int want = depth <= GW_DECODE_DEPTH_MAX ? KS_OK : KS_INVALID_ARGUMENT;
                assert_int_equal(check(INNER_DESC, GW_CODEC_PROTO, b, err), want);
        }
        char json[256];
        size_t n = 0;
        for (int i = 0; i < GW_DECODE_JSON_DEPTH_MAX + 1; i++) {
                json[n++] = '[';
        }
        json[n] = '\0';
        buf b = {(uint8_t *)strdup(json), n};
        assert_int_equal(check(INNER_DESC, GW_CODEC_JSON, b, err), KS_INVALID_ARGUMENT);
        assert_string_equal(err, "request: messages nested at most 8 deep");
        /* brackets inside strings are not structure */
        const char *quoted = "{\"name\":\"[[[[[[[[[[[[[[[[[[[[[[[[\\\"[[[[\"}";
        b = (buf){(uint8_t *)strdup(quoted), strlen(quoted)};
        assert_int_equal(check(INNER_DESC, GW_CODEC_JSON, b, err), KS_OK);
}

static void test_malformed_wire_data(void **state)
{
        (void)state;
        char err[128];
        static const uint8_t cases[][4] = {
            {0x0a, 0x05, 0x00, 0x00}, /* a length past the end */
            {0x80, 0x80, 0x80, 0x80}, /* a tag that never ends */
            {0x0b, 0x00, 0x00, 0x00}, /* a group: wire type 3 */
            {0x00, 0x00, 0x00, 0x00}, /* field number 0 */
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                buf b = {malloc(4), 4};
                memcpy(b.p, cases[i], 4);
                assert_int_equal(check(TRANSFERS_DESC, GW_CODEC_PROTO, b, err),
                                 KS_INVALID_ARGUMENT);
                assert_string_equal(err, "invalid protobuf body");
        }
}

/* A valid body within the limits decodes and packs again to the same message. */
static void test_valid_body_round_trips(void **state)
{
        (void)state;
        char err[128];
        const char *json =
            "{\"transfers\":[{\"id\":\"7\",\"amount\":\"5\",\"ledger\":1,\"code\":1}]}";
        uint8_t *payload = NULL;
        size_t len = 0;
        assert_int_equal(gw_decode(TRANSFERS_DESC, GW_CODEC_JSON, (const uint8_t *)json,
                                   strlen(json), &payload, &len, err, sizeof(err)),
                         KS_OK);
        Keelson__Ledger__V1__CreateTransfersRequest *m =
            keelson__ledger__v1__create_transfers_request__unpack(NULL, len, payload);
        assert_non_null(m);
        assert_int_equal(m->n_transfers, 1);
        assert_int_equal(m->transfers[0]->id, 7);
        assert_int_equal(m->transfers[0]->amount, 5);
        keelson__ledger__v1__create_transfers_request__free_unpacked(m, NULL);
        free(payload);
        assert_int_equal(gw_decode(TRANSFERS_DESC, GW_CODEC_JSON, (const uint8_t *)"", 0, &payload,
                                   &len, err, sizeof(err)),
                         KS_OK); /* empty JSON: the empty message */
        assert_int_equal(len, 0);
        free(payload);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_repeated_field_at_and_past_its_maximum),
            cmocka_unit_test(test_expensive_body_is_refused_unread),
            cmocka_unit_test(test_unknown_fields_count),
            cmocka_unit_test(test_nesting_is_bounded),
            cmocka_unit_test(test_malformed_wire_data),
            cmocka_unit_test(test_valid_body_round_trips),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
