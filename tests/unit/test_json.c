/*
 * ks_json: the proto3 JSON mapping, both ways, over keelson.test.v1 types.
 * Every rejection is checked for its code and for an error that names the
 * field, since that message is what a client reads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keelson/test/v1/types.pb-c.h"
#include "ks_code.h"
#include "ks_json.h"

typedef Keelson__Test__V1__AllTypes AllTypes;
typedef Keelson__Test__V1__Inner Inner;
#define ALL_DESC (&keelson__test__v1__all_types__descriptor)

/* ---- helpers ------------------------------------------------------------ */

static AllTypes *parse_len(const char *json, size_t len)
{
        ProtobufCMessage *m = NULL;
        char err[256] = "";
        int rc = ks_json_to_message(ALL_DESC, json, len, &m, err, sizeof(err));

        if (rc != KS_OK)
                print_message("unexpected error for %s: %s\n", json, err);
        assert_int_equal(rc, KS_OK);
        assert_non_null(m);
        assert_string_equal(err, "");
        return (AllTypes *)m;
}

static AllTypes *parse_ok(const char *json)
{
        return parse_len(json, strlen(json));
}

static char *dump(const void *msg)
{
        char *s = NULL;
        size_t n = 0;

        assert_int_equal(ks_json_from_message(msg, &s, &n), KS_OK);
        assert_non_null(s);
        assert_int_equal(strlen(s), n);
        return s;
}

static void free_msg(void *m)
{
        protobuf_c_message_free_unpacked(m, NULL);
}

/* Parsing json must fail with invalid_argument and an error containing want. */
static void expect_reject_desc(const ProtobufCMessageDescriptor *desc, const char *json,
                               const char *want)
{
        ProtobufCMessage dummy;
        ProtobufCMessage *m = &dummy;
        char err[256] = "";
        int rc = ks_json_to_message(desc, json, strlen(json), &m, err, sizeof(err));

        if (rc != KS_INVALID_ARGUMENT || strstr(err, want) == NULL)
                print_message("input %s: rc %d, error \"%s\", wanted \"%s\"\n", json, rc, err,
                              want);
        assert_int_equal(rc, KS_INVALID_ARGUMENT);
        assert_null(m);
        assert_non_null(strstr(err, want));
        assert_null(strstr(err, "0x")); /* no pointers shown to a client */
}

static void expect_reject(const char *json, const char *want)
{
        expect_reject_desc(ALL_DESC, json, want);
}

/* Equal messages pack to equal bytes (fields in order, maps in order). */
static void assert_same_message(const void *a, const void *b)
{
        size_t na = protobuf_c_message_get_packed_size(a);
        size_t nb = protobuf_c_message_get_packed_size(b);

        assert_int_equal(na, nb);
        uint8_t *pa = malloc(na + 1), *pb = malloc(nb + 1);
        assert_non_null(pa);
        assert_non_null(pb);
        assert_int_equal(protobuf_c_message_pack(a, pa), na);
        assert_int_equal(protobuf_c_message_pack(b, pb), nb);
        assert_memory_equal(pa, pb, na);
        free(pa);
        free(pb);
}

/* ---- round trips ---------------------------------------------------------- */

/* Canonical JSON (fields in number order) reads and prints back unchanged. */
static const char CANONICAL[] =
    "{\"fInt32\":-42,\"fSint32\":-7,\"fSfixed32\":2147483647,\"fUint32\":4294967295,"
    "\"fFixed32\":7,\"fInt64\":\"-9223372036854775808\",\"fSint64\":\"9223372036854775807\","
    "\"fSfixed64\":\"-1\",\"fUint64\":\"18446744073709551615\",\"fFixed64\":\"1\","
    "\"fBool\":true,\"fFloat\":0.1,\"fDouble\":-2.5e+300,"
    "\"fString\":\"h\xc3\xa9llo \\\"q\\\"\\n\\\\ \\u0001\",\"fBytes\":\"AAECA/8=\","
    "\"fEnum\":\"COLOR_BLUE\",\"fInner\":{\"name\":\"in\",\"count\":3,\"child\":{\"count\":-1}},"
    "\"rInt32\":[1,-2,0],\"rInt64\":[\"5\",\"-6\"],\"rString\":[\"a\",\"\"],"
    "\"rBytes\":[\"\",\"AQ==\",\"-_8\"],\"rEnum\":[\"COLOR_RED\",99],"
    "\"rInner\":[{},{\"name\":\"x\"}],"
    "\"rDouble\":[1.5,\"NaN\",\"Infinity\",\"-Infinity\",0,-0.0,1e-300,0.30000000000000004],"
    "\"rBool\":[true,false],"
    "\"mStrInt64\":{\"a\":\"1\",\"b\":\"-2\"},\"mInt32Str\":{\"-5\":\"neg\",\"7\":\"seven\"},"
    "\"mBoolInner\":{\"true\":{\"count\":1},\"false\":{}},"
    "\"mUint64Enum\":{\"18446744073709551615\":\"COLOR_GREEN\",\"3\":\"COLOR_UNSPECIFIED\"},"
    "\"cNumber\":\"0\",\"oInt32\":0}";

static void test_json_message_json_round_trip(void **state)
{
        (void)state;
        AllTypes *m = parse_ok(CANONICAL);
        char *out = dump(m);
        /* "-_8" (URL-safe, unpadded) comes back in the standard alphabet. */
        const char *url = strstr(CANONICAL, "\"-_8\"");
        assert_non_null(url);
        size_t pre = (size_t)(url - CANONICAL);
        char *want = malloc(sizeof(CANONICAL) + 1);
        assert_non_null(want);
        memcpy(want, CANONICAL, pre);
        strcpy(want + pre, "\"+/8=\"");
        strcat(want, url + 5);

        assert_string_equal(out, want);
        assert_int_equal(m->r_bytes[2].len, 2);
        assert_int_equal(m->r_bytes[2].data[0], 0xfb);
        assert_int_equal(m->r_bytes[2].data[1], 0xff);
        assert_int_equal(m->choice_case, KEELSON__TEST__V1__ALL_TYPES__CHOICE_C_NUMBER);
        assert_int_equal(m->maybe_count_case, KEELSON__TEST__V1__ALL_TYPES__MAYBE_COUNT_O_INT32);
        assert_true(isnan(m->r_double[1]));
        assert_true(signbit(m->r_double[5]));

        /* And back once more: the message from the printed JSON is the same. */
        AllTypes *again = parse_ok(out);
        assert_same_message(m, again);
        free(want);
        free(out);
        free_msg(m);
        free_msg(again);
}

