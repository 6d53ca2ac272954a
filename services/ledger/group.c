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

#define BUCKETS 64

typedef struct tenant_queue {
        char tenant[LG_TENANT_LEN + 1];
        bool busy; /* a leader runs */
        int users; /* members queued or running: the queue lives while > 0 */
        lg_member *head, *tail;
        struct tenant_queue *next;
} tenant_queue;

struct lg_groups {
        pthread_mutex_t mu;
        tenant_queue *buckets[BUCKETS];
};

int lg_groups_new(lg_groups **out)
{
        lg_groups *g = calloc(1, sizeof(*g));

        *out = NULL;
        if (g == NULL || pthread_mutex_init(&g->mu, NULL) != 0) {
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
        for (int i = 0; i < BUCKETS; i++) {
                tenant_queue *q = g->buckets[i];
                while (q != NULL) {
                        tenant_queue *next = q->next;
                        free(q);
                        q = next;
                }
        }
        pthread_mutex_destroy(&g->mu);
        free(g);
}

static unsigned bucket_of(const char *tenant)
{
        unsigned h = 2166136261u;
        for (const unsigned char *p = (const unsigned char *)tenant; *p != '\0'; p++) {
                h = (h ^ *p) * 16777619u;
        }
        return h % BUCKETS;
}

/* The tenant's queue, created if needed, with one more user; called locked. */
static tenant_queue *queue_join(lg_groups *g, const char *tenant)
{
        unsigned b = bucket_of(tenant);
        tenant_queue *q = g->buckets[b];

        while (q != NULL && strcmp(q->tenant, tenant) != 0) {
                q = q->next;
        }
        if (q == NULL) {
                if ((q = calloc(1, sizeof(*q))) == NULL) {
                        return NULL;
                }
                snprintf(q->tenant, sizeof(q->tenant), "%s", tenant);
                q->next = g->buckets[b];
                g->buckets[b] = q;
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
        tenant_queue **at = &g->buckets[bucket_of(q->tenant)];
        while (*at != q) {
                at = &(*at)->next;
        }
        *at = q->next;
        free(q);
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
        tenant_queue *q = g->buckets[bucket_of(tenant)];
        while (q != NULL && strcmp(q->tenant, tenant) != 0) {
                q = q->next;
        }
        for (const lg_member *m = q != NULL ? q->head : NULL; m != NULL; m = m->next) {
                n++;
        }
        pthread_mutex_unlock(&g->mu);
        return n;
}
