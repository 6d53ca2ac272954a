/*
 * A u128 -> int32 hash map with linear probing, sized once. Clearing bumps
 * a generation number instead of touching the slots, so a batch of one
 * event does not pay for wiping a table sized for 8,190. There is no
 * delete: a key is "removed" by overwriting its value with -1, which is
 * what a linked chain's rollback needs.
 */
#include "ledger.h"

#include <stdlib.h>

/* splitmix64's finaliser over both halves: ids are often sequential. */
static uint32_t hash_u128(u128 k)
{
        uint64_t x = lg_lo(k) ^ (lg_hi(k) * 0x9e3779b97f4a7c15ull);

        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 31;
        return (uint32_t)x;
}

int lg_map_init(lg_map *m, uint32_t n)
{
        uint32_t cap = 16;

        while (cap < 2 * n && cap < (1u << 30)) {
                cap <<= 1;
        }
        m->slots = calloc(cap, sizeof(*m->slots));
        if (m->slots == NULL) {
                return -1;
        }
        m->mask = cap - 1;
        m->gen = 1; /* calloc'd slots have gen 0: free */
        m->count = 0;
        m->count_max = cap / 2;
        return 0;
}

void lg_map_fini(lg_map *m)
{
        free(m->slots);
        m->slots = NULL;
}

void lg_map_clear(lg_map *m)
{
        m->count = 0;
        if (++m->gen == 0) {
                /* Wrapped after 2^32 clears: old generations would come back to life. */
                for (uint32_t i = 0; i <= m->mask; i++) {
                        m->slots[i].gen = 0;
                }
                m->gen = 1;
        }
}

int32_t lg_map_get(const lg_map *m, u128 key)
{
        uint32_t i = hash_u128(key) & m->mask;

        /* The load factor is at most 1/2, so a free slot ends every probe. */
        for (;;) {
                const lg_map_slot *s = &m->slots[i];
                if (s->gen != m->gen) {
                        return -1;
                }
                if (s->key == key) {
                        return s->value;
                }
                i = (i + 1) & m->mask;
        }
}

int lg_map_put(lg_map *m, u128 key, int32_t value)
{
        uint32_t i = hash_u128(key) & m->mask;

        for (;;) {
                lg_map_slot *s = &m->slots[i];
                if (s->gen != m->gen) {
                        if (m->count >= m->count_max) {
                                return -1;
                        }
                        s->gen = m->gen;
                        s->key = key;
                        s->value = value;
                        m->count++;
                        return 0;
                }
                if (s->key == key) {
                        s->value = value;
                        return 0;
                }
                i = (i + 1) & m->mask;
        }
}
