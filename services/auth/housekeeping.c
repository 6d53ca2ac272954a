/*
 * Housekeeping: a thread that deletes expired and revoked sessions, old reset
 * tokens and request records past the deduplication horizon (see migration
 * 003), every KEELSON_AUTH_HOUSEKEEPING_S. Every replica runs it; deleting
 * twice is harmless. Each call deletes a bounded batch per table and the
 * pass stops after PASSES_MAX calls, so a backlog is worked off over several
 * intervals rather than in one long transaction.
 */
#include "auth.h"

#include <stdio.h>
#include <stdlib.h>

#include "ks_log.h"
#include "ks_ticker.h"

#define SESSION_KEEP_S 86400 /* a day after expiry or revocation: still explains a 401 */
#define REQUEST_KEEP_S 86400 /* the deduplication horizon of request ids */
#define BATCH          1000
#define PASSES_MAX     100

static const char sql_housekeeping[] = "SELECT auth.housekeeping($1::int, $2::int, $3::int)";

struct auth_housekeeper {
        auth_service *svc;
        ks_ticker *ticker;
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

/* One pass per interval; the first one interval after start. */
static ks_ticker_next housekeeping_step(void *arg)
{
        auth_housekeeper *h = arg;
        sweep(h->svc);
        return KS_TICKER_REST;
}

int auth_housekeeper_start(auth_housekeeper **out, auth_service *svc, int interval_s)
{
        auth_housekeeper *h;

        *out = NULL;
        if (interval_s < 1 || (h = calloc(1, sizeof(*h))) == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        h->svc = svc;
        ks_ticker_options o = {.name = "housekeeping",
                               .interval_ms = (int64_t)interval_s * 1000,
                               .step_at_start = false,
                               .step = housekeeping_step,
                               .arg = h};
        int rc = ks_ticker_start(&h->ticker, &o);
        if (rc != KS_OK) {
                free(h);
                return rc;
        }
        *out = h;
        return KS_OK;
}

void auth_housekeeper_stop(auth_housekeeper *h)
{
        if (h == NULL) {
                return;
        }
        ks_ticker_stop(h->ticker);
        free(h);
}
