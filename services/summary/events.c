/*
 * Remote invalidation: every replica subscribes to "users.admin_summary"
 * (published by auth after each committed admin write) on every broker. For
 * each event it evicts the tenant's local entry and INCRs the tenant's
 * generation in Redis, so that every replica, and the shared level, stop
 * serving what was cached before: a read compares the generation first.
 * Every replica bumps (one INCR each): any bump invalidates, more are
 * harmless, and no replica depends on another having heard the event.
 *
 * Pub/sub may drop an event: the TTL is the floor. If the INCR fails (Redis
 * down), the local cache is emptied as a whole (the epoch moves), reads go
 * to PostgreSQL until Redis answers again, and the bump is retried on every
 * poll until it succeeds (a bounded list: past PENDING_MAX tenants the
 * oldest are dropped and the TTL bounds them), so a value cached before the
 * outage is not served after it.
 */
#include "summary.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keelson/auth/v1/events.pb-c.h"
#include "ks_log.h"

#define EVENTS_POLL_MS 200
#define TOPIC          "users.admin_summary"
#define PENDING_MAX    1024

/* Bumps that failed, retried by the listener thread alone. */
typedef struct pending {
        char tenant[PENDING_MAX][SM_TENANT_LEN + 1];
        size_t n;
} pending;

/* The tenant: the envelope's, else the payload's. */
static bool tenant_of(const Keelson__Events__V1__Event *ev, char out[SM_TENANT_LEN + 1])
{
        Keelson__Auth__V1__AdminSummaryChanged *m;
        bool ok = false;

        if (sm_uuid_valid(ev->tenant_id)) {
                memcpy(out, ev->tenant_id, SM_TENANT_LEN + 1);
                return true;
        }
        m = keelson__auth__v1__admin_summary_changed__unpack(NULL, ev->payload.len,
                                                             ev->payload.data);
        if (m != NULL && sm_uuid_valid(m->tenant_id)) {
                memcpy(out, m->tenant_id, SM_TENANT_LEN + 1);
                ok = true;
        }
        keelson__auth__v1__admin_summary_changed__free_unpacked(m, NULL);
        return ok;
}

static void pending_add(pending *p, const char *tenant)
{
        for (size_t i = 0; i < p->n; i++) {
                if (strcmp(p->tenant[i], tenant) == 0) {
                        return;
                }
        }
        if (p->n == PENDING_MAX) {
                memmove(p->tenant[0], p->tenant[1], (PENDING_MAX - 1) * sizeof(p->tenant[0]));
                p->n--;
        }
        memcpy(p->tenant[p->n++], tenant, SM_TENANT_LEN + 1);
}

/* Retries the failed bumps in order; stops at the first failure (Redis still down). */
static void pending_retry(sm_service *svc, sm_redis *r, pending *p)
{
        size_t done = 0;

        while (done < p->n && sm_redis_bump(r, p->tenant[done]) == 0) {
                done++;
        }
        if (done > 0) {
                memmove(p->tenant[0], p->tenant[done], (p->n - done) * sizeof(p->tenant[0]));
                p->n -= done;
                atomic_fetch_add(&svc->redis_epoch, 1);
                ks_log_info(NULL, "generations bumped after Redis returned", "{s:i}", "tenants",
                            (int)done);
        }
}

static void handle(sm_service *svc, sm_redis *r, pending *p, const Keelson__Events__V1__Event *ev)
{
        char tenant[SM_TENANT_LEN + 1];

        if (strcmp(ev->topic, TOPIC) != 0 || !tenant_of(ev, tenant)) {
                return;
        }
        ks_counter_inc(svc->m.invalidations);
        sm_local_evict(&svc->local, tenant);
        if (sm_redis_bump(r, tenant) != 0) {
                ks_counter_inc(svc->m.redis_errors);
                atomic_fetch_add(&svc->redis_epoch, 1);
                ks_log_warn(NULL, "generation not bumped: Redis unavailable", "{s:s}", "tenant_id",
                            tenant);
                pending_add(p, tenant);
        }
}

static void *events_main(void *arg)
{
        sm_service *svc = arg;
        sm_redis r = {.opts = &svc->redis};
        pending *p = svc->pending;

        while (!atomic_load(&svc->stop)) {
                Keelson__Events__V1__Event *ev = NULL;
                int rc = ks_subscriber_next(svc->sub, EVENTS_POLL_MS, &ev);
                if (rc == KS_OK) {
                        handle(svc, &r, p, ev);
                        keelson__events__v1__event__free_unpacked(ev, NULL);
                } else if (rc != KS_DEADLINE_EXCEEDED) {
                        /* A socket error, not a quiet bus: do not spin on it. */
                        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
                }
                if (p->n > 0) {
                        pending_retry(svc, &r, p);
                }
        }
        sm_redis_fini(&r);
        return NULL;
}

int sm_events_start(sm_service *svc, const char *const *brokers, int n)
{
        const char *prefixes[1] = {TOPIC};

        if ((svc->pending = calloc(1, sizeof(pending))) == NULL) {
                return -1;
        }
        if (ks_subscriber_new(&svc->sub, brokers, n, prefixes, 1) != KS_OK) {
                return -1;
        }
        atomic_store(&svc->stop, false);
        if (pthread_create(&svc->events_thread, NULL, events_main, svc) != 0) {
                ks_subscriber_free(svc->sub);
                svc->sub = NULL;
                return -1;
        }
        svc->events_started = true;
        return 0;
}

void sm_events_stop(sm_service *svc)
{
        if (svc->events_started) {
                atomic_store(&svc->stop, true);
                pthread_join(svc->events_thread, NULL);
                svc->events_started = false;
        }
        ks_subscriber_free(svc->sub);
        svc->sub = NULL;
        free(svc->pending);
        svc->pending = NULL;
}