/* Every field set, most at their limits; file-scope so that it outlives a test. */
static Inner g_child = KEELSON__TEST__V1__INNER__INIT, g_inner = KEELSON__TEST__V1__INNER__INIT;
static Inner g_r0 = KEELSON__TEST__V1__INNER__INIT, g_r1 = KEELSON__TEST__V1__INNER__INIT;
static Inner *g_rinner[] = {&g_r0, &g_r1};
static int32_t g_rint32[] = {INT32_MIN, 0, INT32_MAX};
static int64_t g_rint64[] = {INT64_MIN, INT64_MAX, 0};
static char *g_rstring[] = {"x", "", "\xe2\x82\xac"};
static uint8_t g_blob[] = {0, 1, 2, 0xfe, 0xff};
static ProtobufCBinaryData g_rbytes[] = {{0, NULL}, {5, g_blob}, {1, g_blob + 4}};
static Keelson__Test__V1__Color g_renum[] = {KEELSON__TEST__V1__COLOR__COLOR_BLUE, 1234};
static double g_rdouble[] = {0.1, -1e308, DBL_MIN, 5e-324};
static protobuf_c_boolean g_rbool[] = {1, 0, 1};
static Keelson__Test__V1__AllTypes__MStrInt64Entry g_e1 =
    KEELSON__TEST__V1__ALL_TYPES__MSTR_INT64_ENTRY__INIT;
static Keelson__Test__V1__AllTypes__MStrInt64Entry g_e2 =
    KEELSON__TEST__V1__ALL_TYPES__MSTR_INT64_ENTRY__INIT;
static Keelson__Test__V1__AllTypes__MStrInt64Entry *g_mstr[] = {&g_e1, &g_e2};
static Keelson__Test__V1__AllTypes__MInt32StrEntry g_k1 =
    KEELSON__TEST__V1__ALL_TYPES__MINT32_STR_ENTRY__INIT;
static Keelson__Test__V1__AllTypes__MInt32StrEntry *g_mint[] = {&g_k1};
static Keelson__Test__V1__AllTypes__MBoolInnerEntry g_b1 =
    KEELSON__TEST__V1__ALL_TYPES__MBOOL_INNER_ENTRY__INIT;
static Keelson__Test__V1__AllTypes__MBoolInnerEntry *g_mbool[] = {&g_b1};
static Keelson__Test__V1__AllTypes__MUint64EnumEntry g_u1 =
    KEELSON__TEST__V1__ALL_TYPES__MUINT64_ENUM_ENTRY__INIT;
static Keelson__Test__V1__AllTypes__MUint64EnumEntry *g_muint[] = {&g_u1};

static void fill_singular(AllTypes *m)
{
        g_child.name = "leaf";
        g_inner.count = -3;
        g_inner.child = &g_child;
        m->f_int32 = INT32_MIN;
        m->f_sint32 = INT32_MAX;
        m->f_sfixed32 = -1;
        m->f_uint32 = UINT32_MAX;
        m->f_fixed32 = 1;
        m->f_int64 = INT64_MIN;
        m->f_sint64 = INT64_MAX;
        m->f_sfixed64 = -123456789012345LL;
        m->f_uint64 = UINT64_MAX;
        m->f_fixed64 = 1ULL << 63;
        m->f_bool = 1;
        m->f_float = FLT_MAX;
        m->f_double = M_PI;
        m->f_string = "snowman \xe2\x98\x83 \"quoted\" \t tab";
        m->f_bytes.len = sizeof(g_blob);
        m->f_bytes.data = g_blob;
        m->f_enum = KEELSON__TEST__V1__COLOR__COLOR_GREEN;
        m->f_inner = &g_inner;
        m->choice_case = KEELSON__TEST__V1__ALL_TYPES__CHOICE_C_INNER;
        m->c_inner = &g_r0;
        m->maybe_count_case = KEELSON__TEST__V1__ALL_TYPES__MAYBE_COUNT_O_INT32;
        m->o_int32 = 77;
}

static void fill_repeated(AllTypes *m)
{
        g_r1.count = 9;
        m->n_r_int32 = 3, m->r_int32 = g_rint32;
        m->n_r_int64 = 3, m->r_int64 = g_rint64;
        m->n_r_string = 3, m->r_string = g_rstring;
        m->n_r_bytes = 3, m->r_bytes = g_rbytes;
        m->n_r_enum = 2, m->r_enum = g_renum;
        m->n_r_inner = 2, m->r_inner = g_rinner;
        m->n_r_double = 4, m->r_double = g_rdouble;
        m->n_r_bool = 3, m->r_bool = g_rbool;
        g_e1.key = "k1", g_e1.value = INT64_MAX;
        g_e2.key = "", g_e2.value = 0;
        m->n_m_str_int64 = 2, m->m_str_int64 = g_mstr;
        g_k1.key = INT32_MIN, g_k1.value = "min";
        m->n_m_int32_str = 1, m->m_int32_str = g_mint;
        g_b1.key = 1, g_b1.value = &g_r1;
        m->n_m_bool_inner = 1, m->m_bool_inner = g_mbool;
        g_u1.key = UINT64_MAX, g_u1.value = KEELSON__TEST__V1__COLOR__COLOR_RED;
        m->n_m_uint64_enum = 1, m->m_uint64_enum = g_muint;
}

static void test_message_json_message_round_trip(void **state)
{
        (void)state;
        AllTypes m = KEELSON__TEST__V1__ALL_TYPES__INIT;
        fill_singular(&m);
        fill_repeated(&m);

        char *json = dump(&m);
        AllTypes *back = parse_ok(json);
        assert_same_message(&m, back);
        assert_string_equal(back->f_string, m.f_string);
        assert_true(back->f_float == FLT_MAX);
        assert_true(back->f_double == M_PI);
        assert_non_null(strstr(json, "\"cInner\":{}"));
        assert_non_null(strstr(json, "\"mStrInt64\":{\"k1\":\"9223372036854775807\",\"\":\"0\"}"));
        free(json);
        free_msg(back);
}

