/*
 * ks_lru: slots are handed out released first, then never used, then the
 * least recently used (reported as evicted); a touch saves a slot from the
 * next eviction; the order newest to oldest is what the uses made it; bounds
 * are refused. And the two together, as a bounded cache uses them: a cache
 * of 3 keys over ks_hmap + ks_lru evicts exactly the key used longest ago.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "ks_hmap.h"
#include "ks_lru.h"

static void expect_order(const ks_lru *l, const uint32_t *want, uint32_t n)
{
        uint32_t i = ks_lru_newest(l), k = 0;
        for (; i != KS_LRU_NONE; i = ks_lru_older(l, i), k++) {
                assert_true(k < n);
                assert_int_equal(i, want[k]);
        }
        assert_int_equal(k, n);
        assert_int_equal(ks_lru_count(l), n);
        assert_int_equal(ks_lru_oldest(l), n > 0 ? want[n - 1] : KS_LRU_NONE);
}

static void test_take_order_and_eviction(void **state)
{
        (void)state;
        ks_lru l;
        bool evicted;
        assert_int_equal(ks_lru_init(&l, 3), 0);
        assert_int_equal(ks_lru_take(&l, &evicted), 0);
        assert_false(evicted);
        assert_int_equal(ks_lru_take(&l, &evicted), 1);
        assert_int_equal(ks_lru_take(&l, &evicted), 2);
        assert_false(evicted);
        assert_true(ks_lru_full(&l));
        expect_order(&l, (uint32_t[]){2, 1, 0}, 3);
        /* Full: the oldest (0) is handed out again, and said to be evicted. */
        assert_int_equal(ks_lru_take(&l, &evicted), 0);
        assert_true(evicted);
        expect_order(&l, (uint32_t[]){0, 2, 1}, 3);
        /* A touch saves 1 from the next eviction: 2 goes instead. */
        ks_lru_touch(&l, 1);
        expect_order(&l, (uint32_t[]){1, 0, 2}, 3);
        assert_int_equal(ks_lru_take(&l, &evicted), 2);
        assert_true(evicted);
        ks_lru_touch(&l, 2); /* the newest already: nothing moves */
        expect_order(&l, (uint32_t[]){2, 1, 0}, 3);
        ks_lru_fini(&l);
}

static void test_release_comes_back_first(void **state)
{
        (void)state;
        ks_lru l;
        bool evicted;
        assert_int_equal(ks_lru_init(&l, 4), 0);
        for (int i = 0; i < 3; i++) {
                (void)ks_lru_take(&l, &evicted);
        }
        ks_lru_release(&l, 1); /* from the middle */
        expect_order(&l, (uint32_t[]){2, 0}, 2);
        ks_lru_release(&l, 2); /* the newest */
        ks_lru_release(&l, 0); /* the last one */
        expect_order(&l, NULL, 0);
        /* Released ones first (the last released first), then the never used slot 3. */
        assert_int_equal(ks_lru_take(&l, &evicted), 0);
        assert_int_equal(ks_lru_take(&l, &evicted), 2);
        assert_int_equal(ks_lru_take(&l, &evicted), 1);
        assert_int_equal(ks_lru_take(&l, &evicted), 3);
        assert_false(evicted);
        assert_true(ks_lru_full(&l));
        ks_lru_fini(&l);
        ks_lru_fini(&l);
}

static void test_bounds(void **state)
{
        (void)state;
        ks_lru l;
        bool evicted;
        assert_int_equal(ks_lru_init(&l, 0), -1);
        assert_int_equal(ks_lru_init(&l, KS_LRU_SLOTS_MAX + 1), -1);
        assert_int_equal(ks_lru_init(&l, 1), 0);
        assert_int_equal(ks_lru_take(&l, &evicted), 0);
        assert_false(evicted);
        assert_int_equal(ks_lru_take(&l, &evicted), 0);
        assert_true(evicted);
        ks_lru_fini(&l);
}

/* ---- a bounded cache of string keys, as the services build one ------------ */

#define CACHE_MAX 3

typedef struct cache {
        ks_hmap map;
        ks_lru lru;
        char keys[CACHE_MAX][8];
} cache;

static uint32_t cache_find(cache *c, const char *key)
{
        uint64_t h = ks_hmap_hash(&c->map, key, strlen(key));
        for (uint32_t i = ks_hmap_first(&c->map, h); i != KS_HMAP_NONE;
             i = ks_hmap_next(&c->map, i)) {
                if (strcmp(c->keys[i], key) == 0) {
                        ks_lru_touch(&c->lru, i);
                        return i;
                }
        }
        return KS_HMAP_NONE;
}

static void cache_put(cache *c, const char *key)
{
        bool evicted;
        if (cache_find(c, key) != KS_HMAP_NONE) {
                return;
        }
        uint32_t i = ks_lru_take(&c->lru, &evicted);
        if (evicted) {
                ks_hmap_remove(&c->map, i);
        }
        snprintf(c->keys[i], sizeof(c->keys[i]), "%s", key);
        ks_hmap_insert(&c->map, i, ks_hmap_hash(&c->map, key, strlen(key)));
}

static void test_cache_evicts_least_recently_used(void **state)
{
        (void)state;
        cache c;
        assert_int_equal(ks_hmap_init(&c.map, CACHE_MAX), 0);
        assert_int_equal(ks_lru_init(&c.lru, CACHE_MAX), 0);
        cache_put(&c, "a");
        cache_put(&c, "b");
        cache_put(&c, "c");
        assert_true(cache_find(&c, "a") != KS_HMAP_NONE); /* a is used again: b is the oldest */
        cache_put(&c, "d");
        assert_int_equal(cache_find(&c, "b"), KS_HMAP_NONE);
        assert_true(cache_find(&c, "a") != KS_HMAP_NONE);
        assert_true(cache_find(&c, "c") != KS_HMAP_NONE);
        assert_true(cache_find(&c, "d") != KS_HMAP_NONE);
        /* Uses now: a, c, d (oldest to newest); e evicts a. */
        cache_put(&c, "e");
        assert_int_equal(cache_find(&c, "a"), KS_HMAP_NONE);
        assert_int_equal(c.map.count, CACHE_MAX);
        ks_hmap_fini(&c.map);
        ks_lru_fini(&c.lru);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_take_order_and_eviction),
            cmocka_unit_test(test_release_comes_back_first),
            cmocka_unit_test(test_bounds),
            cmocka_unit_test(test_cache_evicts_least_recently_used),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
