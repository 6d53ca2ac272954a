/*
 * The per-replica cache level: at most n tenants (KEELSON_SUMMARY_LOCAL_MAX)
 * in a fixed array, found through a ks_hmap by tenant id, the least recently
 * used tenant evicted for a new one (ks_lru). This is a cache: an entry that
 * is gone is a miss, answered by Redis or PostgreSQL. One mutex: an entry is
 * copied in or out (about 1.7 KB, most of it billing's lists of currencies),
 * far shorter than anything else a request does. Each entry keeps its own
 * expiry: a value without billing's figures lives shorter (summary.h).
 */
#include "summary.h"

#include <stdlib.h>
#include <string.h>

#define NONE KS_HMAP_NONE

int64_t sm_value_ttl_ms(const sm_counts *c, int64_t ttl_ms, int64_t partial_ttl_ms)
{
        return c->billing.available ? ttl_ms : partial_ttl_ms;
}

int sm_local_init(sm_local *l, size_t n)
{
        memset(l, 0, sizeof(*l));
        if (n < 1 || n > KS_LRU_SLOTS_MAX) {
                return -1;
        }
        l->n = n;
        l->slots = calloc(n, sizeof(*l->slots));
        if (l->slots == NULL || ks_hmap_init(&l->by_tenant, (uint32_t)n) != 0 ||
            ks_lru_init(&l->lru, (uint32_t)n) != 0) {
                ks_hmap_fini(&l->by_tenant);
                free(l->slots);
                l->slots = NULL;
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
        ks_lru_fini(&l->lru);
        ks_hmap_fini(&l->by_tenant);
        free(l->slots);
        l->slots = NULL;
}

/* The tenant's slot or NONE; called locked. */
static uint32_t find(const sm_local *l, const char *tenant, uint64_t h)
{
        for (uint32_t i = ks_hmap_first(&l->by_tenant, h); i != NONE;
             i = ks_hmap_next(&l->by_tenant, i)) {
                if (strcmp(l->slots[i].tenant, tenant) == 0) {
                        return i;
                }
        }
        return NONE;
}

static uint64_t hash_of(const sm_local *l, const char *tenant)
{
        return ks_hmap_hash(&l->by_tenant, tenant, strnlen(tenant, SM_TENANT_LEN));
}

bool sm_local_get(sm_local *l, const char *tenant, int64_t gen, uint64_t epoch, int64_t now_ms,
                  sm_counts *out)
{
        uint64_t h = hash_of(l, tenant);
        bool hit = false;

        pthread_mutex_lock(&l->mu);
        uint32_t i = find(l, tenant, h);
        if (i != NONE) {
                const sm_local_entry *e = &l->slots[i];
                hit = e->gen == gen && e->epoch == epoch && now_ms < e->expires_ms;
                ks_lru_touch(&l->lru, i);
        }
        if (hit) {
                *out = l->slots[i].counts;
        }
        pthread_mutex_unlock(&l->mu);
        return hit;
}

/* A slot for a tenant not in the cache, evicting the least recently used one; locked. */
static uint32_t take_slot(sm_local *l, uint64_t h)
{
        bool evicted;
        uint32_t i = ks_lru_take(&l->lru, &evicted);
        if (evicted) {
                ks_hmap_remove(&l->by_tenant, i);
        }
        ks_hmap_insert(&l->by_tenant, i, h);
        return i;
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
        uint64_t h = hash_of(l, tenant);

        if (ttl_ms <= 0) {
                return; /* a value not to be stored (sm_value_ttl_ms) */
        }

        pthread_mutex_lock(&l->mu);
        uint32_t i = find(l, tenant, h);
        if (i != NONE) {
                const sm_local_entry *e = &l->slots[i];
                bool keep = e->epoch == epoch && e->gen > gen && now_ms < e->expires_ms;
                ks_lru_touch(&l->lru, i);
                if (keep) {
                        pthread_mutex_unlock(&l->mu);
                        return;
                }
        } else {
                i = take_slot(l, h);
        }
        sm_local_entry *e = &l->slots[i];
        memcpy(e->tenant, tenant, SM_TENANT_LEN);
        e->tenant[SM_TENANT_LEN] = '\0';
        e->gen = gen;
        e->epoch = epoch;
        e->expires_ms = c->computed_ms + ttl_ms;
        e->counts = *c;
        pthread_mutex_unlock(&l->mu);
}

void sm_local_evict(sm_local *l, const char *tenant)
{
        uint64_t h = hash_of(l, tenant);

        pthread_mutex_lock(&l->mu);
        uint32_t i = find(l, tenant, h);
        if (i != NONE) {
                ks_hmap_remove(&l->by_tenant, i);
                ks_lru_release(&l->lru, i);
        }
        pthread_mutex_unlock(&l->mu);
}
