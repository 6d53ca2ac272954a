/*
 * The applier: stored events still pending, applied to billing, at least
 * once, on a ticker thread of every replica (KEELSON_WEBHOOK_APPLY).
 *
 * A step claims a batch of pending events that are due, as
 * keelson_webhook_worker, with FOR UPDATE SKIP LOCKED: replicas share the
 * work, and an event is in one replica's hands at a time. For each it
 * reads what billing needs from the Stripe event (stripe.c) and calls
 * BillingService/ApplyProviderEvent as the tenant's owner; billing applies
 * it once by the provider's event id, so a replica that dies after billing
 * applied an event and before this transaction marked it leaves it pending,
 * and the next application is answered "duplicate". The outcomes, in the
 * same transaction that claimed them:
 *
 *   billing applied it, or had (applied, duplicate, no_change)   applied
 *   billing acts on nothing in it (ignored), or it is stale      ignored
 *   a refusal a retry cannot change (not_found, invalid_argument,
 *     failed_precondition, ...), or KEELSON_WEBHOOK_APPLY_ATTEMPTS_MAX
 *     failures                                                    failed
 *   anything else (billing unavailable, slow, a conflict)         pending,
 *     again after 1 s, doubling to 5 min, with jitter
 *
 * last_error keeps what billing said (its outcome and detail, or its code
 * and message). A replica that stores a pending event wakes its own
 * applier; the others find their events by polling.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keelson/billing/v1/billing.pb-c.h"
#include "ks_clock.h"
#include "ks_crypto.h"
#include "ks_log.h"
#include "ks_ticker.h"
#include "stripe.h"
#include "webhook.h"

#define BILLING_METHOD   "keelson.billing.v1.BillingService/ApplyProviderEvent"
#define BACKOFF_FIRST_MS 1000
#define BACKOFF_MAX_MS   300000
#define ERROR_MAX        600

struct wh_applier {
        wh_service *svc;
        ks_ticker *ticker;
        ks_rpc_client *billing;
};

/*
 * "Now" as a subquery, evaluated once, bounds the scan of received_pending:
 * webhook.now_ms() is volatile, and written bare it is a filter that reads
 * every pending event when none is due (services/ledger/expiry.c, the same).
 */
static const char sql_claim[] =
    "SELECT tenant_id, id, provider, provider_event_id, type, body, attempts"
    " FROM webhook.received_events WHERE status = 1"
    " AND next_attempt_ms <= (SELECT webhook.now_ms())"
    " ORDER BY next_attempt_ms LIMIT $1::int4 FOR UPDATE SKIP LOCKED";

static const char sql_mark[] =
    "UPDATE webhook.received_events SET status = $3::int2, attempts = attempts + 1,"
    " last_error = $4, next_attempt_ms = CASE WHEN $3::int2 = 1 THEN webhook.now_ms() + $5::int8"
    " END, applied_ms = CASE WHEN $3::int2 IN (2, 3) THEN webhook.now_ms() END"
    " WHERE tenant_id = $1::uuid AND id = $2::uuid RETURNING received_ms";

typedef struct verdict {
        int status; /* keelson.webhook.v1.ReceivedStatus */
        char error[ERROR_MAX];
        int64_t retry_in_ms;
} verdict;

/* ---- one event ------------------------------------------------------------------------ */

static bool permanent(int code)
{
        switch (code) {
        case KS_INVALID_ARGUMENT:
        case KS_NOT_FOUND:
        case KS_FAILED_PRECONDITION:
        case KS_OUT_OF_RANGE:
        case KS_PERMISSION_DENIED:
        case KS_UNIMPLEMENTED:
        case KS_UNAUTHENTICATED:
                return true;
        default:
                return false;
        }
}

static int64_t backoff_ms(int64_t attempts)
{
        int64_t ms = BACKOFF_FIRST_MS;

        for (int64_t i = 1; i < attempts && ms < BACKOFF_MAX_MS; i++) {
                ms *= 2;
        }
        ms = ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
        uint32_t r = 0;
        if (ks_random_bytes(&r, sizeof(r)) != 0) {
                r = 0; /* no jitter this time */
        }
        return ms / 2 + (int64_t)(r % (uint32_t)(ms / 2 + 1)); /* [ms/2, ms]: replicas spread out */
}

