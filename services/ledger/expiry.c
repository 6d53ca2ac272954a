/*
 * The sweeper: expires pending transfers whose timeout has passed, at its
 * own pace and in bounded batches (TigerBeetle: "don't do things directly
 * in reaction to external events").
 *
 * Correctness does not depend on it. From its expiry time on, a pending
 * transfer refuses post and void (pending_transfer_expired, checked against
 * the batch's timestamp in machine.c); the sweeper only releases the
 * reserved amounts afterwards, as TigerBeetle does ("client requests may
 * observe still-pending balances for expired transfers").
 *
 * One pass: as keelson_ledger_sweeper, which may read nothing but the
 * tenant, state and expiry of pending transfers, find up to
 * expiry_tenants_max tenants with due transfers; then for each tenant, as
 * that tenant, in one transaction: lock the clock (the tenant's batches
 * wait; timestamps for the history rows), pick up to expiry_batch_max due
 * transfers (FOR UPDATE SKIP LOCKED: another replica's sweeper working the
 * same tenant takes other rows), lock their accounts in id order like any
 * batch, release, write, commit. Replicas sweep independently; the clock
 * makes two sweeps of one tenant take turns, and a transfer already
 * resolved is skipped.
 */
#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

#define DUE_SCAN_MAX         10000 /* due rows looked at to find tenants, per pass */
#define TENANTS_PER_PASS_MAX 256

typedef struct tenant_list {
        char (*ids)[LG_TENANT_LEN + 1];
        int n, max;
} tenant_list;

/*
 * "Now" is a subquery, evaluated once, so that it bounds the index scan.
 * clock_timestamp() written into the condition is volatile: a filter that
 * read every pending transfer with a timeout at each pass (50 ms at 100,000
 * of them, none due; 0.2 ms now). The limits are written into the text,
 * which is prepared (ks_pg_pipeline) and planned once.
 */
void lg_expiry_due_tenants_sql(char *out, size_t len, int tenants_max)
{
        snprintf(out, len,
                 "SELECT tenant_id FROM (SELECT tenant_id FROM ledger.pending_transfers"
                 " WHERE status = 1 AND expires_at_ns > 0 AND expires_at_ns <="
                 " (SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::int8)"
                 " ORDER BY expires_at_ns LIMIT %d) s GROUP BY tenant_id LIMIT %d",
                 DUE_SCAN_MAX, tenants_max);
}

static int due_tenants(lg_service *svc, tenant_list *tl)
{
        char sql[512];
        PGconn *conn = NULL;
        PGresult *res = NULL;
        int rc;

        tl->n = 0;
        lg_expiry_due_tenants_sql(sql, sizeof(sql), tl->max);
        const ks_pg_stmt s[3] = {{.sql = "BEGIN READ ONLY"},
                                 {.sql = "SET LOCAL ROLE keelson_ledger_sweeper"},
                                 {.sql = sql, .out = &res}};
        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return rc;
        }
        if ((rc = ks_pg_pipeline(conn, "expiry", s, 3)) == KS_OK) {
                for (int i = 0; i < PQntuples(res) && tl->n < tl->max; i++) {
                        snprintf(tl->ids[tl->n], LG_TENANT_LEN + 1, "%s", PQgetvalue(res, i, 0));
                        tl->n += lg_tenant_valid(tl->ids[tl->n]);
                }
                rc = ks_pg_commit(conn, "expiry");
        }
        if (rc != KS_OK) {
                ks_log_warn(NULL, "expiry: the scan for due tenants failed", "{s:s}", "code",
                            ks_code_name(rc));
                ks_pg_rollback(conn);
        }
        PQclear(res);
        ks_pg_release(svc->pool, conn);
        return rc;
}

static const char sql_due[] =
    "SELECT p.id FROM ledger.pending_transfers p"
    " JOIN LATERAL (SELECT timestamp FROM ledger.transfers"
    "  WHERE tenant_id = p.tenant_id AND id = p.id) t ON true"
    " WHERE p.tenant_id = $1::uuid AND p.status = 1 AND p.expires_at_ns > 0"
    " AND p.expires_at_ns <= $2::int8"
    " ORDER BY p.expires_at_ns, t.timestamp LIMIT $3::int8"
    " FOR UPDATE OF p SKIP LOCKED";