/* ---- names -------------------------------------------------------------- */

static void test_output_uses_lower_camel_case(void **state)
{
        (void)state;
        AllTypes m = KEELSON__TEST__V1__ALL_TYPES__INIT;
        Keelson__Test__V1__AllTypes__MStrInt64Entry e =
            KEELSON__TEST__V1__ALL_TYPES__MSTR_INT64_ENTRY__INIT;
        Keelson__Test__V1__AllTypes__MStrInt64Entry *entries[] = {&e};

        m.f_int32 = 1;
        m.f_sfixed64 = 2;
        m.n_m_str_int64 = 1;
        m.m_str_int64 = entries;
        e.key = "snake_key"; /* map keys are data, never renamed */
        e.value = 3;
        char *json = dump(&m);
        assert_string_equal(
            json, "{\"fInt32\":1,\"fSfixed64\":\"2\",\"mStrInt64\":{\"snake_key\":\"3\"}}");
        assert_null(strstr(json, "f_int32"));
        free(json);
}

/* Keys come from a per-thread cache; a name too long for a slot is derived each time. */
static void test_keys_cached_and_too_long_to_cache(void **state)
{
        (void)state;
        AllTypes m = KEELSON__TEST__V1__ALL_TYPES__INIT;
        Inner in = KEELSON__TEST__V1__INNER__INIT;

        m.f_int32 = 1;
        m.a_field_whose_json_name_is_longer_than_a_slot_of_the_printers_cache_of_field_keys = 2;
        m.f_inner = &in;
        in.count = 3;
        for (int i = 0; i < 3; i++) {
                char *json = dump(&m);
                assert_string_equal(
                    json,
                    "{\"fInt32\":1,\"fInner\":{\"count\":3},"
                    "\"aFieldWhoseJsonNameIsLongerThanASlotOfThePrintersCacheOfFieldKeys\":2}");
                free(json);
        }
        AllTypes *back =
            parse_ok("{\"aFieldWhoseJsonNameIsLongerThanASlotOfThePrintersCacheOfFieldKeys\":4}");
        assert_int_equal(
            back->a_field_whose_json_name_is_longer_than_a_slot_of_the_printers_cache_of_field_keys,
            4);
        free_msg(back);
}

static void test_original_names_accepted(void **state)
{
        (void)state;
        AllTypes *m = parse_ok("{\"f_int32\":1,\"r_int64\":[\"2\"],\"m_str_int64\":{\"k\":\"3\"},"
                               "\"c_text\":\"t\",\"f_inner\":{\"count\":4},\"o_int32\":5,"
                               "\"fUint32\":6}");
        assert_int_equal(m->f_int32, 1);
        assert_int_equal(m->n_r_int64, 1);
        assert_int_equal(m->r_int64[0], 2);
        assert_int_equal(m->n_m_str_int64, 1);
        assert_string_equal(m->m_str_int64[0]->key, "k");
        assert_int_equal(m->m_str_int64[0]->value, 3);
        assert_int_equal(m->choice_case, KEELSON__TEST__V1__ALL_TYPES__CHOICE_C_TEXT);
        assert_string_equal(m->c_text, "t");
        assert_int_equal(m->f_inner->count, 4);
        assert_int_equal(m->o_int32, 5);
        assert_int_equal(m->f_uint32, 6);
        free_msg(m);
}

/* ---- scalars ------------------------------------------------------------ */

static void test_int64_limits_as_strings(void **state)
{
        (void)state;
        AllTypes m = KEELSON__TEST__V1__ALL_TYPES__INIT;
        m.f_int64 = INT64_MAX;
        m.f_sint64 = INT64_MIN;
        m.f_uint64 = UINT64_MAX;
        m.f_fixed64 = UINT64_MAX;
        char *json = dump(&m);
        assert_string_equal(json, "{\"fInt64\":\"9223372036854775807\","
                                  "\"fSint64\":\"-9223372036854775808\","
                                  "\"fUint64\":\"18446744073709551615\","
                                  "\"fFixed64\":\"18446744073709551615\"}");
        free(json);

        /* Numbers are accepted too, where JSON numbers can carry them. */
        AllTypes *p = parse_ok("{\"fInt64\":9223372036854775807,\"fSint64\":-9223372036854775808,"
                               "\"fSfixed64\":\"-9223372036854775808\","
                               "\"fUint64\":\"18446744073709551615\",\"fFixed64\":1e19}");
        assert_true(p->f_int64 == INT64_MAX);
        assert_true(p->f_sint64 == INT64_MIN);
        assert_true(p->f_sfixed64 == INT64_MIN);
        assert_true(p->f_uint64 == UINT64_MAX);
        assert_true(p->f_fixed64 == 10000000000000000000ULL);
        free_msg(p);
}

static void test_int32_forms_accepted(void **state)
{
        (void)state;
        AllTypes *m = parse_ok("{\"fInt32\":\"-2147483648\",\"fSint32\":2147483647,"
                               "\"fSfixed32\":1e2,\"fUint32\":\"4294967295\",\"fFixed32\":3.0,"
                               "\"rInt32\":[-0.0,\"7\"]}");
        assert_int_equal(m->f_int32, INT32_MIN);
        assert_int_equal(m->f_sint32, INT32_MAX);
        assert_int_equal(m->f_sfixed32, 100);
        assert_int_equal(m->f_uint32, UINT32_MAX);
        assert_int_equal(m->f_fixed32, 3);
        assert_int_equal(m->r_int32[0], 0);
        assert_int_equal(m->r_int32[1], 7);
        free_msg(m);
}

