/*
 * ks_arena: aligned carving across chunks, and a message unpacked into an
 * arena prints the same JSON as one unpacked with malloc.
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
#include "ks_arena.h"
#include "ks_code.h"
#include "ks_json.h"

static void test_alloc_aligned_and_apart(void **state)
{
        ks_arena a;
        char *prev = NULL;
        (void)state;

        ks_arena_init(&a);
        assert_null(ks_arena_alloc(&a, 0));
        /* Far past the inline chunk: several chunks, each block aligned and whole. */
        for (size_t i = 1; i < 3000; i++) {
                size_t n = i % 97 + 1;
                char *p = ks_arena_alloc(&a, n);
                assert_non_null(p);
                assert_int_equal((uintptr_t)p % 16, 0);
                memset(p, (int)(i & 0xff), n);
                if (prev != NULL) {
                        assert_true(p != prev);
                }
                prev = p;
        }
        /* A block larger than a chunk gets one of its own. */
        char *big = ks_arena_alloc(&a, 3 * KS_ARENA_CHUNK_BYTES);
        assert_non_null(big);
        memset(big, 0x5a, 3 * KS_ARENA_CHUNK_BYTES);
        assert_null(ks_arena_alloc(&a, SIZE_MAX));
        ks_arena_release(&a);
        /* Empty again, and usable: the first block is the inline chunk's. */
        char *again = ks_arena_alloc(&a, 8);
        assert_ptr_equal(again, a.first);
        ks_arena_release(&a);
}

/* A message with strings, bytes, repeated fields, sub-messages and maps. */
static size_t packed_sample(uint8_t **out)
{
        Keelson__Test__V1__AllTypes m = KEELSON__TEST__V1__ALL_TYPES__INIT;
        Keelson__Test__V1__Inner inner[40], child = KEELSON__TEST__V1__INNER__INIT;
        Keelson__Test__V1__Inner *inners[40];
        char names[40][32];
        char *strings[3] = {"a \"quoted\" string", "caf\xc3\xa9", "tab\there"};
        int64_t ints[4] = {-1, 0, INT64_MAX, INT64_MIN};
        Keelson__Test__V1__AllTypes__MStrInt64Entry e1 =
            KEELSON__TEST__V1__ALL_TYPES__MSTR_INT64_ENTRY__INIT;
        Keelson__Test__V1__AllTypes__MStrInt64Entry *entries[1] = {&e1};

        child.name = "child";
        child.count = 7;
        for (int i = 0; i < 40; i++) {
                keelson__test__v1__inner__init(&inner[i]);
                snprintf(names[i], sizeof(names[i]), "item-%d", i);
                inner[i].name = names[i];
                inner[i].count = i * 1000;
                inner[i].child = i % 3 == 0 ? &child : NULL;
                inners[i] = &inner[i];
        }
        m.f_string = "top";
        m.f_int64 = 1765000000000;
        m.f_bytes.data = (uint8_t *)"\x00\x01\x02";
        m.f_bytes.len = 3;
        m.n_r_string = 3;
        m.r_string = strings;
        m.n_r_int64 = 4;
        m.r_int64 = ints;
        m.n_r_inner = 40;
        m.r_inner = inners;
        e1.key = "k";
        e1.value = 42;
        m.n_m_str_int64 = 1;
        m.m_str_int64 = entries;
        size_t len = keelson__test__v1__all_types__get_packed_size(&m);
        *out = malloc(len);
        assert_non_null(*out);
        assert_int_equal(keelson__test__v1__all_types__pack(&m, *out), len);
        return len;
}

static void test_unpack_into_arena(void **state)
{
        uint8_t *wire;
        size_t len = packed_sample(&wire);
        char *want = NULL, *got = NULL;
        size_t want_len, got_len;
        ks_arena a;
        (void)state;

        ProtobufCMessage *heap =
            protobuf_c_message_unpack(&keelson__test__v1__all_types__descriptor, NULL, len, wire);
        assert_non_null(heap);
        assert_int_equal(ks_json_from_message(heap, &want, &want_len), KS_OK);
        protobuf_c_message_free_unpacked(heap, NULL);

        ks_arena_init(&a);
        ProtobufCMessage *m = protobuf_c_message_unpack(&keelson__test__v1__all_types__descriptor,
                                                        ks_arena_allocator(&a), len, wire);
        assert_non_null(m);
        /* Its parts came from the arena: past the inline chunk, so chunks were taken. */
        assert_non_null(a.chunks);
        assert_int_equal(ks_json_from_message(m, &got, &got_len), KS_OK);
        ks_arena_release(&a);
        assert_int_equal(got_len, want_len);
        assert_string_equal(got, want);
        assert_non_null(strstr(got, "\"name\":\"item-39\""));
        free(want);
        free(got);
        free(wire);
}

/* Garbage fails to unpack into an arena as it does with malloc, and releases clean. */
static void test_bad_wire(void **state)
{
        static const uint8_t bad[] = {0x72, 0xff, 0xff, 0xff, 0x0f, 'x'};
        ks_arena a;
        (void)state;

        ks_arena_init(&a);
        assert_null(protobuf_c_message_unpack(&keelson__test__v1__all_types__descriptor,
                                              ks_arena_allocator(&a), sizeof(bad), bad));
        ks_arena_release(&a);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_alloc_aligned_and_apart),
            cmocka_unit_test(test_unpack_into_arena),
            cmocka_unit_test(test_bad_wire),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
