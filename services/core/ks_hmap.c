/*
 * ks_hmap: see ks_hmap.h.
 *
 * Chains are doubly linked through the per-slot links, so that removing a
 * slot costs O(1) whatever the chain: an LRU eviction or a revocation never
 * walks a chain that a crafted set of keys might have made long.
 */
#include "ks_hmap.h"

#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_crypto.h"

#define KS_HMAP_HEAD (UINT32_MAX - 1) /* prev of the first slot in a chain */
#define KS_HMAP_OUT  (UINT32_MAX - 2) /* prev of a slot not in the map */

uint64_t ks_hash64(uint64_t seed, const void *data, size_t len)
{
        const uint8_t *p = data;
        uint64_t h = seed ^ ((uint64_t)len * 0x9e3779b97f4a7c15ULL);
        uint64_t w;
        for (; len >= 8; p += 8, len -= 8) {
                memcpy(&w, p, 8);
                h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
                h ^= h >> 31;
        }
        if (len > 0) {
                w = 0;
                memcpy(&w, p, len);
                h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
                h ^= h >> 31;
        }
        h ^= h >> 33; /* murmur3's finalizer: every input bit reaches the low bits */
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
        h *= 0xc4ceb9fe1a85ec53ULL;
        return h ^ (h >> 33);
}

int ks_hmap_init(ks_hmap *m, uint32_t slots)
{
        KS_ASSERT(m != NULL);
        memset(m, 0, sizeof(*m));
        if (slots < 1 || slots > KS_HMAP_SLOTS_MAX) {
                return -1;
        }
        size_t n_heads = 1;
        while (n_heads < 2 * (size_t)slots) {
                n_heads <<= 1;
        }
        m->links = malloc((size_t)slots * sizeof(*m->links));
        m->heads = malloc(n_heads * sizeof(*m->heads));
        if (m->links == NULL || m->heads == NULL ||
            ks_random_bytes(&m->seed, sizeof(m->seed)) != 0) {
                ks_hmap_fini(m);
                return -1;
        }
        memset(m->heads, 0xff, n_heads * sizeof(*m->heads)); /* KS_HMAP_NONE */
        for (uint32_t i = 0; i < slots; i++) {
                m->links[i] = (ks_hmap_link){.hash = 0, .next = KS_HMAP_NONE, .prev = KS_HMAP_OUT};
        }
        m->mask = n_heads - 1;
        m->slots = slots;
        return 0;
}

void ks_hmap_fini(ks_hmap *m)
{
        if (m == NULL) {
                return;
        }
        free(m->links);
        free(m->heads);
        memset(m, 0, sizeof(*m));
}

uint64_t ks_hmap_hash(const ks_hmap *m, const void *key, size_t len)
{
        return ks_hash64(m->seed, key, len);
}

bool ks_hmap_contains(const ks_hmap *m, uint32_t slot)
{
        KS_ASSERT(slot < m->slots);
        return m->links[slot].prev != KS_HMAP_OUT;
}

void ks_hmap_insert(ks_hmap *m, uint32_t slot, uint64_t hash)
{
        KS_ASSERT(slot < m->slots && m->links[slot].prev == KS_HMAP_OUT);
        uint32_t *head = &m->heads[hash & m->mask];
        ks_hmap_link *l = &m->links[slot];
        l->hash = hash;
        l->next = *head;
        l->prev = KS_HMAP_HEAD;
        if (*head != KS_HMAP_NONE) {
                m->links[*head].prev = slot;
        }
        *head = slot;
        m->count++;
}

void ks_hmap_remove(ks_hmap *m, uint32_t slot)
{
        KS_ASSERT(slot < m->slots && m->links[slot].prev != KS_HMAP_OUT);
        ks_hmap_link *l = &m->links[slot];
        if (l->prev == KS_HMAP_HEAD) {
                m->heads[l->hash & m->mask] = l->next;
        } else {
                m->links[l->prev].next = l->next;
        }
        if (l->next != KS_HMAP_NONE) {
                m->links[l->next].prev = l->prev;
        }
        l->next = KS_HMAP_NONE;
        l->prev = KS_HMAP_OUT;
        KS_ASSERT(m->count > 0);
        m->count--;
}
