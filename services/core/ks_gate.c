/*
 * ks_gate (ks_gate.h): a table of keys, each with its holder count and a
 * FIFO of waiters. A waiter is a node on its own thread's stack with its own
 * condition variable; a leaving holder hands its place to the first waiter
 * (admitted, counted as a holder before it wakes), so nobody barges ahead
 * of a queue. A key's entry is taken from the table when it is entered and
 * given back when its last holder leaves with nobody waiting.
 */
#include "ks_gate.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ks_assert.h"
#include "ks_clock.h"
#include "ks_hmap.h"

typedef struct waiter {
        pthread_cond_t cv;
        bool admitted;
        struct waiter *next;
} waiter;

typedef struct entry {
        char key[KS_GATE_KEY_MAX + 1];
        size_t len;
        int holders, waiting;
        waiter *head, *tail;
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

/* Takes waiter w out of e's queue (it gave up). Under mu. */
static void unlink_waiter(entry *e, waiter *w)
{
        waiter **p = &e->head, *prev = NULL;

        while (*p != NULL && *p != w) {
                prev = *p;
                p = &(*p)->next;
        }
        KS_ASSERT(*p == w);
        *p = w->next;
        if (e->tail == w) {
                e->tail = prev;
        }
        e->waiting--;
}

/* Gives e's slot back when nobody holds or waits. Under mu. */
static void release_if_idle(ks_gate *g, uint32_t i)
{
        entry *e = &g->entries[i];

        if (e->holders == 0 && e->waiting == 0) {
                ks_hmap_remove(&g->map, i);
                e->len = 0;
                e->next_free = g->free_head;
                g->free_head = i;
        }
}

static struct timespec abs_of(int64_t deadline_unix_ms)
{
        struct timespec ts;

        ts.tv_sec = (time_t)(deadline_unix_ms / 1000);
        ts.tv_nsec = (long)(deadline_unix_ms % 1000) * 1000000L;
        return ts;
}

int ks_gate_enter(ks_gate *g, const char *key, int64_t deadline_unix_ms, bool *held, bool *waited)
{
        size_t len = strlen(key);
        uint64_t h;
        int rc = KS_OK;

        *held = *waited = false;
        if (len > KS_GATE_KEY_MAX) {
                return KS_OK;
        }
        pthread_mutex_lock(&g->mu);
        uint32_t i = find(g, key, len, &h);
        if (i == KS_HMAP_NONE) {
                if (g->free_head == KS_HMAP_NONE) {
                        pthread_mutex_unlock(&g->mu); /* full: through, ungated */
                        return KS_OK;
                }
                i = g->free_head;
                g->free_head = g->entries[i].next_free;
                entry *n = &g->entries[i];
                memcpy(n->key, key, len + 1);
                n->len = len;
                n->holders = n->waiting = 0;
                n->head = n->tail = NULL;
                ks_hmap_insert(&g->map, i, h);
        }
        entry *e = &g->entries[i];
        if (e->holders < g->width && e->head == NULL) {
                e->holders++;
                *held = true;
                pthread_mutex_unlock(&g->mu);
                return KS_OK;
        }
        *waited = true;
        waiter w = {.admitted = false, .next = NULL};
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_REALTIME); /* deadlines are wall-clock */
        pthread_cond_init(&w.cv, &ca);
        pthread_condattr_destroy(&ca);
        if (e->tail != NULL) {
                e->tail->next = &w;
        } else {
                e->head = &w;
        }
        e->tail = &w;
        e->waiting++;
        struct timespec until = abs_of(deadline_unix_ms);
        while (!w.admitted) {
                int wr = deadline_unix_ms > 0 ? pthread_cond_timedwait(&w.cv, &g->mu, &until)
                                              : pthread_cond_wait(&w.cv, &g->mu);
                if (wr == ETIMEDOUT && !w.admitted) {
                        unlink_waiter(e, &w);
                        release_if_idle(g, i);
                        rc = KS_DEADLINE_EXCEEDED;
                        break;
                }
        }
        *held = w.admitted;
        pthread_mutex_unlock(&g->mu);
        pthread_cond_destroy(&w.cv);
        return rc;
}

void ks_gate_leave(ks_gate *g, const char *key)
{
        size_t len = strlen(key);
        uint64_t h;

        pthread_mutex_lock(&g->mu);
        uint32_t i = find(g, key, len, &h);
        KS_ASSERT(i != KS_HMAP_NONE && g->entries[i].holders > 0);
        entry *e = &g->entries[i];
        e->holders--;
        while (e->holders < g->width && e->head != NULL) {
                waiter *w = e->head; /* its place, before it wakes: nobody barges */
                e->head = w->next;
                if (e->head == NULL) {
                        e->tail = NULL;
                }
                e->waiting--;
                e->holders++;
                w->admitted = true;
                pthread_cond_signal(&w->cv);
        }
        release_if_idle(g, i);
        pthread_mutex_unlock(&g->mu);
}

void ks_gate_count(ks_gate *g, const char *key, int *holders, int *waiters)
{
        uint64_t h;

        pthread_mutex_lock(&g->mu);
        uint32_t i = find(g, key, strlen(key), &h);
        *holders = i != KS_HMAP_NONE ? g->entries[i].holders : 0;
        *waiters = i != KS_HMAP_NONE ? g->entries[i].waiting : 0;
        pthread_mutex_unlock(&g->mu);
}
