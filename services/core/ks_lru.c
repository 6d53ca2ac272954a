/*
 * ks_lru: see ks_lru.h. A doubly linked list through per-slot links, newest
 * at the head; free slots are a singly linked list through older. Every
 * operation is O(1).
 */
#include "ks_lru.h"

#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"

int ks_lru_init(ks_lru *l, uint32_t slots)
{
        KS_ASSERT(l != NULL);
        memset(l, 0, sizeof(*l));
        if (slots < 1 || slots > KS_LRU_SLOTS_MAX) {
                return -1;
        }
        l->links = calloc(slots, sizeof(*l->links));
        if (l->links == NULL) {
                return -1;
        }
        l->slots = slots;
        l->newest = l->oldest = l->free_head = KS_LRU_NONE;
        return 0;
}

void ks_lru_fini(ks_lru *l)
{
        if (l == NULL) {
                return;
        }
        free(l->links);
        memset(l, 0, sizeof(*l));
}

static void unlink_slot(ks_lru *l, uint32_t i)
{
        ks_lru_link *e = &l->links[i];
        if (e->newer != KS_LRU_NONE) {
                l->links[e->newer].older = e->older;
        } else {
                l->newest = e->older;
        }
        if (e->older != KS_LRU_NONE) {
                l->links[e->older].newer = e->newer;
        } else {
                l->oldest = e->newer;
        }
}

static void push_newest(ks_lru *l, uint32_t i)
{
        ks_lru_link *e = &l->links[i];
        e->newer = KS_LRU_NONE;
        e->older = l->newest;
        if (l->newest != KS_LRU_NONE) {
                l->links[l->newest].newer = i;
        }
        l->newest = i;
        if (l->oldest == KS_LRU_NONE) {
                l->oldest = i;
        }
}

uint32_t ks_lru_take(ks_lru *l, bool *evicted)
{
        KS_ASSERT(evicted != NULL);
        uint32_t i;
        *evicted = false;
        if (l->free_head != KS_LRU_NONE) {
                i = l->free_head;
                l->free_head = l->links[i].older;
        } else if (l->fresh < l->slots) {
                i = l->fresh++;
        } else {
                i = l->oldest;
                KS_ASSERT(i != KS_LRU_NONE && l->used == l->slots);
                unlink_slot(l, i);
                l->links[i].used = false;
                l->used--;
                *evicted = true;
        }
        KS_ASSERT(!l->links[i].used);
        l->links[i].used = true;
        l->used++;
        push_newest(l, i);
        return i;
}

bool ks_lru_full(const ks_lru *l)
{
        return l->used == l->slots;
}

void ks_lru_touch(ks_lru *l, uint32_t slot)
{
        KS_ASSERT(slot < l->slots && l->links[slot].used);
        if (l->newest != slot) {
                unlink_slot(l, slot);
                push_newest(l, slot);
        }
}

void ks_lru_release(ks_lru *l, uint32_t slot)
{
        KS_ASSERT(slot < l->slots && l->links[slot].used);
        unlink_slot(l, slot);
        l->links[slot] = (ks_lru_link){.newer = KS_LRU_NONE, .older = l->free_head, .used = false};
        l->free_head = slot;
        l->used--;
}

uint32_t ks_lru_count(const ks_lru *l)
{
        return l->used;
}

uint32_t ks_lru_newest(const ks_lru *l)
{
        return l->newest;
}

uint32_t ks_lru_oldest(const ks_lru *l)
{
        return l->oldest;
}

uint32_t ks_lru_older(const ks_lru *l, uint32_t slot)
{
        KS_ASSERT(slot < l->slots && l->links[slot].used);
        return l->links[slot].older;
}