static void test_floats(void **state)
{
        (void)state;
        AllTypes *m = parse_ok("{\"fFloat\":\"-Infinity\",\"fDouble\":\"NaN\","
                               "\"rDouble\":[\"Infinity\",\"1.25\",-3,1e-320]}");
        assert_true(isinf(m->f_float) && m->f_float < 0);
        assert_true(isnan(m->f_double));
        assert_true(isinf(m->r_double[0]) && m->r_double[0] > 0);
        assert_true(m->r_double[1] == 1.25);
        assert_true(m->r_double[2] == -3);
        assert_true(m->r_double[3] == 1e-320);
        char *json = dump(m);
        assert_string_equal(json, "{\"fFloat\":\"-Infinity\",\"fDouble\":\"NaN\","
                                  "\"rDouble\":[\"Infinity\",1.25,-3,1e-320]}");
        free(json);
        free_msg(m);

        /* A float prints in its own shortest form, not the double's. */
        AllTypes f = KEELSON__TEST__V1__ALL_TYPES__INIT;
        f.f_float = 0.1f;
        f.f_double = 0.1;
        json = dump(&f);
        assert_string_equal(json, "{\"fFloat\":0.1,\"fDouble\":0.1}");
        free(json);
        f.f_float = FLT_MAX;
        f.f_double = DBL_MAX;
        json = dump(&f);
        assert_string_equal(json, "{\"fFloat\":3.4028235e+38,\"fDouble\":1.7976931348623157e+308}");
        m = parse_ok(json);
        assert_true(m->f_float == FLT_MAX);
        assert_true(m->f_double == DBL_MAX);
        free(json);
        free_msg(m);

        /*
         * Found by fuzzing: 0x15ae43fd's shortest float form is a double exactly
         * halfway between two floats, so a reader (strtod, then float) rounds it
         * to the even neighbour. The printer must pick a form that reads back.
         */
        uint32_t bits = 0x15ae43fdu;
        memcpy(&f.f_float, &bits, sizeof(bits));
        f.f_double = 0;
        json = dump(&f);
        m = parse_ok(json);
        assert_memory_equal(&m->f_float, &bits, sizeof(bits));
        free(json);
        free_msg(m);
}

static void test_bytes_base64(void **state)
{
        (void)state;
        /* 0xfb 0xff: '+' and '/' in the standard alphabet, '-' and '_' in URL. */
        static const char *forms[] = {
            "{\"fBytes\":\"+/8=\"}",
            "{\"fBytes\":\"+/8\"}",
            "{\"fBytes\":\"-_8=\"}",
            "{\"fBytes\":\"-_8\"}",
        };
        for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
                AllTypes *m = parse_ok(forms[i]);
                assert_int_equal(m->f_bytes.len, 2);
                assert_int_equal(m->f_bytes.data[0], 0xfb);
                assert_int_equal(m->f_bytes.data[1], 0xff);
                char *json = dump(m);
                assert_string_equal(json, "{\"fBytes\":\"+/8=\"}");
                free(json);
                free_msg(m);
        }
        AllTypes *m = parse_ok("{\"fBytes\":\"aGVsbG8gd29ybGQ=\",\"rBytes\":[\"\"]}");
        assert_int_equal(m->f_bytes.len, 11);
        assert_memory_equal(m->f_bytes.data, "hello world", 11);
        assert_int_equal(m->n_r_bytes, 1);
        assert_int_equal(m->r_bytes[0].len, 0);
        free_msg(m);
}

static void test_enums_by_name_and_number(void **state)
{
        (void)state;
        AllTypes *m =
            parse_ok("{\"fEnum\":2,\"rEnum\":[\"COLOR_BLUE\",7,12345,-1,\"COLOR_UNSPECIFIED\"],"
                     "\"mUint64Enum\":{\"1\":1}}");
        assert_int_equal(m->f_enum, KEELSON__TEST__V1__COLOR__COLOR_GREEN);
        assert_int_equal(m->r_enum[0], KEELSON__TEST__V1__COLOR__COLOR_BLUE);
        assert_int_equal(m->r_enum[1], KEELSON__TEST__V1__COLOR__COLOR_BLUE);
        assert_int_equal(m->r_enum[2], 12345);
        assert_int_equal((int)m->r_enum[3], -1);
        assert_int_equal(m->m_uint64_enum[0]->value, KEELSON__TEST__V1__COLOR__COLOR_RED);
        char *json = dump(m);
        /* By name when it has one; a value from a newer peer stays a number. */
        assert_string_equal(json,
                            "{\"fEnum\":\"COLOR_GREEN\",\"rEnum\":[\"COLOR_BLUE\",\"COLOR_BLUE\","
                            "12345,-1,\"COLOR_UNSPECIFIED\"],"
                            "\"mUint64Enum\":{\"1\":\"COLOR_RED\"}}");
        free(json);
        free_msg(m);
}

/* ---- defaults, null and presence ------------------------------------------ */

static void test_defaults_omitted(void **state)
{
        (void)state;
        AllTypes m = KEELSON__TEST__V1__ALL_TYPES__INIT;
        Inner empty = KEELSON__TEST__V1__INNER__INIT;
        char *json = dump(&m);
        assert_string_equal(json, "{}");
        free(json);

        /* A set submessage is written even when all its fields are default. */
        m.f_inner = &empty;
        m.f_string = "";
        json = dump(&m);
        assert_string_equal(json, "{\"fInner\":{}}");
        free(json);
}

static void test_null_means_default(void **state)
{
        (void)state;
        AllTypes *m = parse_ok("{\"fInt32\":null,\"fString\":null,\"fInner\":null,\"rInt32\":null,"
                               "\"mStrInt64\":null,\"fEnum\":null,\"cText\":null,\"cNumber\":\"3\","
                               "\"fBytes\":null,\"rInner\":[],\"mInt32Str\":{}}");
        assert_int_equal(m->f_int32, 0);
        assert_string_equal(m->f_string, "");
        assert_null(m->f_inner);
        assert_int_equal(m->n_r_int32, 0);
        assert_int_equal(m->n_m_str_int64, 0);
        assert_int_equal(m->n_r_inner, 0);
        assert_int_equal(m->n_m_int32_str, 0);
        assert_int_equal(m->choice_case, KEELSON__TEST__V1__ALL_TYPES__CHOICE_C_NUMBER);
        assert_int_equal(m->c_number, 3);
        char *json = dump(m);
        assert_string_equal(json, "{\"cNumber\":\"3\"}");
        free(json);
        free_msg(m);
}