typedef struct expire_job {
        lg_worker *w;
        int limit;
        int expired;
} expire_job;

/* The due ids as pseudo-events that post nothing: only pending_id is set. */
static int due_ids(lg_tx *tx, expire_job *j, int *n)
{
        char now[24], limit[24];
        const char *params[3] = {tx->tenant, now, limit};
        PGresult *res = NULL;
        int rc;

        /* The clock first (an empty lg_run sends only the opening statements): "now". */
        if ((rc = lg_run(tx, NULL, 0, false)) != KS_OK) {
                return rc;
        }
        snprintf(now, sizeof(now), "%llu", (unsigned long long)tx->base_ts);
        snprintf(limit, sizeof(limit), "%d", j->limit);
        if ((rc = lg_exec(tx, sql_due, 3, params, &res)) != KS_OK) {
                return rc;
        }
        *n = 0;
        for (int i = 0; i < PQntuples(res) && *n < j->limit; i++) {
                lg_transfer *ev = &j->w->transfer_events[*n];
                memset(ev, 0, sizeof(*ev));
                if (lg_field_u128_uuid(res, i, 0, &ev->pending_id) != 0) {
                        PQclear(res);
                        return KS_INTERNAL;
                }
                j->w->ids[(*n)++] = ev->pending_id;
        }
        PQclear(res);
        return KS_OK;
}

static int expire_tx(lg_tx *tx, void *arg)
{
        expire_job *j = arg;
        int n = 0, rc;

        j->expired = 0;
        if ((rc = due_ids(tx, j, &n)) != KS_OK || n == 0) {
                return rc;
        }
        if ((rc = lg_load_for_transfers(tx, j->w->batch, j->w->transfer_events, n, true)) !=
            KS_OK) {
                return rc;
        }
        j->expired = lg_expire(j->w->batch, j->w->ids, n, tx->base_ts);
        return lg_write_batch(tx, j->w->batch);
}

int lg_sweep_once(lg_service *svc)
{
        char ids[TENANTS_PER_PASS_MAX][LG_TENANT_LEN + 1];
        tenant_list tl = {.ids = ids, .max = svc->expiry_tenants_max};
        int total = 0;

        if (tl.max > TENANTS_PER_PASS_MAX) {
                tl.max = TENANTS_PER_PASS_MAX; /* the configuration's range says the same */
        }
        if (due_tenants(svc, &tl) != KS_OK) {
                return -1;
        }
        for (int i = 0; i < tl.n; i++) {
                expire_job j = {.w = svc->sweeper_state, .limit = svc->expiry_batch_max};
                lg_tx tx = {
                    .svc = svc, .request_id = "expiry", .tenant = tl.ids[i], .args = &j.w->args};
                int rc = lg_tx_run(&tx, svc->expiry_batch_max, false, expire_tx, &j);
                if (rc != KS_OK) {
                        ks_log_warn(NULL, "expiry: a tenant's sweep failed", "{s:s}", "code",
                                    ks_code_name(rc));
                        continue;
                }
                total += j.expired;
        }
        if (total > 0) {
                ks_counter_add(svc->expired, (uint64_t)total);
                ks_log_info(NULL, "expired pending transfers", "{s:i,s:i}", "transfers", total,
                            "tenants", tl.n);
        }
        return total;
}

/* A full batch means more may be due: go again at once, else rest. */
static ks_ticker_next sweeper_step(void *arg)
{
        lg_service *svc = arg;
        return lg_sweep_once(svc) >= svc->expiry_batch_max ? KS_TICKER_AGAIN : KS_TICKER_REST;
}

int lg_sweeper_start(lg_service *svc)
{
        if (lg_worker_init(svc, -1, &svc->sweeper_state) != 0) {
                return -1;
        }
        ks_ticker_options o = {.name = "expiry",
                               .interval_ms = svc->expiry_interval_ms,
                               .step_at_start = true,
                               .step = sweeper_step,
                               .arg = svc};
        return ks_ticker_start(&svc->sweeper, &o) == KS_OK ? 0 : -1;
}

void lg_sweeper_stop(lg_service *svc)
{
        ks_ticker_stop(svc->sweeper);
        svc->sweeper = NULL;
        lg_worker_fini(svc, svc->sweeper_state);
        svc->sweeper_state = NULL;
}