static void judge(const wh_applier *a, int code, const ks_rpc_result *res, int64_t attempts,
                  verdict *v)
{
        if (code == KS_OK) {
                Keelson__Billing__V1__ApplyProviderEventResponse *r =
                    keelson__billing__v1__apply_provider_event_response__unpack(
                        NULL, res->payload_len, res->payload);
                if (r == NULL) {
                        code = KS_INTERNAL;
                } else {
                        bool ignored =
                            strcmp(r->outcome, "ignored") == 0 || strcmp(r->outcome, "stale") == 0;
                        v->status =
                            ignored
                                ? KEELSON__WEBHOOK__V1__RECEIVED_STATUS__RECEIVED_STATUS_IGNORED
                                : KEELSON__WEBHOOK__V1__RECEIVED_STATUS__RECEIVED_STATUS_APPLIED;
                        snprintf(v->error, sizeof(v->error), "%s: %s", r->outcome, r->detail);
                        keelson__billing__v1__apply_provider_event_response__free_unpacked(r, NULL);
                        return;
                }
        }
        snprintf(v->error, sizeof(v->error), "billing: %s: %.500s", ks_code_name(code),
                 res->message);
        if (permanent(code) || attempts + 1 >= a->svc->cfg->apply_attempts_max) {
                v->status = KEELSON__WEBHOOK__V1__RECEIVED_STATUS__RECEIVED_STATUS_FAILED;
        } else {
                v->status = KEELSON__WEBHOOK__V1__RECEIVED_STATUS__RECEIVED_STATUS_PENDING;
                v->retry_in_ms = backoff_ms(attempts + 1);
        }
}

/* Applies one claimed row (sql_claim's columns) and says what became of it. */
static void apply_one(wh_applier *a, const PGresult *res, int row, verdict *v)
{
        const char *tenant_id = ks_pg_text(res, row, 0), *id = ks_pg_text(res, row, 1);
        int64_t attempts = ks_pg_int(res, row, 6);
        const char *hex = ks_pg_text(res, row, 5);
        size_t cap = strlen(hex) / 2 + 1;
        uint8_t *body = malloc(cap);
        Keelson__Billing__V1__ApplyProviderEventRequest req;
        wh_stripe_event ev;
        char request_id[64];
        ks_rpc_result out;
        int code;

        memset(v, 0, sizeof(*v));
        memset(&out, 0, sizeof(out));
        long n = body != NULL ? ks_pg_bytea_decode(hex, body, cap) : -1;
        if (n < 0 || wh_stripe_read(body, (size_t)n, &ev, &req) != 0) {
                v->status = KEELSON__WEBHOOK__V1__RECEIVED_STATUS__RECEIVED_STATUS_FAILED;
                snprintf(v->error, sizeof(v->error), "%s",
                         n < 0 ? "out of memory" : "not a Stripe event keelson can read");
                free(body);
                return;
        }
        free(body);
        uint8_t buf[4096];
        size_t len = keelson__billing__v1__apply_provider_event_request__get_packed_size(&req);
        if (len > sizeof(buf)) {
                v->status = KEELSON__WEBHOOK__V1__RECEIVED_STATUS__RECEIVED_STATUS_FAILED;
                snprintf(v->error, sizeof(v->error), "the event's fields are too long");
                return;
        }
        len = keelson__billing__v1__apply_provider_event_request__pack(&req, buf);
        /* The tenant's owner: billing.manage. Billing trusts the caller context of its peers. */
        ks_caller as_owner = KEELSON__RPC__V1__CALLER_CONTEXT__INIT;
        as_owner.authenticated = true;
        as_owner.tenant_id = (char *)tenant_id;
        as_owner.role = "owner";
        snprintf(request_id, sizeof(request_id), "apply-%s", id);
        const ks_rpc_call_args args = {
            .method = BILLING_METHOD,
            .request_id = request_id,
            .caller = &as_owner,
            .deadline_unix_ms = ks_now_ms() + a->svc->cfg->billing_timeout_ms,
            .payload = buf,
            .payload_len = len,
            .resend_ms = (int)(a->svc->cfg->billing_timeout_ms / 2), /* applied once: safe */
        };
        code = ks_rpc_call(a->billing, &args, &out);
        judge(a, code, &out, attempts, v);
        ks_rpc_result_clear(&out);
}