static void test_oneof_member_at_default_is_written(void **state)
{
        (void)state;
        AllTypes m = KEELSON__TEST__V1__ALL_TYPES__INIT;
        m.choice_case = KEELSON__TEST__V1__ALL_TYPES__CHOICE_C_TEXT;
        m.c_text = "";
        m.maybe_count_case = KEELSON__TEST__V1__ALL_TYPES__MAYBE_COUNT_O_INT32;
        m.o_int32 = 0;
        char *json = dump(&m);
        assert_string_equal(json, "{\"cText\":\"\",\"oInt32\":0}");

        AllTypes *back = parse_ok(json);
        assert_int_equal(back->choice_case, KEELSON__TEST__V1__ALL_TYPES__CHOICE_C_TEXT);
        assert_string_equal(back->c_text, "");
        assert_int_equal(back->maybe_count_case, KEELSON__TEST__V1__ALL_TYPES__MAYBE_COUNT_O_INT32);
        free(json);
        free_msg(back);
}

/*
 * protoc-c 1.4.1 refuses proto3 `optional`, so no .proto can declare one
 * here. Presence through a has_ flag (LABEL_OPTIONAL, as proto2 and a
 * generator with proto3 optional lay it out) is tested on a descriptor
 * written by hand in the generated code's shape.
 */
typedef struct {
        ProtobufCMessage base;
        protobuf_c_boolean has_count;
        int32_t count;
        char *label;
        protobuf_c_boolean has_blob;
        ProtobufCBinaryData blob;
} OptMsg;

static const ProtobufCMessageDescriptor opt_desc;

static void opt_init(ProtobufCMessage *m)
{
        OptMsg init = {PROTOBUF_C_MESSAGE_INIT(&opt_desc), 0, 0, NULL, 0, {0, NULL}};
        *(OptMsg *)m = init;
}

static const ProtobufCFieldDescriptor opt_fields[] = {
    {"count", 1, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_INT32, offsetof(OptMsg, has_count),
     offsetof(OptMsg, count), NULL, NULL, 0, 0, NULL, NULL},
    {"label", 2, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_STRING, 0, offsetof(OptMsg, label),
     NULL, NULL, 0, 0, NULL, NULL},
    {"blob", 3, PROTOBUF_C_LABEL_OPTIONAL, PROTOBUF_C_TYPE_BYTES, offsetof(OptMsg, has_blob),
     offsetof(OptMsg, blob), NULL, NULL, 0, 0, NULL, NULL},
};
static const unsigned opt_by_name[] = {2, 0, 1};
static const ProtobufCIntRange opt_ranges[] = {{1, 0}, {0, 3}};
static const ProtobufCMessageDescriptor opt_desc = {PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,
                                                    "keelson.test.v1.Opt",
                                                    "Opt",
                                                    "Opt",
                                                    "keelson.test.v1",
                                                    sizeof(OptMsg),
                                                    3,
                                                    opt_fields,
                                                    opt_by_name,
                                                    1,
                                                    opt_ranges,
                                                    opt_init,
                                                    NULL,
                                                    NULL,
                                                    NULL};

static void test_optional_fields_written_when_present(void **state)
{
        (void)state;
        OptMsg m;
        opt_init(&m.base);
        char *json = dump(&m);
        assert_string_equal(json, "{}");
        free(json);

        char empty[] = "";
        m.has_count = 1;
        m.count = 0;
        m.label = empty;
        m.has_blob = 1;
        json = dump(&m);
        assert_string_equal(json, "{\"count\":0,\"label\":\"\",\"blob\":\"\"}");

        ProtobufCMessage *back = NULL;
        char err[128];
        assert_int_equal(ks_json_to_message(&opt_desc, json, strlen(json), &back, err, sizeof(err)),
                         KS_OK);
        OptMsg *o = (OptMsg *)back;
        assert_true(o->has_count);
        assert_int_equal(o->count, 0);
        assert_non_null(o->label);
        assert_string_equal(o->label, "");
        assert_true(o->has_blob);
        free(json);
        json = dump(back);
        assert_string_equal(json, "{\"count\":0,\"label\":\"\",\"blob\":\"\"}");
        free(json);
        free_msg(back);

        assert_int_equal(ks_json_to_message(&opt_desc, "{}", 2, &back, err, sizeof(err)), KS_OK);
        o = (OptMsg *)back;
        assert_false(o->has_count);
        assert_null(o->label);
        free_msg(back);
        expect_reject_desc(&opt_desc, "{\"count\":\"x\"}", "field 'count': expected an integer");
}

/* ---- maps --------------------------------------------------------------- */

static void test_maps(void **state)
{
        (void)state;
        AllTypes *m = parse_ok("{\"mInt32Str\":{\"-2147483648\":\"min\",\"2147483647\":\"max\"},"
                               "\"mBoolInner\":{\"false\":{\"count\":2}},"
                               "\"mUint64Enum\":{\"18446744073709551615\":\"COLOR_BLUE\"}}");
        assert_int_equal(m->n_m_int32_str, 2);
        assert_int_equal(m->m_int32_str[0]->key, INT32_MIN);
        assert_string_equal(m->m_int32_str[0]->value, "min");
        assert_int_equal(m->m_int32_str[1]->key, INT32_MAX);
        assert_int_equal(m->n_m_bool_inner, 1);
        assert_false(m->m_bool_inner[0]->key);
        assert_int_equal(m->m_bool_inner[0]->value->count, 2);
        assert_true(m->m_uint64_enum[0]->key == UINT64_MAX);
        free_msg(m);

        /* A key repeated in the message: the last one wins, as in protobuf. */
        AllTypes out = KEELSON__TEST__V1__ALL_TYPES__INIT;
        Keelson__Test__V1__AllTypes__MStrInt64Entry a =
            KEELSON__TEST__V1__ALL_TYPES__MSTR_INT64_ENTRY__INIT;
        Keelson__Test__V1__AllTypes__MStrInt64Entry b =
            KEELSON__TEST__V1__ALL_TYPES__MSTR_INT64_ENTRY__INIT;
        Keelson__Test__V1__AllTypes__MStrInt64Entry *entries[] = {&a, &b};
        Keelson__Test__V1__AllTypes__MBoolInnerEntry nullv =
            KEELSON__TEST__V1__ALL_TYPES__MBOOL_INNER_ENTRY__INIT;
        Keelson__Test__V1__AllTypes__MBoolInnerEntry *bools[] = {&nullv};
        a.key = "k", a.value = 1;
        b.key = "k", b.value = 2;
        out.n_m_str_int64 = 2, out.m_str_int64 = entries;
        out.n_m_bool_inner = 1, out.m_bool_inner = bools; /* value NULL: an empty message */
        char *json = dump(&out);
        assert_string_equal(json, "{\"mStrInt64\":{\"k\":\"2\"},\"mBoolInner\":{\"false\":{}}}");
        free(json);
}

