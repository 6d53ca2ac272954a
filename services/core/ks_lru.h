/*
 * ks_lru: a fixed pool of slots, ordered by use.
 *
 * The companion of ks_hmap for bounded caches: it hands out slot numbers
 * (0..slots-1) for new entries, keeps the slots in use in order of last use,
 * and when every slot is taken gives the least recently used one back for
 * reuse, telling the caller so that it first drops that entry from its
 * maps. Entries live in the caller's array, as with ks_hmap; so does
 * anything else a cache needs, such as an expiry time (checked on lookup).
 *
 *   bool evicted;
 *   uint32_t i = ks_lru_take(&lru, &evicted);   (i is now the most recent)
 *   if (evicted) ks_hmap_remove(&map, i);        (its old entry goes)
 *   ...
 *   ks_lru_touch(&lru, i);                       (a hit)
 *   ks_lru_release(&lru, i);                     (an entry removed)
 *
 * Not thread-safe: one owner, or the caller's lock.
 */
#ifndef KS_LRU_H
#define KS_LRU_H

#include <stdbool.h>
#include <stdint.h>

#define KS_LRU_NONE      UINT32_MAX
#define KS_LRU_SLOTS_MAX (1u << 24)

typedef struct ks_lru_link {
        uint32_t newer, older; /* KS_LRU_NONE at the ends; older links the free list */
        bool used;
} ks_lru_link;

typedef struct ks_lru {
        ks_lru_link *links;
        uint32_t newest, oldest;
        uint32_t free_head; /* released slots */
        uint32_t fresh;     /* slots fresh..slots-1 were never handed out */
        uint32_t slots, used;
} ks_lru;

/* slots 1..KS_LRU_SLOTS_MAX, all free. 0, or -1 (memory, bounds). */
int ks_lru_init(ks_lru *l, uint32_t slots) __attribute__((warn_unused_result));
void ks_lru_fini(ks_lru *l);
/*
 * A slot for a new entry, made the most recently used: a released one, else
 * one never used, else the least recently used, with *evicted true (its
 * entry is still in the caller's array and maps: drop it before reuse).
 */
uint32_t ks_lru_take(ks_lru *l, bool *evicted);
/* Every slot is in use: the next take evicts. */
bool ks_lru_full(const ks_lru *l);
/* slot (in use) becomes the most recently used. */
void ks_lru_touch(ks_lru *l, uint32_t slot);
/* slot (in use) is free again. */
void ks_lru_release(ks_lru *l, uint32_t slot);
uint32_t ks_lru_count(const ks_lru *l);
/* Ends and steps, for scans: newest to oldest via ks_lru_older. KS_LRU_NONE past the end. */
uint32_t ks_lru_newest(const ks_lru *l);
uint32_t ks_lru_oldest(const ks_lru *l);
uint32_t ks_lru_older(const ks_lru *l, uint32_t slot);

#endif
