/*
 * ks_hmap: a bounded hash index over slots the caller owns.
 *
 * The table stores no keys and no values. The caller keeps its entries in an
 * array of its own, indexed by slot (0..slots-1), with the keys inline: no
 * allocation per entry, and a key is compared by the caller's own code
 * (memcmp, strcmp, a struct). The table keeps one hash and two chain links
 * per slot, and 2x..4x slots chain heads, so chains stay short at any
 * fill. Several maps may index the same slots (a context cache by token and
 * by user); ks_lru orders the same slots by use.
 *
 * Hashing is keyed: each map draws a random 64-bit seed, so whoever chooses
 * keys (a client's address, a tenant id) cannot predict which keys collide
 * and flood one chain. ks_hash64 is a multiply-xorshift hash whose every
 * input word meets the seed-dependent state (and murmur3's finaliser); it
 * is fast enough for a rate-limit decision per request. Its seed hides the
 * layout from a remote client; it is not a MAC.
 *
 *   uint64_t h = ks_hmap_hash(&m, key, len);
 *   for (uint32_t i = ks_hmap_first(&m, h); i != KS_HMAP_NONE; i = ks_hmap_next(&m, i))
 *           if (entries[i].len == len && memcmp(entries[i].key, key, len) == 0)
 *                   return i;
 *   ...
 *   ks_hmap_insert(&m, slot, h);      (the slot's entry now holds the key)
 *   ks_hmap_remove(&m, slot);
 *
 * Not thread-safe: one owner, or the caller's lock.
 */
#ifndef KS_HMAP_H
#define KS_HMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KS_HMAP_NONE      UINT32_MAX
#define KS_HMAP_SLOTS_MAX (1u << 24) /* 16 M entries: far past any bound configured here */

typedef struct ks_hmap_link {
        uint64_t hash;
        uint32_t next; /* in the chain, or KS_HMAP_NONE */
        uint32_t prev; /* in the chain; KS_HMAP_HEAD first; KS_HMAP_OUT: not in the map */
} ks_hmap_link;

typedef struct ks_hmap {
        ks_hmap_link *links; /* one per slot */
        uint32_t *heads;     /* mask + 1 of them */
        uint64_t mask;
        uint64_t seed;
        uint32_t slots;
        uint32_t count;
} ks_hmap;

/* A seeded 64-bit hash of [data, data + len). */
uint64_t ks_hash64(uint64_t seed, const void *data, size_t len);

/* An empty map over slots 0..slots-1 (1..KS_HMAP_SLOTS_MAX). 0, or -1 (memory, bounds). */
int ks_hmap_init(ks_hmap *m, uint32_t slots) __attribute__((warn_unused_result));
/* Frees the arrays; a zeroed or finished map is fine. */
void ks_hmap_fini(ks_hmap *m);
/* A key's hash under this map's seed. */
uint64_t ks_hmap_hash(const ks_hmap *m, const void *key, size_t len);
/* Indexes slot (not in the map) under hash. */
void ks_hmap_insert(ks_hmap *m, uint32_t slot, uint64_t hash);
/* Takes slot (in the map) out. */
void ks_hmap_remove(ks_hmap *m, uint32_t slot);
bool ks_hmap_contains(const ks_hmap *m, uint32_t slot);

/* Iteration over the slots indexed under one hash: the caller compares keys. */
static inline uint32_t ks_hmap_skip_(const ks_hmap *m, uint32_t i, uint64_t hash)
{
        while (i != KS_HMAP_NONE && m->links[i].hash != hash) {
                i = m->links[i].next;
        }
        return i;
}

/* The first slot indexed under hash, or KS_HMAP_NONE. */
static inline uint32_t ks_hmap_first(const ks_hmap *m, uint64_t hash)
{
        return ks_hmap_skip_(m, m->heads[hash & m->mask], hash);
}

/* The next slot under the same hash as slot, or KS_HMAP_NONE. */
static inline uint32_t ks_hmap_next(const ks_hmap *m, uint32_t slot)
{
        return ks_hmap_skip_(m, m->links[slot].next, m->links[slot].hash);
}

#endif