/* ---- bounds ------------------------------------------------------------- */

/* {"fInner":{"child":{"child":...}}} with levels messages below the root. */
static char *nested_json(int levels)
{
        size_t cap = (size_t)levels * 16 + 32;
        char *s = malloc(cap);
        assert_non_null(s);
        strcpy(s, "{\"fInner\":");
        for (int i = 1; i < levels; i++)
                strcat(s, "{\"child\":");
        strcat(s, "{\"count\":1}");
        for (int i = 0; i < levels; i++)
                strcat(s, "}");
        return s;
}

static void test_depth_bound(void **state)
{
        (void)state;
        /* The root plus 31 levels is exactly KS_JSON_DEPTH_MAX messages. */
        char *ok = nested_json(KS_JSON_DEPTH_MAX - 1);
        AllTypes *m = parse_ok(ok);
        char *back = dump(m);
        assert_string_equal(back, ok);
        free(back);
        free_msg(m);
        free(ok);

        char *deep = nested_json(KS_JSON_DEPTH_MAX);
        expect_reject(deep, "field 'fInner.child.child");
        expect_reject(deep, "nested deeper than 32");
        free(deep);

        /* Printing is bounded the same way. */
        Inner chain[KS_JSON_DEPTH_MAX];
        for (int i = 0; i < KS_JSON_DEPTH_MAX; i++) {
                Inner init = KEELSON__TEST__V1__INNER__INIT;
                chain[i] = init;
                if (i > 0)
                        chain[i - 1].child = &chain[i];
        }
        AllTypes root = KEELSON__TEST__V1__ALL_TYPES__INIT;
        root.f_inner = &chain[0];
        char *s = NULL;
        size_t n = 0;
        assert_int_equal(ks_json_from_message(&root.base, &s, &n), KS_INTERNAL);
        assert_null(s);
        chain[KS_JSON_DEPTH_MAX - 2].child = NULL;
        assert_int_equal(ks_json_from_message(&root.base, &s, &n), KS_OK);
        free(s);
}

static void test_input_need_not_be_terminated(void **state)
{
        (void)state;
        const char buf[] = "{\"fInt32\":5}garbage";
        AllTypes *m = parse_len(buf, 12);
        assert_int_equal(m->f_int32, 5);
        free_msg(m);
}

/* ---- rejections --------------------------------------------------------- */

typedef struct reject_case {
        const char *json;
        const char *want;
} reject_case;

static void run_rejects(const reject_case *cases, size_t n)
{
        for (size_t i = 0; i < n; i++)
                expect_reject(cases[i].json, cases[i].want);
}

#define RUN_REJECTS(cases) run_rejects(cases, sizeof(cases) / sizeof(cases[0]))

static void test_reject_malformed(void **state)
{
        (void)state;
        static const reject_case cases[] = {
            {"", "malformed JSON (line 1"},
            {"{\"fInt32\":}", "malformed JSON (line 1, column 11)"},
            {"{\"fInt32\":1", "malformed JSON"},
            {"{'fInt32':1}", "malformed JSON"},
            {"{\"fInt32\":1,}", "malformed JSON"},
            {"{} x", "unexpected data after the JSON value"},
            {"{}{}", "unexpected data after the JSON value"},
            {"[1]", "expected a JSON object"},
            {"\"fInt32\"", "expected a JSON object"},
            {"1", "expected a JSON object"},
            {"null", "expected a JSON object"},
            {"{\"fInt32\":1,\"fInt32\":2}", "duplicate key in a JSON object"},
            {"{\"fString\":\"a\\u0000b\"}", "invalid UTF-8 or NUL"},
            {"{\"fString\":\"\xff\"}", "invalid UTF-8 or NUL"},
            {"{\"fUint64\":18446744073709551615}", "send 64-bit integers as strings"},
        };
        RUN_REJECTS(cases);
}

static void test_reject_unknown_fields(void **state)
{
        (void)state;
        static const reject_case cases[] = {
            {"{\"foo\":1}", "unknown field 'foo'"},
            {"{\"FInt32\":1}", "unknown field 'FInt32'"},
            {"{\"fInner\":{\"bar\":1}}", "unknown field 'fInner.bar'"},
            {"{\"rInner\":[{},{\"x\":1}]}", "unknown field 'rInner[1].x'"},
            {"{\"mBoolInner\":{\"true\":{\"z\":0}}}", "unknown field 'mBoolInner[\"true\"].z'"},
            /* Client text is echoed as printable ASCII only. */
            {"{\"a'b\\n\\\"\":1}", "unknown field 'a?b?\?'"},
        };
        RUN_REJECTS(cases);
}

