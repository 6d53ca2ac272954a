/*
 * The per-replica cache level: a fixed array of slots, one per hash of the
 * tenant (a collision replaces the older tenant: this is a cache, and the
 * array never grows). One mutex: an entry is a few dozen bytes copied in or
 * out, far shorter than anything else a request does.
 */
#include "summary.h"

#include <stdlib.h>
#include <string.h>

int sm_local_init(sm_local *l, size_t n)
{
        l->n = n;
        l->slots = calloc(n, sizeof(*l->slots));
        if (l->slots == NULL) {
                return -1;
        }
        pthread_mutex_init(&l->mu, NULL);
        return 0;
}

void sm_local_fini(sm_local *l)
{
        if (l->slots == NULL) {
                return;
        }
        pthread_mutex_destroy(&l->mu);
        free(l->slots);
        l->slots = NULL;
}

/* FNV-1a of the tenant id. */
static size_t slot_of(const sm_local *l, const char *tenant)
{
        uint64_t h = 1469598103934665603ull;

        for (const char *p = tenant; *p != '\0'; p++) {
                h ^= (uint8_t)*p;
                h *= 1099511628211ull;
        }
        return (size_t)(h % l->n);
}

bool sm_local_get(sm_local *l, const char *tenant, int64_t gen, uint64_t epoch, int64_t now_ms,
                  int64_t ttl_ms, sm_counts *out)
{
        sm_local_entry *e = &l->slots[slot_of(l, tenant)];
        bool hit;

        pthread_mutex_lock(&l->mu);
        hit = e->used && e->gen == gen && e->epoch == epoch && strcmp(e->tenant, tenant) == 0 &&
              now_ms < e->counts.computed_ms + ttl_ms;
        if (hit) {
                *out = e->counts;
        }
        pthread_mutex_unlock(&l->mu);
        return hit;
}

/*
 * A fresh entry of a newer generation of the same tenant is not replaced by
 * an older one (a slow fill must not push out a faster, newer one). An
 * expired entry is always replaced, whatever its generation: generations
 * may start again at 0 (a Redis that lost its keys without this replica
 * seeing an error), and an old entry of generation N, never asked for again,
 * must not keep the tenant out of this level for good.
 */
void sm_local_put(sm_local *l, const char *tenant, int64_t gen, uint64_t epoch, const sm_counts *c,
                  int64_t now_ms, int64_t ttl_ms)
{
        sm_local_entry *e = &l->slots[slot_of(l, tenant)];
        bool keep;

        pthread_mutex_lock(&l->mu);
        keep = e->used && strcmp(e->tenant, tenant) == 0 && e->epoch == epoch && e->gen > gen &&
               now_ms < e->counts.computed_ms + ttl_ms;
        if (!keep) {
                memcpy(e->tenant, tenant, SM_TENANT_LEN);
                e->tenant[SM_TENANT_LEN] = '\0';
                e->gen = gen;
                e->epoch = epoch;
                e->counts = *c;
                e->used = true;
        }
        pthread_mutex_unlock(&l->mu);
}

void sm_local_evict(sm_local *l, const char *tenant)
{
        sm_local_entry *e = &l->slots[slot_of(l, tenant)];

        pthread_mutex_lock(&l->mu);
        if (e->used && strcmp(e->tenant, tenant) == 0) {
                e->used = false;
        }
        pthread_mutex_unlock(&l->mu);
}
