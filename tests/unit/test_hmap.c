/*
 * ks_hmap: what goes in is found under its hash and nowhere else, removal
 * from anywhere in a chain keeps the rest findable, two maps index the same
 * slots independently, bounds are refused, and the hash is keyed (two maps
 * hash one key differently) and spreads sequential keys over the heads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ks_hmap.h"

#define N 1000

typedef struct entry {
        char key[16];
} entry;

static entry entries[N];

static uint32_t find(const ks_hmap *m, const char *key)
{
        uint64_t h = ks_hmap_hash(m, key, strlen(key));
        for (uint32_t i = ks_hmap_first(m, h); i != KS_HMAP_NONE; i = ks_hmap_next(m, i)) {
                if (strcmp(entries[i].key, key) == 0) {
                        return i;
                }
        }
        return KS_HMAP_NONE;
}

static void put(ks_hmap *m, uint32_t i, const char *key)
{
        snprintf(entries[i].key, sizeof(entries[i].key), "%s", key);
        ks_hmap_insert(m, i, ks_hmap_hash(m, key, strlen(key)));
}

static void test_insert_find_remove(void **state)
{
        (void)state;
        ks_hmap m;
        char key[16];
        assert_int_equal(ks_hmap_init(&m, N), 0);
        for (uint32_t i = 0; i < N; i++) {
                snprintf(key, sizeof(key), "k%u", i);
                put(&m, i, key);
        }
        assert_int_equal(m.count, N);
        for (uint32_t i = 0; i < N; i++) {
                snprintf(key, sizeof(key), "k%u", i);
                assert_int_equal(find(&m, key), i);
                assert_true(ks_hmap_contains(&m, i));
        }
        assert_int_equal(find(&m, "absent"), KS_HMAP_NONE);
        /* Every other one out: the rest stay findable, the removed ones are gone. */
        for (uint32_t i = 0; i < N; i += 2) {
                ks_hmap_remove(&m, i);
        }
        assert_int_equal(m.count, N / 2);
        for (uint32_t i = 0; i < N; i++) {
                snprintf(key, sizeof(key), "k%u", i);
                assert_int_equal(find(&m, key), i % 2 ? i : KS_HMAP_NONE);
                assert_int_equal(ks_hmap_contains(&m, i), i % 2 == 1);
        }
        /* A removed slot can be indexed again, under another key. */
        put(&m, 0, "again");
        assert_int_equal(find(&m, "again"), 0);
        ks_hmap_fini(&m);
        ks_hmap_fini(&m); /* twice is fine */
}

static void test_one_chain_any_order(void **state)
{
        (void)state;
        /* Equal hashes chain together: removal from the head, middle and tail. */
        ks_hmap m;
        assert_int_equal(ks_hmap_init(&m, 8), 0);
        for (uint32_t i = 0; i < 5; i++) {
                ks_hmap_insert(&m, i, 42);
        }
        uint32_t order[5], n = 0;
        for (uint32_t i = ks_hmap_first(&m, 42); i != KS_HMAP_NONE; i = ks_hmap_next(&m, i)) {
                order[n++] = i;
        }
        assert_int_equal(n, 5);
        ks_hmap_remove(&m, order[0]);
        ks_hmap_remove(&m, order[2]);
        ks_hmap_remove(&m, order[4]);
        n = 0;
        for (uint32_t i = ks_hmap_first(&m, 42); i != KS_HMAP_NONE; i = ks_hmap_next(&m, i)) {
                assert_true(i == order[1] || i == order[3]);
                n++;
        }
        assert_int_equal(n, 2);
        /* A different hash in the same head is skipped by the iteration. */
        ks_hmap_insert(&m, 7, 42 + (m.mask + 1));
        n = 0;
        for (uint32_t i = ks_hmap_first(&m, 42); i != KS_HMAP_NONE; i = ks_hmap_next(&m, i)) {
                assert_true(i != 7);
                n++;
        }
        assert_int_equal(n, 2);
        assert_int_equal(ks_hmap_first(&m, 42 + (m.mask + 1)), 7);
        ks_hmap_fini(&m);
}

static void test_two_maps_over_one_array(void **state)
{
        (void)state;
        ks_hmap by_key, by_owner;
        assert_int_equal(ks_hmap_init(&by_key, 4), 0);
        assert_int_equal(ks_hmap_init(&by_owner, 4), 0);
        put(&by_key, 0, "a");
        put(&by_key, 1, "b");
        ks_hmap_insert(&by_owner, 0, ks_hmap_hash(&by_owner, "u1", 2));
        ks_hmap_insert(&by_owner, 1, ks_hmap_hash(&by_owner, "u1", 2));
        ks_hmap_remove(&by_key, 0);
        assert_int_equal(find(&by_key, "a"), KS_HMAP_NONE);
        uint32_t n = 0;
        uint64_t h = ks_hmap_hash(&by_owner, "u1", 2);
        for (uint32_t i = ks_hmap_first(&by_owner, h); i != KS_HMAP_NONE;
             i = ks_hmap_next(&by_owner, i)) {
                n++;
        }
        assert_int_equal(n, 2); /* the other index did not move */
        ks_hmap_fini(&by_key);
        ks_hmap_fini(&by_owner);
}

static void test_bounds(void **state)
{
        (void)state;
        ks_hmap m;
        assert_int_equal(ks_hmap_init(&m, 0), -1);
        assert_int_equal(ks_hmap_init(&m, KS_HMAP_SLOTS_MAX + 1), -1);
        assert_int_equal(ks_hmap_init(&m, 1), 0);
        assert_true(m.mask + 1 >= 2);
        ks_hmap_fini(&m);
        assert_int_equal(ks_hmap_init(&m, 1000), 0);
        assert_true(m.mask + 1 >= 2000 && m.mask + 1 <= 4096); /* a power of two, 2x..4x */
        assert_int_equal((m.mask + 1) & m.mask, 0);
        ks_hmap_fini(&m);
}

static void test_hash_is_keyed_and_spreads(void **state)
{
        (void)state;
        ks_hmap a, b;
        assert_int_equal(ks_hmap_init(&a, 1024), 0);
        assert_int_equal(ks_hmap_init(&b, 1024), 0);
        assert_true(a.seed != b.seed);
        assert_true(ks_hmap_hash(&a, "tenant-1", 8) != ks_hmap_hash(&b, "tenant-1", 8));
        /* Deterministic for one seed; length counts (a key and its prefix differ). */
        assert_true(ks_hash64(7, "abc", 3) == ks_hash64(7, "abc", 3));
        assert_true(ks_hash64(7, "abc\0", 4) != ks_hash64(7, "abc", 3));
        /* 1024 sequential keys over 2048 heads: no head holds more than a handful. */
        static uint8_t per_head[2048];
        char key[16];
        int worst = 0;
        for (int i = 0; i < 1024; i++) {
                snprintf(key, sizeof(key), "10.0.%d.%d", i / 256, i % 256);
                uint64_t h = ks_hmap_hash(&a, key, strlen(key));
                int n = ++per_head[h & 2047];
                worst = n > worst ? n : worst;
        }
        assert_true(worst <= 8);
        ks_hmap_fini(&a);
        ks_hmap_fini(&b);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_insert_find_remove),
            cmocka_unit_test(test_one_chain_any_order),
            cmocka_unit_test(test_two_maps_over_one_array),
            cmocka_unit_test(test_bounds),
            cmocka_unit_test(test_hash_is_keyed_and_spreads),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