static void test_reject_wrong_types(void **state)
{
        (void)state;
        static const reject_case cases[] = {
            {"{\"fInt32\":\"abc\"}", "field 'fInt32': expected an integer"},
            {"{\"fInt32\":true}", "field 'fInt32': expected an integer"},
            {"{\"fSint32\":[1]}", "field 'fSint32': expected an integer"},
            {"{\"fSfixed32\":\" 1\"}", "field 'fSfixed32': expected an integer"},
            {"{\"fUint32\":{}}", "field 'fUint32': expected an integer"},
            {"{\"fFixed32\":\"+1\"}", "field 'fFixed32': expected an integer"},
            {"{\"fInt64\":true}", "field 'fInt64': expected an integer"},
            {"{\"fSint64\":\"\"}", "field 'fSint64': expected an integer"},
            {"{\"fSfixed64\":[]}", "field 'fSfixed64': expected an integer"},
            {"{\"fUint64\":\"x\"}", "field 'fUint64': expected an integer"},
            {"{\"fFixed64\":false}", "field 'fFixed64': expected an integer"},
            {"{\"fBool\":\"true\"}", "field 'fBool': expected true or false"},
            {"{\"fBool\":1}", "field 'fBool': expected true or false"},
            {"{\"fFloat\":\"abc\"}", "field 'fFloat': expected a number"},
            {"{\"fFloat\":\"nan\"}", "field 'fFloat': expected a number"},
            {"{\"fDouble\":true}", "field 'fDouble': expected a number"},
            {"{\"fDouble\":\"1.5x\"}", "field 'fDouble': expected a number"},
            {"{\"fDouble\":\"0x10\"}", "field 'fDouble': expected a number"},
            {"{\"fString\":1}", "field 'fString': expected a string"},
            {"{\"fString\":{}}", "field 'fString': expected a string"},
            {"{\"fBytes\":1}", "field 'fBytes': expected a base64 string"},
            {"{\"fEnum\":true}", "field 'fEnum': expected an enum value name or number"},
            {"{\"fEnum\":1.5}", "field 'fEnum': expected an integer"},
            {"{\"fInner\":\"x\"}", "field 'fInner': expected an object"},
            {"{\"fInner\":[]}", "field 'fInner': expected an object"},
            {"{\"fInner\":{\"count\":\"x\"}}", "field 'fInner.count': expected an integer"},
            {"{\"rInt32\":1}", "field 'rInt32': expected an array"},
            {"{\"rInt32\":{}}", "field 'rInt32': expected an array"},
            {"{\"rInt32\":[1,\"x\"]}", "field 'rInt32[1]': expected an integer"},
            {"{\"rInt32\":[1,null]}", "field 'rInt32[1]': null is not allowed in a list"},
            {"{\"rString\":[\"a\",2]}", "field 'rString[1]': expected a string"},
            {"{\"rInner\":[{},{\"name\":5}]}", "field 'rInner[1].name': expected a string"},
            {"{\"rBool\":[0]}", "field 'rBool[0]': expected true or false"},
            {"{\"mStrInt64\":[]}", "field 'mStrInt64': expected an object"},
            {"{\"mStrInt64\":{\"a\":\"x\"}}", "field 'mStrInt64[\"a\"]': expected an integer"},
            {"{\"mStrInt64\":{\"a\":null}}", "field 'mStrInt64[\"a\"]': null is not allowed"},
            {"{\"mInt32Str\":{\"abc\":\"x\"}}",
             "field 'mInt32Str[\"abc\"]': expected an integer map key"},
            {"{\"mInt32Str\":{\"1\":2}}", "field 'mInt32Str[\"1\"]': expected a string"},
            /* found by fuzzing: two spellings of one key would make two entries */
            {"{\"mInt32Str\":{\"0\":\"\",\"-0\":\"\"}}",
             "field 'mInt32Str[\"-0\"]': map key must be a canonical integer (\"0\")"},
            {"{\"mUint64Enum\":{\"01\":1}}",
             "field 'mUint64Enum[\"01\"]': map key must be a canonical integer (\"1\")"},
            {"{\"mBoolInner\":{\"yes\":{}}}",
             "field 'mBoolInner[\"yes\"]': expected a map key of true or false"},
            {"{\"mBoolInner\":{\"true\":5}}", "field 'mBoolInner[\"true\"]': expected an object"},
            {"{\"mUint64Enum\":{\"-1\":1}}", "field 'mUint64Enum[\"-1\"]': map key out of range"},
            {"{\"cInner\":\"x\"}", "field 'cInner': expected an object"},
            {"{\"oInt32\":\"x\"}", "field 'oInt32': expected an integer"},
        };
        RUN_REJECTS(cases);
}

static void test_reject_out_of_range(void **state)
{
        (void)state;
        static const reject_case cases[] = {
            {"{\"fInt32\":2147483648}", "field 'fInt32': number out of range for int32"},
            {"{\"fInt32\":-2147483649}", "field 'fInt32': number out of range for int32"},
            {"{\"fInt32\":\"2147483648\"}", "field 'fInt32': number out of range for int32"},
            {"{\"fSint32\":-3e9}", "field 'fSint32': number out of range for sint32"},
            {"{\"fSfixed32\":1e10}", "field 'fSfixed32': number out of range for sfixed32"},
            {"{\"fUint32\":-1}", "field 'fUint32': number out of range for uint32"},
            {"{\"fUint32\":4294967296}", "field 'fUint32': number out of range for uint32"},
            {"{\"fUint32\":\"-1\"}", "field 'fUint32': number out of range for uint32"},
            {"{\"fFixed32\":\"4294967296\"}", "field 'fFixed32': number out of range for fixed32"},
            {"{\"fInt64\":\"9223372036854775808\"}",
             "field 'fInt64': number out of range for int64"},
            {"{\"fInt64\":\"-9223372036854775809\"}", "field 'fInt64': number out of range"},
            {"{\"fSint64\":1e19}", "field 'fSint64': number out of range for sint64"},
            {"{\"fSfixed64\":9223372036854775808.0}", "field 'fSfixed64': number out of range"},
            {"{\"fUint64\":\"18446744073709551616\"}",
             "field 'fUint64': number out of range for uint64"},
            {"{\"fUint64\":-1}", "field 'fUint64': number out of range for uint64"},
            {"{\"fFixed64\":2e19}", "field 'fFixed64': number out of range for fixed64"},
            {"{\"fFloat\":1e39}", "field 'fFloat': number out of range for float"},
            {"{\"fFloat\":\"-1e39\"}", "field 'fFloat': number out of range for float"},
            {"{\"fDouble\":\"1e999\"}", "field 'fDouble': number out of range for double"},
            {"{\"fEnum\":2147483648}", "field 'fEnum': number out of range for enum"},
            {"{\"rInt32\":[0,1,9999999999]}", "field 'rInt32[2]': number out of range for int32"},
            {"{\"mInt32Str\":{\"2147483648\":\"x\"}}",
             "field 'mInt32Str[\"2147483648\"]': map key out of range for int32"},
        };
        RUN_REJECTS(cases);
}

static void test_reject_non_integral(void **state)
{
        (void)state;
        static const reject_case cases[] = {
            {"{\"fInt32\":1.5}", "field 'fInt32': expected an integer"},
            {"{\"fUint32\":0.5}", "field 'fUint32': expected an integer"},
            {"{\"fInt64\":\"1.5\"}", "field 'fInt64': expected an integer"},
            {"{\"fUint64\":1e-3}", "field 'fUint64': expected an integer"},
            {"{\"fSfixed32\":\"1e3\"}", "field 'fSfixed32': expected an integer"},
        };
        RUN_REJECTS(cases);
}

