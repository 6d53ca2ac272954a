/*
 * Gathering a tenant's concurrent CreateTransfers batches into one
 * transaction (KEELSON_LEDGER_GROUP_BATCHES).
 *
 * A tenant's batches run one at a time whatever happens (its clock row,
 * db.c), so concurrent small batches of one tenant queue, each paying a
 * whole transaction for a few events. Here they queue inside the replica
 * instead, and the batches that arrived while one ran go together in the
 * next transaction: flat combining. Per tenant:
 *
 *   - a batch that finds its tenant idle leads: it runs at once, alone;
 *   - a batch that finds it busy waits in the tenant's queue;
 *   - a leader that finishes wakes the batches it ran, and makes the first
 *     one still waiting the next leader, which takes itself and whoever
 *     waits behind it, as many as fit in one batch (KEELSON_LEDGER_BATCH_MAX
 *     events, GROUP_MAX batches), and runs them together.
 *
 * Each thread runs only groups it belongs to, so nobody's reply waits for
 * batches that came after it. A waiting batch holds no PostgreSQL
 * connection. The batches of a group keep their own results, their own
 * linked chains and their order (transfers.c runs the state machine once
 * per batch, in arrival order, on one loaded state), so each gets what it
 * would have got running alone right after the one before it.
 */
#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_hmap.h"
#include "ks_lru.h"

/*
 * Tenants with a queue at once. Each queue belongs to the batches queued or
 * running in it, at most one per RPC worker (KEELSON_LEDGER_WORKERS is at
 * most 64), so this is never reached; if it were, the batch is refused
 * (resource_exhausted) rather than the table grown.
 */
#define TENANTS_MAX 256

typedef struct tenant_queue {
        char tenant[LG_TENANT_LEN + 1];
        bool busy; /* a leader runs */
        int users; /* members queued or running: the queue lives while > 0 */
        lg_member *head, *tail;
} tenant_queue;

struct lg_groups {
        pthread_mutex_t mu;
        tenant_queue queues[TENANTS_MAX];
        ks_hmap by_tenant;
        ks_lru slots; /* hands out and takes back queues; a live one is never evicted */
};

int lg_groups_new(lg_groups **out)
{
        lg_groups *g = calloc(1, sizeof(*g));

        *out = NULL;
        if (g == NULL) {
                return -1;
        }
        if (ks_hmap_init(&g->by_tenant, TENANTS_MAX) != 0 ||
            ks_lru_init(&g->slots, TENANTS_MAX) != 0 || pthread_mutex_init(&g->mu, NULL) != 0) {
                ks_lru_fini(&g->slots);
                ks_hmap_fini(&g->by_tenant);
                free(g);
                return -1;
        }
        *out = g;
        return 0;
}

void lg_groups_free(lg_groups *g)
{
        if (g == NULL) {
                return;
        }
        ks_lru_fini(&g->slots);
        ks_hmap_fini(&g->by_tenant);
        pthread_mutex_destroy(&g->mu);
        free(g);
}

/* The tenant's queue, or NULL; called locked. */
static tenant_queue *queue_find(lg_groups *g, const char *tenant, uint64_t h)
{
        for (uint32_t i = ks_hmap_first(&g->by_tenant, h); i != KS_HMAP_NONE;
             i = ks_hmap_next(&g->by_tenant, i)) {
                if (strcmp(g->queues[i].tenant, tenant) == 0) {
                        return &g->queues[i];
                }
        }
        return NULL;
}

static uint64_t hash_of(const lg_groups *g, const char *tenant)
{
        return ks_hmap_hash(&g->by_tenant, tenant, strlen(tenant));
}

/* The tenant's queue, created if needed, with one more user; called locked. */
static tenant_queue *queue_join(lg_groups *g, const char *tenant)
{
        uint64_t h = hash_of(g, tenant);
        tenant_queue *q = queue_find(g, tenant, h);

        if (q == NULL) {
                bool evicted;
                if (ks_lru_full(&g->slots)) {
                        return NULL;
                }
                uint32_t i = ks_lru_take(&g->slots, &evicted);
                KS_ASSERT(!evicted);
                q = &g->queues[i];
                *q = (tenant_queue){.busy = false};
                snprintf(q->tenant, sizeof(q->tenant), "%s", tenant);
                ks_hmap_insert(&g->by_tenant, i, h);
        }
        q->users++;
        return q;
}

/* One user fewer; the last one frees the queue. Called locked. */
static void queue_leave(lg_groups *g, tenant_queue *q)
{
        if (--q->users > 0 || q->busy) {
                return;
        }
        KS_ASSERT(q->head == NULL);
        uint32_t i = (uint32_t)(q - g->queues);
        ks_hmap_remove(&g->by_tenant, i);
        ks_lru_release(&g->slots, i);
}

static lg_member *pop(tenant_queue *q)
{
        lg_member *m = q->head;

        q->head = m->next;
        if (q->head == NULL) {
                q->tail = NULL;
        }
        m->next = NULL;
        return m;
}

int lg_group_run(lg_service *svc, const char *tenant, lg_member *me, lg_group_fn fn)
{
        lg_groups *g = svc->groups;
        lg_member *group[LG_GROUP_MAX];
        int k = 0, total;

        me->done = false;
        me->lead = false;
        me->next = NULL;
        if (pthread_cond_init(&me->cv, NULL) != 0) {
                return KS_RESOURCE_EXHAUSTED;
        }
        pthread_mutex_lock(&g->mu);
        tenant_queue *q = queue_join(g, tenant);
        if (q == NULL) {
                pthread_mutex_unlock(&g->mu);
                pthread_cond_destroy(&me->cv);
                return KS_RESOURCE_EXHAUSTED;
        }
        if (!q->busy) {
                q->busy = true;
                me->lead = true;
        } else {
                if (q->tail != NULL) {
                        q->tail->next = me;
                } else {
                        q->head = me;
                }
                q->tail = me;
                while (!me->done && !me->lead) {
                        pthread_cond_wait(&me->cv, &g->mu);
                }
        }
        if (me->done) { /* a leader ran this batch with its own */
                queue_leave(g, q);
                pthread_mutex_unlock(&g->mu);
                pthread_cond_destroy(&me->cv);
                return me->rc;
        }
        /* Leading: this batch, then the ones waiting behind it that fit. */
        if (q->head == me) {
                pop(q);
        }
        group[k++] = me;
        total = me->n;
        while (q->head != NULL && k < LG_GROUP_MAX && total + q->head->n <= svc->batch_max) {
                total += q->head->n;
                group[k++] = pop(q);
        }
        pthread_mutex_unlock(&g->mu);

        fn(svc, tenant, group, k);

        pthread_mutex_lock(&g->mu);
        for (int i = 1; i < k; i++) {
                group[i]->done = true;
                pthread_cond_signal(&group[i]->cv);
        }
        if (q->head != NULL) {
                q->head->lead = true; /* stays busy: the next group has its leader */
                pthread_cond_signal(&q->head->cv);
        } else {
                q->busy = false;
        }
        queue_leave(g, q);
        pthread_mutex_unlock(&g->mu);
        pthread_cond_destroy(&me->cv);
        return me->rc;
}

int lg_group_waiting(lg_service *svc, const char *tenant)
{
        lg_groups *g = svc->groups;
        int n = 0;

        pthread_mutex_lock(&g->mu);
        tenant_queue *q = queue_find(g, tenant, hash_of(g, tenant));
        for (const lg_member *m = q != NULL ? q->head : NULL; m != NULL; m = m->next) {
                n++;
        }
        pthread_mutex_unlock(&g->mu);
        return n;
}
