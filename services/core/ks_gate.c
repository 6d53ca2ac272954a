/*
 * ks_gate (ks_gate.h): a table of keys and their holder counts, indexed by
 * ks_hmap. A key's entry is taken from the table when it is first held and
 * given back when its last holder leaves.
 */
#include "ks_gate.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_hmap.h"

typedef struct entry {
        char key[KS_GATE_KEY_MAX + 1];
        size_t len;
        int holders;
        uint32_t next_free; /* in the free list, when not in the map */
} entry;

struct ks_gate {
        pthread_mutex_t mu;
        int width;
        ks_hmap map;
        entry *entries;
        uint32_t free_head;
};

int ks_gate_new(ks_gate **out, int width, uint32_t keys_max)
{
        ks_gate *g = calloc(1, sizeof(*g));

        *out = NULL;
        if (g == NULL || width < 1 || keys_max < 1 || keys_max >= KS_HMAP_SLOTS_MAX ||
            (g->entries = calloc(keys_max, sizeof(*g->entries))) == NULL ||
            ks_hmap_init(&g->map, keys_max) != 0) {
                if (g != NULL) {
                        free(g->entries);
                        free(g);
                }
                return KS_RESOURCE_EXHAUSTED;
        }
        pthread_mutex_init(&g->mu, NULL);
        g->width = width;
        for (uint32_t i = 0; i < keys_max; i++) {
                g->entries[i].next_free = i + 1 < keys_max ? i + 1 : KS_HMAP_NONE;
        }
        g->free_head = 0;
        *out = g;
        return KS_OK;
}

void ks_gate_free(ks_gate *g)
{
        if (g == NULL) {
                return;
        }
        KS_ASSERT(g->map.count == 0);
        ks_hmap_fini(&g->map);
        pthread_mutex_destroy(&g->mu);
        free(g->entries);
        free(g);
}

/* key's entry, or KS_HMAP_NONE; its hash in *h. Under mu. */
static uint32_t find(ks_gate *g, const char *key, size_t len, uint64_t *h)
{
        *h = ks_hmap_hash(&g->map, key, len);
        for (uint32_t i = ks_hmap_first(&g->map, *h); i != KS_HMAP_NONE;
             i = ks_hmap_next(&g->map, i)) {
                if (g->entries[i].len == len && memcmp(g->entries[i].key, key, len) == 0) {
                        return i;
                }
        }
        return KS_HMAP_NONE;
}

bool ks_gate_try_enter(ks_gate *g, const char *key, bool *held)
{
        size_t len = strlen(key);
        uint64_t h;
        bool in = true;

        *held = false;
        if (len > KS_GATE_KEY_MAX) {
                return true;
        }
        pthread_mutex_lock(&g->mu);
        uint32_t i = find(g, key, len, &h);
        if (i == KS_HMAP_NONE && g->free_head != KS_HMAP_NONE) {
                i = g->free_head;
                g->free_head = g->entries[i].next_free;
                memcpy(g->entries[i].key, key, len + 1);
                g->entries[i].len = len;
                g->entries[i].holders = 0;
                ks_hmap_insert(&g->map, i, h);
        }
        if (i != KS_HMAP_NONE) { /* else the table is full: through, ungated */
                in = g->entries[i].holders < g->width;
                if (in) {
                        g->entries[i].holders++;
                        *held = true;
                }
        }
        pthread_mutex_unlock(&g->mu);
        return in;
}

void ks_gate_leave(ks_gate *g, const char *key)
{
        size_t len = strlen(key);
        uint64_t h;

        pthread_mutex_lock(&g->mu);
        uint32_t i = find(g, key, len, &h);
        KS_ASSERT(i != KS_HMAP_NONE && g->entries[i].holders > 0);
        if (--g->entries[i].holders == 0) {
                ks_hmap_remove(&g->map, i);
                g->entries[i].len = 0;
                g->entries[i].next_free = g->free_head;
                g->free_head = i;
        }
        pthread_mutex_unlock(&g->mu);
}

int ks_gate_holders(ks_gate *g, const char *key)
{
        uint64_t h;

        pthread_mutex_lock(&g->mu);
        uint32_t i = find(g, key, strlen(key), &h);
        int n = i != KS_HMAP_NONE ? g->entries[i].holders : 0;
        pthread_mutex_unlock(&g->mu);
        return n;
}