static void test_reject_bad_base64(void **state)
{
        (void)state;
        static const reject_case cases[] = {
            {"{\"fBytes\":\"!!!!\"}", "field 'fBytes': invalid base64"},
            {"{\"fBytes\":\"a\"}", "field 'fBytes': invalid base64"},
            {"{\"fBytes\":\"aGVs bG8=\"}", "field 'fBytes': invalid base64"},
            {"{\"fBytes\":\"aGVsbG8===\"}", "field 'fBytes': invalid base64"},
            {"{\"rBytes\":[\"AQ==\",\"*\"]}", "field 'rBytes[1]': invalid base64"},
        };
        RUN_REJECTS(cases);
}

static void test_reject_unknown_enum_name(void **state)
{
        (void)state;
        static const reject_case cases[] = {
            {"{\"fEnum\":\"COLOR_PURPLE\"}",
             "field 'fEnum': unknown value name for enum keelson.test.v1.Color"},
            {"{\"fEnum\":\"color_red\"}", "field 'fEnum': unknown value name"},
            {"{\"rEnum\":[\"COLOR_RED\",\"red\"]}", "field 'rEnum[1]': unknown value name"},
            {"{\"mUint64Enum\":{\"1\":\"\"}}", "field 'mUint64Enum[\"1\"]': unknown value name"},
        };
        RUN_REJECTS(cases);
}

static void test_reject_two_oneof_members(void **state)
{
        (void)state;
        static const reject_case cases[] = {
            {"{\"cText\":\"a\",\"cNumber\":\"1\"}",
             "field 'cNumber': another member of its oneof is already set ('cText')"},
            {"{\"c_text\":\"a\",\"cInner\":{}}",
             "field 'cInner': another member of its oneof is already set ('cText')"},
            {"{\"cNumber\":0,\"cInner\":{},\"cText\":\"\"}", "another member of its oneof"},
        };
        RUN_REJECTS(cases);
}

static void test_reject_both_names(void **state)
{
        (void)state;
        static const reject_case cases[] = {
            {"{\"f_int32\":1,\"fInt32\":2}",
             "field 'fInt32': given twice, as 'f_int32' and as 'fInt32'"},
            {"{\"rInt64\":[],\"r_int64\":null}", "field 'rInt64': given twice"},
            {"{\"fInner\":{},\"m_str_int64\":{},\"mStrInt64\":{}}",
             "field 'mStrInt64': given twice"},
        };
        RUN_REJECTS(cases);
}

static void test_invalid_message_not_printed(void **state)
{
        (void)state;
        AllTypes m = KEELSON__TEST__V1__ALL_TYPES__INIT;
        char *s = NULL;
        size_t n = 0;

        m.f_string = "bad \xff utf-8";
        assert_int_equal(ks_json_from_message(&m.base, &s, &n), KS_INTERNAL);
        assert_null(s);
        /* UTF-8 as jansson reads it: overlong, surrogate, past U+10FFFF, cut short. */
        static const char *const not_utf8[] = {"\xc0\x80",         "\xe0\x80\x80", "\xed\xa0\x80",
                                               "\xf4\x90\x80\x80", "\xf0\x9f\x98", "a\x80"};
        for (size_t i = 0; i < sizeof(not_utf8) / sizeof(not_utf8[0]); i++) {
                m.f_string = (char *)not_utf8[i];
                assert_int_equal(ks_json_from_message(&m.base, &s, &n), KS_INTERNAL);
                assert_null(s);
        }
        m.f_string = "\xf0\x9f\x98\x80 \xe2\x82\xac \xc3\xa9"; /* 4, 3 and 2 bytes */
        assert_int_equal(ks_json_from_message(&m.base, &s, &n), KS_OK);
        assert_string_equal(s, "{\"fString\":\"\xf0\x9f\x98\x80 \xe2\x82\xac \xc3\xa9\"}");
        free(s);
        s = NULL;
        /* A map key is a string too. */
        Keelson__Test__V1__AllTypes__MStrInt64Entry e =
            KEELSON__TEST__V1__ALL_TYPES__MSTR_INT64_ENTRY__INIT;
        Keelson__Test__V1__AllTypes__MStrInt64Entry *entries[] = {&e};
        e.key = "\xff";
        m.f_string = "";
        m.n_m_str_int64 = 1, m.m_str_int64 = entries;
        assert_int_equal(ks_json_from_message(&m.base, &s, &n), KS_INTERNAL);
        assert_null(s);
        m.n_m_str_int64 = 0, m.m_str_int64 = NULL;
        m.f_string = "";
        m.n_r_int32 = 2; /* a count without an array */
        assert_int_equal(ks_json_from_message(&m.base, &s, &n), KS_INTERNAL);
        assert_null(s);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_json_message_json_round_trip),
            cmocka_unit_test(test_message_json_message_round_trip),
            cmocka_unit_test(test_output_uses_lower_camel_case),
            cmocka_unit_test(test_keys_cached_and_too_long_to_cache),
            cmocka_unit_test(test_original_names_accepted),
            cmocka_unit_test(test_int64_limits_as_strings),
            cmocka_unit_test(test_int32_forms_accepted),
            cmocka_unit_test(test_floats),
            cmocka_unit_test(test_bytes_base64),
            cmocka_unit_test(test_enums_by_name_and_number),
            cmocka_unit_test(test_defaults_omitted),
            cmocka_unit_test(test_null_means_default),
            cmocka_unit_test(test_oneof_member_at_default_is_written),
            cmocka_unit_test(test_optional_fields_written_when_present),
            cmocka_unit_test(test_maps),
            cmocka_unit_test(test_depth_bound),
            cmocka_unit_test(test_input_need_not_be_terminated),
            cmocka_unit_test(test_reject_malformed),
            cmocka_unit_test(test_reject_unknown_fields),
            cmocka_unit_test(test_reject_wrong_types),
            cmocka_unit_test(test_reject_out_of_range),
            cmocka_unit_test(test_reject_non_integral),
            cmocka_unit_test(test_reject_bad_base64),
            cmocka_unit_test(test_reject_unknown_enum_name),
            cmocka_unit_test(test_reject_two_oneof_members),
            cmocka_unit_test(test_reject_both_names),
            cmocka_unit_test(test_invalid_message_not_printed),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
