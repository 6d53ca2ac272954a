/*
 * Housekeeping: a thread that deletes expired and revoked sessions, old reset
 * tokens and request records past the deduplication horizon (see migration
 * 003), every KEELSON_AUTH_HOUSEKEEPING_S. Every replica runs it; deleting
 * twice is harmless. Each call deletes a bounded batch per table and the
 * pass stops after PASSES_MAX calls, so a backlog is worked off over several
 * intervals rather than in one long transaction.
 */
#include "auth.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ks_log.h"

#define SESSION_KEEP_S 86400 /* a day after expiry or revocation: still explains a 401 */
#define REQUEST_KEEP_S 86400 /* the deduplication horizon of request ids */
#define BATCH          1000
#define PASSES_MAX     100

static const char sql_housekeeping[] = "SELECT auth.housekeeping($1::int, $2::int, $3::int)";

struct auth_housekeeper {
        auth_service *svc;
        int interval_s;
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool stop;
};

/* One pass: calls until a call deletes nothing, at most PASSES_MAX times. */
static void sweep(auth_service *svc)
{
        char keep_s[16], req_s[16], batch[16];
        const char *params[3] = {keep_s, req_s, batch};
        long deleted = 0;

        snprintf(keep_s, sizeof(keep_s), "%d", SESSION_KEEP_S);
        snprintf(req_s, sizeof(req_s), "%d", REQUEST_KEEP_S);
        snprintf(batch, sizeof(batch), "%d", BATCH);
        for (int i = 0; i < PASSES_MAX; i++) {
                PGresult *res = NULL;
                long n;

                if (auth_db_exec_once(svc, NULL, sql_housekeeping, 3, params, &res) != KS_OK) {
                        return; /* logged by ks_pg_exec; the next interval tries again */
                }
                n = strtol(PQgetvalue(res, 0, 0), NULL, 10);
                PQclear(res);
                deleted += n;
                if (n == 0) {
                        break;
                }
        }
        if (deleted > 0) {
                ks_log_info(NULL, "housekeeping deleted stale rows", "{s:i}", "rows", (int)deleted);
        }
}

static void *housekeeper_main(void *arg)
{
        auth_housekeeper *h = arg;
        struct timespec until;

        pthread_mutex_lock(&h->mu);
        while (!h->stop) {
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += h->interval_s;
                while (!h->stop && pthread_cond_timedwait(&h->cv, &h->mu, &until) != ETIMEDOUT) {
                }
                if (h->stop) {
                        break;
                }
                pthread_mutex_unlock(&h->mu);
                sweep(h->svc);
                pthread_mutex_lock(&h->mu);
        }
        pthread_mutex_unlock(&h->mu);
        return NULL;
}

int auth_housekeeper_start(auth_housekeeper **out, auth_service *svc, int interval_s)
{
        auth_housekeeper *h;

        *out = NULL;
        if (interval_s < 1 || (h = calloc(1, sizeof(*h))) == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        h->svc = svc;
        h->interval_s = interval_s;
        pthread_mutex_init(&h->mu, NULL);
        pthread_cond_init(&h->cv, NULL);
        if (pthread_create(&h->thread, NULL, housekeeper_main, h) != 0) {
                pthread_cond_destroy(&h->cv);
                pthread_mutex_destroy(&h->mu);
                free(h);
                return KS_INTERNAL;
        }
        *out = h;
        return KS_OK;
}

void auth_housekeeper_stop(auth_housekeeper *h)
{
        if (h == NULL) {
                return;
        }
        pthread_mutex_lock(&h->mu);
        h->stop = true;
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->thread, NULL);
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        free(h);
}