/* ---- a step --------------------------------------------------------------------------- */

static void count(wh_applier *a, const verdict *v, int64_t received_ms)
{
        wh_service *svc = a->svc;

        if (v->status >= 0 && v->status < 5 && svc->applied[v->status] != NULL) {
                ks_counter_inc(svc->applied[v->status]);
        }
        if (v->status != KEELSON__WEBHOOK__V1__RECEIVED_STATUS__RECEIVED_STATUS_PENDING) {
                ks_histogram_observe(svc->apply_lag_seconds,
                                     (double)(ks_now_ms() - received_ms) / 1000.0);
        }
}

static int step_in(wh_applier *a, PGconn *conn, int *n_claimed)
{
        ks_pg_num batch = ks_pg_num_of(a->svc->cfg->apply_batch_max);
        const char *p[1] = {batch.s};
        PGresult *claimed = NULL;
        const ks_pg_stmt open[3] = {
            {.sql = "BEGIN"},
            {.sql = "SET LOCAL ROLE keelson_webhook_worker"},
            {.sql = sql_claim, .n_params = 1, .params = p, .out = &claimed}};
        int rc = ks_pg_pipeline(conn, "applier", open, 3);

        if (rc != KS_OK) {
                return rc;
        }
        *n_claimed = PQntuples(claimed);
        for (int r = 0; r < *n_claimed && rc == KS_OK; r++) {
                verdict v;
                PGresult *marked = NULL;
                apply_one(a, claimed, r, &v);
                ks_pg_num status = ks_pg_num_of(v.status), retry = ks_pg_num_of(v.retry_in_ms);
                const char *m[5] = {ks_pg_text(claimed, r, 0), ks_pg_text(claimed, r, 1), status.s,
                                    v.error, retry.s};
                rc = ks_pg_exec(conn, "applier", sql_mark, 5, m, &marked);
                if (rc == KS_OK) {
                        count(a, &v, PQntuples(marked) > 0 ? ks_pg_int(marked, 0, 0) : ks_now_ms());
                }
                PQclear(marked);
        }
        PQclear(claimed);
        return rc == KS_OK ? ks_pg_commit(conn, "applier") : rc;
}

static ks_ticker_next step(void *arg)
{
        wh_applier *a = arg;
        PGconn *conn = NULL;
        int n = 0, rc;

        if ((rc = ks_pg_acquire(a->svc->pool, &conn)) != KS_OK) {
                return KS_TICKER_REST;
        }
        if ((rc = step_in(a, conn, &n)) != KS_OK) {
                ks_pg_rollback(conn);
                ks_log_warn(NULL, "webhook applier step failed", "{s:s}", "code", ks_code_name(rc));
        }
        ks_pg_release(a->svc->pool, conn);
        return rc == KS_OK && n == a->svc->cfg->apply_batch_max ? KS_TICKER_AGAIN : KS_TICKER_REST;
}

int wh_applier_start(wh_applier **out, wh_service *svc, const ks_service_env *env)
{
        wh_applier *a = calloc(1, sizeof(*a));
        int rc;

        *out = NULL;
        if (a == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        a->svc = svc;
        if ((rc = ks_rpc_client_of(&a->billing, env->broker_bases, env->n_brokers, KS_SVC_BILLING,
                                   64, (int)svc->cfg->billing_timeout_ms)) != KS_OK) {
                free(a);
                return rc;
        }
        const ks_ticker_options o = {.name = "applier",
                                     .interval_ms = svc->cfg->apply_poll_ms,
                                     .step_at_start = true,
                                     .step = step,
                                     .arg = a};
        if ((rc = ks_ticker_start(&a->ticker, &o)) != KS_OK) {
                ks_rpc_client_free(a->billing);
                free(a);
                return rc;
        }
        *out = a;
        return KS_OK;
}

void wh_applier_wake(wh_applier *a)
{
        if (a != NULL) {
                ks_ticker_wake(a->ticker);
        }
}

void wh_applier_stop(wh_applier *a)
{
        if (a == NULL) {
                return;
        }
        ks_ticker_stop(a->ticker);
        ks_rpc_client_free(a->billing);
        free(a);
}
