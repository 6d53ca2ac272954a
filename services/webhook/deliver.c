/*
 * The delivery worker of a replica (KEELSON_WEBHOOK_DELIVER): two ticker
 * threads and the sender's.
 *
 *   feed    wh_feed_step (feed.c): the sources' outboxes into deliveries.
 *   claims  each step first records the attempts that ended (their
 *           outcomes, queued by the sender's callbacks), then claims due
 *           deliveries and hands them to the sender.
 *
 * A claim is one statement as keelson_webhook_worker: for each enabled
 * subscription, at most KEELSON_WEBHOOK_DELIVERY_DESTINATION_CONCURRENCY of
 * its due deliveries (FOR UPDATE SKIP LOCKED: replicas share the work),
 * leaving out the subscriptions this replica has that many attempts of in
 * flight, so a slow URL never fills the claims. A claimed delivery's
 * next_attempt_ms moves past the longest its attempt can take (the lease):
 * a replica that dies with it in hand leaves it due again then, and the
 * next replica attempts it again (at least once; the webhook-id lets the
 * receiver see the repeat).
 *
 * Each attempt is signed at its own time (webhook-timestamp) with every
 * secret of the subscription still signing (a rotation signs with both).
 * Its outcome:
 *   a 2xx                                 delivered
 *   410 Gone                              failed, and the subscription
 *                                         disabled ("gone")
 *   anything else, while the schedule     pending, after the schedule's next
 *   (KEELSON_WEBHOOK_DELIVERY_RETRY_      wait (retry.c)
 *   SCHEDULE) has waits left
 *   anything else, after the last wait    failed
 * Every attempt goes into the delivery log. A subscription none of whose
 * attempts succeeded for KEELSON_WEBHOOK_DELIVERY_DISABLE_AFTER_S is
 * disabled ("failing"); one success clears the count.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_clock.h"
#include "ks_crypto.h"
#include "ks_log.h"
#include "ks_text.h"
#include "ks_ticker.h"
#include "sender.h"
#include "webhook.h"

#define STEP_RESULTS_MAX 30 /* outcomes recorded per pipeline: two statements each */
#define BUSY_MAX         256
#define LEASE_SLACK_MS   10000
#define RECORD_TRIES_MAX 3
#define PENDING          "1" /* DELIVERY_STATUS_PENDING, as a parameter (sql_record says why) */

/*
 * $1 busy subscriptions, $2 room (at most the batch), $3 lease ms. The limits
 * per subscription and per claim are written into the text (wh_deliverer_start):
 * every statement is planned generically (ks_pg.h), and a parameter's LIMIT
 * is guessed at thousands of rows, which hash-joins the whole of deliveries;
 * a constant one keeps the plan on the primary key however large it grows.
 * And it is planned at each claim (unprepared): a plan prepared while the
 * table was empty would scan it whole until the next ANALYZE. "Now" stays a
 * filter on each subscription's pending deliveries: as a subquery (a bound)
 * it drew the plan of an empty table to deliveries_next_due, every
 * subscription then filtering every due delivery of all of them.
 */
static const char sql_claim_fmt[] =
    "WITH c AS (SELECT d.tenant_id, d.id FROM webhook.subscriptions s CROSS JOIN LATERAL"
    " (SELECT d.tenant_id, d.id FROM webhook.deliveries d WHERE d.tenant_id = s.tenant_id"
    " AND d.subscription_id = s.id AND d.status = 1 AND d.next_attempt_ms <= webhook.now_ms()"
    " ORDER BY d.next_attempt_ms LIMIT %lld FOR UPDATE SKIP LOCKED) d"
    " WHERE s.enabled AND s.id <> ALL ($1::uuid[]) LIMIT %lld),"
    " k AS (SELECT tenant_id, id FROM c LIMIT $2::int4)"
    " UPDATE webhook.deliveries d SET next_attempt_ms = webhook.now_ms() + $3::int8"
    " FROM k, webhook.events e, webhook.subscriptions s"
    " WHERE d.tenant_id = k.tenant_id AND d.id = k.id AND e.tenant_id = d.tenant_id"
    " AND e.id = d.event_id AND s.tenant_id = d.tenant_id AND s.id = d.subscription_id"
    " RETURNING d.tenant_id, d.id, d.subscription_id, d.event_id, d.tries, d.created_ms, s.url,"
    " e.body, (SELECT array_agg(x.secret ORDER BY x.created_ms DESC)"
    " FROM webhook.subscription_secrets x WHERE x.tenant_id = d.tenant_id"
    " AND x.subscription_id = d.subscription_id"
    " AND (x.expires_ms IS NULL OR x.expires_ms > webhook.now_ms()))";

/*
 * Whether any delivery is due: the pending one due first, from
 * deliveries_next_due in its order, prepared (one probe; "due now" cannot be
 * the index's condition, webhook.now_ms() is volatile). No row: none pending.
 * The claim runs only when it is due, so an idle replica does not plan the
 * claim at every step. A due delivery the claim then leaves (its
 * subscription disabled or busy) keeps it true, and the claim runs as it
 * did before the check.
 */
static const char sql_due[] = "SELECT next_attempt_ms <= webhook.now_ms() FROM webhook.deliveries"
                              " WHERE status = 1 ORDER BY next_attempt_ms LIMIT 1";

/*
 * $1 tenant, $2 delivery, $3 status, $4 wait ms, $5 outcome, $6 http status, $7 latency ms,
 * $8 excerpt, $9 detail, $10 last error, $11 PENDING ("1"). Only a delivery still pending (a
 * lease that ran out may have let another replica finish it). "Pending" is a parameter, not
 * the literal 1: a generic plan could then prove "status = 1" and scan the partial index of
 * due deliveries for the tenant (every pending row of it) instead of taking the primary key.
 */
static const char sql_record[] =
    "WITH d AS (UPDATE webhook.deliveries SET status = $3::int2, attempts = attempts + 1,"
    " tries = tries + 1, next_attempt_ms = CASE WHEN $3::int2 = 1"
    " THEN webhook.now_ms() + $4::int8 END,"
    " delivered_ms = CASE WHEN $3::int2 = 2 THEN webhook.now_ms() END,"
    " last_http_status = $6::int4, last_error = $10"
    " WHERE tenant_id = $1::uuid AND id = $2::uuid AND status = $11::int2"
    " RETURNING tenant_id, id, attempts)"
    " INSERT INTO webhook.delivery_attempts (tenant_id, delivery_id, n, at_ms, outcome,"
    " http_status, latency_ms, excerpt, detail)"
    " SELECT tenant_id, id, attempts, webhook.now_ms(), $5, $6::int4, $7::int8, $8, $9 FROM d";

/* An attempt cut short by a stop: due again at once, for whichever replica runs. $3 as
 * sql_record's $11. */
static const char sql_release[] = "UPDATE webhook.deliveries SET next_attempt_ms = webhook.now_ms()"
                                  " WHERE tenant_id = $1::uuid AND id = $2::uuid"
                                  " AND status = $3::int2";

/* $1 tenant, $2 subscription, $3 succeeded, $4 gone (410), $5 disable after s. Touches the row
 * only when something changes. */
static const char sql_health[] =
    "UPDATE webhook.subscriptions SET"
    " failing_since_ms = CASE WHEN $3::bool THEN NULL"
    " ELSE COALESCE(failing_since_ms, webhook.now_ms()) END,"
    " enabled = CASE WHEN $4::bool OR (NOT $3::bool AND failing_since_ms IS NOT NULL"
    " AND failing_since_ms <= webhook.now_ms() - $5::int8 * 1000) THEN false ELSE enabled END,"
    " disabled_reason = CASE WHEN $4::bool THEN 'gone' WHEN NOT $3::bool"
    " AND failing_since_ms IS NOT NULL AND failing_since_ms <= webhook.now_ms() - $5::int8 * 1000"
    " THEN 'failing' ELSE disabled_reason END,"
    " updated_ms = CASE WHEN $4::bool OR (NOT $3::bool AND failing_since_ms IS NOT NULL"
    " AND failing_since_ms <= webhook.now_ms() - $5::int8 * 1000) THEN webhook.now_ms()"
    " ELSE updated_ms END"
    " WHERE tenant_id = $1::uuid AND id = $2::uuid AND enabled AND CASE WHEN $3::bool"
    " THEN failing_since_ms IS NOT NULL ELSE failing_since_ms IS NULL OR $4::bool"
    " OR failing_since_ms <= webhook.now_ms() - $5::int8 * 1000 END";

/*
 * $1 retention s. A batch of what is done and old, attempts first (their foreign key). "Now" is a
 * subquery, evaluated once, so that it bounds the scan of deliveries_done_by_age (bare, the
 * volatile webhook.now_ms() was a filter over every delivery done, at each sweep).
 */
static const char sql_sweep[] =
    "WITH old AS (SELECT tenant_id, id FROM webhook.deliveries WHERE status <> 1"
    " AND created_ms < (SELECT webhook.now_ms()) - $1::int8 * 1000 ORDER BY created_ms LIMIT 1000"
    " FOR UPDATE SKIP LOCKED),"
    " a AS (DELETE FROM webhook.delivery_attempts t USING old"
    " WHERE t.tenant_id = old.tenant_id AND t.delivery_id = old.id)"
    " DELETE FROM webhook.deliveries t USING old WHERE t.tenant_id = old.tenant_id"
    " AND t.id = old.id";

/* $1 retention s. Events no delivery refers to any more; "now" as in sql_sweep. */
static const char sql_sweep_events[] =
    "DELETE FROM webhook.events e WHERE (e.tenant_id, e.id) IN (SELECT x.tenant_id, x.id"
    " FROM webhook.events x WHERE x.created_ms < (SELECT webhook.now_ms()) - $1::int8 * 1000"
    " AND NOT EXISTS (SELECT 1 FROM webhook.deliveries d WHERE d.tenant_id = x.tenant_id"
    " AND d.event_id = x.id) ORDER BY x.created_ms LIMIT 1000)";

#define SWEEP_EVERY_MS 60000

/* An attempt in the sender's hands, and then its outcome. */
typedef struct job {
        struct job *next;
        wh_deliverer *owner;
        char tenant_id[WH_UUID_LEN + 1];
        char id[WH_UUID_LEN + 1];
        char subscription_id[WH_UUID_LEN + 1];
        int64_t tries; /* before this attempt */
        int64_t created_ms;
        /* the outcome */
        wh_outcome outcome;
        int http_status;
        int64_t latency_ms;
        char excerpt[WH_EXCERPT_MAX + 1];
        char detail[256];
} job;

typedef struct busy {
        char subscription_id[WH_UUID_LEN + 1];
        int n;
} busy;

struct wh_deliverer {
        wh_service *svc;
        ks_ticker *feed;
        ks_ticker *claims;
        wh_sender *sender;
        pthread_mutex_t mu;
        job *done;           /* ended attempts, to record (mu) */
        busy busy[BUSY_MAX]; /* subscriptions with attempts in flight here (mu) */
        int n_busy;
        int64_t in_flight;                          /* (mu) */
        bool stopping;                              /* (mu): the tickers are going; wake none */
        int64_t swept_ms;                           /* the feed ticker's: its last sweep */
        int record_failures;                        /* the claims ticker's: in a row */
        char claim_sql[sizeof(sql_claim_fmt) + 48]; /* its limits written in */
};

/* ---- in flight -------------------------------------------------------------------------- */

static void busy_add(wh_deliverer *d, const char *sub, int delta)
{
        for (int i = 0; i < d->n_busy; i++) {
                if (strcmp(d->busy[i].subscription_id, sub) == 0) {
                        d->busy[i].n += delta;
                        if (d->busy[i].n <= 0) {
                                d->busy[i] = d->busy[--d->n_busy];
                        }
                        return;
                }
        }
        if (delta > 0 && d->n_busy < BUSY_MAX) {
                snprintf(d->busy[d->n_busy].subscription_id, WH_UUID_LEN + 1, "%s", sub);
                d->busy[d->n_busy++].n = delta;
        }
}

/* The subscriptions not to claim for, as an array literal: full ones. Under mu. */
static void busy_list(const wh_deliverer *d, char *out, size_t len)
{
        size_t w = (size_t)snprintf(out, len, "{");

        for (int i = 0; i < d->n_busy && w + WH_UUID_LEN + 3 < len; i++) {
                if (d->busy[i].n >= d->svc->cfg->delivery_destination_concurrency) {
                        w += (size_t)snprintf(out + w, len - w, "%s%s", w > 1 ? "," : "",
                                              d->busy[i].subscription_id);
                }
        }
        snprintf(out + w, len - w, "}");
}

/* s made valid UTF-8 in place, as PostgreSQL's text takes it: a bad byte becomes '?'. */
static void text_of(char *s)
{
        size_t len = strlen(s), i = 0;
        uint32_t cp;

        while (i < len) {
                if (ks_utf8_next(s, len, &i, &cp) != 0) {
                        s[i++] = '?';
                }
        }
}

static void on_done(const wh_result *r, void *user)
{
        job *j = user;
        wh_deliverer *d = j->owner;

        j->outcome = r->outcome;
        j->http_status = r->http_status;
        j->latency_ms = r->latency_us / 1000;
        size_t n = r->excerpt_len < WH_EXCERPT_MAX ? r->excerpt_len : WH_EXCERPT_MAX;
        memcpy(j->excerpt, r->excerpt, n);
        j->excerpt[n] = '\0'; /* an embedded NUL ends it early: the log is text */
        text_of(j->excerpt);
        snprintf(j->detail, sizeof(j->detail), "%s", r->detail);
        text_of(j->detail);
        pthread_mutex_lock(&d->mu);
        j->next = d->done;
        d->done = j;
        bool wake = !d->stopping;
        pthread_mutex_unlock(&d->mu);
        if (wake) {
                ks_ticker_wake(d->claims);
        }
}

/* ---- recording outcomes ------------------------------------------------------------------ */

typedef struct verdict {
        int status;
        int64_t wait_ms;
        char error[320];
        ks_pg_num status_s, wait_s, http_s, latency_s;
} verdict;

static void judge(const wh_deliverer *d, const job *j, verdict *v)
{
        const wh_config *c = d->svc->cfg;

        memset(v, 0, sizeof(*v));
        if (j->outcome == WH_DELIVERED) {
                v->status = KEELSON__WEBHOOK__V1__DELIVERY_STATUS__DELIVERY_STATUS_DELIVERED;
        } else {
                if (j->http_status > 0) {
                        snprintf(v->error, sizeof(v->error), "%s: HTTP %d",
                                 wh_outcome_name(j->outcome), j->http_status);
                } else {
                        snprintf(v->error, sizeof(v->error), "%s: %.280s",
                                 wh_outcome_name(j->outcome), j->detail);
                }
                uint32_t r = 0;
                if (ks_random_bytes(&r, sizeof(r)) != 0) {
                        r = 200; /* the wait itself */
                }
                v->wait_ms = j->http_status == 410
                                 ? -1
                                 : wh_retry_delay_ms(c->retry_ms, c->retry_n, j->tries + 1, r);
                v->status = v->wait_ms < 0
                                ? KEELSON__WEBHOOK__V1__DELIVERY_STATUS__DELIVERY_STATUS_FAILED
                                : KEELSON__WEBHOOK__V1__DELIVERY_STATUS__DELIVERY_STATUS_PENDING;
        }
        v->status_s = ks_pg_num_of(v->status);
        v->wait_s = ks_pg_num_of(v->wait_ms < 0 ? 0 : v->wait_ms);
        v->http_s = ks_pg_num_of(j->http_status);
        v->latency_s = ks_pg_num_of(j->latency_ms);
}

/* Records up to STEP_RESULTS_MAX ended attempts in one transaction. */
static int record(wh_deliverer *d, PGconn *conn, job **jobs, int n)
{
        const wh_config *c = d->svc->cfg;
        verdict v[STEP_RESULTS_MAX];
        const char *rp[STEP_RESULTS_MAX][11], *hp[STEP_RESULTS_MAX][5];
        ks_pg_stmt s[2 + 2 * STEP_RESULTS_MAX];
        ks_pg_num disable = ks_pg_num_of(c->delivery_disable_after_s);
        int k = 0;

        s[k++] = (ks_pg_stmt){.sql = "BEGIN"};
        s[k++] = (ks_pg_stmt){.sql = "SET LOCAL ROLE keelson_webhook_worker"};
        for (int i = 0; i < n; i++) {
                job *j = jobs[i];
                judge(d, j, &v[i]);
                if (j->outcome == WH_SHUTDOWN) {
                        rp[i][0] = j->tenant_id;
                        rp[i][1] = j->id;
                        rp[i][2] = PENDING;
                        s[k++] = (ks_pg_stmt){.sql = sql_release, .n_params = 3, .params = rp[i]};
                        continue;
                }
                const char *p[11] = {j->tenant_id,
                                     j->id,
                                     v[i].status_s.s,
                                     v[i].wait_s.s,
                                     wh_outcome_name(j->outcome),
                                     v[i].http_s.s,
                                     v[i].latency_s.s,
                                     j->excerpt,
                                     j->detail,
                                     v[i].error,
                                     PENDING};
                memcpy(rp[i], p, sizeof(p));
                s[k++] = (ks_pg_stmt){.sql = sql_record, .n_params = 11, .params = rp[i]};
                bool ok = j->outcome == WH_DELIVERED, gone = j->http_status == 410;
                const char *h[5] = {j->tenant_id, j->subscription_id, ok ? "true" : "false",
                                    gone ? "true" : "false", disable.s};
                memcpy(hp[i], h, sizeof(h));
                s[k++] = (ks_pg_stmt){.sql = sql_health, .n_params = 5, .params = hp[i]};
        }
        int rc = ks_pg_pipeline(conn, "deliver", s, k);
        if (rc == KS_OK) {
                rc = ks_pg_commit(conn, "deliver");
        }
        if (rc != KS_OK) {
                ks_pg_rollback(conn);
                return rc;
        }
        int64_t now = ks_now_ms();
        for (int i = 0; i < n; i++) {
                if (jobs[i]->outcome == WH_SHUTDOWN) {
                        continue;
                }
                ks_counter_inc(d->svc->deliveries[v[i].status]);
                if (v[i].status ==
                    KEELSON__WEBHOOK__V1__DELIVERY_STATUS__DELIVERY_STATUS_DELIVERED) {
                        ks_histogram_observe(d->svc->delivery_lag_seconds,
                                             (double)(now - jobs[i]->created_ms) / 1000.0);
                }
        }
        return KS_OK;
}

/*
 * Records what ended. On a database failure the outcomes wait for the next
 * step (the leases keep the deliveries from others meanwhile); after
 * RECORD_TRIES_MAX failures in a row they are dropped, logged, and left to
 * their leases, so that an outcome the database keeps refusing cannot stop
 * this replica's deliveries: the claims go on.
 */
static int record_done(wh_deliverer *d, PGconn *conn)
{
        pthread_mutex_lock(&d->mu);
        job *list = d->done;
        d->done = NULL;
        pthread_mutex_unlock(&d->mu);

        int rc = KS_OK;
        while (list != NULL && rc == KS_OK) {
                job *batch[STEP_RESULTS_MAX];
                int n = 0;
                for (job *j = list; j != NULL && n < STEP_RESULTS_MAX; j = j->next) {
                        batch[n++] = j;
                }
                if ((rc = record(d, conn, batch, n)) != KS_OK &&
                    ++d->record_failures < RECORD_TRIES_MAX) {
                        break;
                }
                if (rc != KS_OK) {
                        ks_log_error(NULL,
                                     "webhook delivery: outcomes the database refused, dropped;"
                                     " their deliveries are attempted again when their leases end",
                                     "{s:i, s:s}", "count", n, "code", ks_code_name(rc));
                        rc = KS_OK;
                }
                d->record_failures = 0;
                list = batch[n - 1]->next;
                pthread_mutex_lock(&d->mu);
                for (int i = 0; i < n; i++) {
                        busy_add(d, batch[i]->subscription_id, -1);
                        d->in_flight--;
                        free(batch[i]);
                }
                ks_gauge_set(d->svc->deliveries_in_flight, d->in_flight);
                pthread_mutex_unlock(&d->mu);
        }
        if (list != NULL) {
                /* Back on the list, before whatever ended meanwhile. */
                pthread_mutex_lock(&d->mu);
                job *tail = list;
                while (tail->next != NULL) {
                        tail = tail->next;
                }
                tail->next = d->done;
                d->done = list;
                pthread_mutex_unlock(&d->mu);
        }
        return rc;
}

/* ---- claims ------------------------------------------------------------------------------ */

/* A Postgres text[] in text form ({a,"b c"}) split in place; its elements, unquoted. */
static int array_items(char *s, char **items, int max)
{
        int n = 0;
        char *p = s, *w;

        if (*p != '{') {
                return 0;
        }
        p++;
        while (*p != '\0' && *p != '}' && n < max) {
                if (*p == '"') {
                        p++;
                        items[n++] = w = p;
                        while (*p != '\0' && *p != '"') {
                                if (*p == '\\' && p[1] != '\0') {
                                        p++;
                                }
                                *w++ = *p++;
                        }
                        if (*p == '"') {
                                p++;
                        }
                        *w = '\0';
                } else {
                        items[n++] = p;
                        while (*p != '\0' && *p != ',' && *p != '}') {
                                p++;
                        }
                        if (*p == '}') {
                                *p = '\0';
                                break;
                        }
                }
                if (*p == ',') {
                        *p++ = '\0';
                }
        }
        return n;
}

/* Signs and submits one claimed row; on any refusal the delivery's outcome is recorded. */
static void submit(wh_deliverer *d, const PGresult *res, int r)
{
        job *j = calloc(1, sizeof(*j));
        char ts[24], sigs[WH_KEYS_MAX * 4 * (WH_STANDARD_SIGNATURE_BYTES + 1)];
        const char *body = ks_pg_text(res, r, 7);
        const char *event_id = ks_pg_text(res, r, 3);
        int64_t now_s = ks_now_ms() / 1000;
        size_t w = 0;
        int rc = KS_OK;

        if (j == NULL) {
                return; /* the lease runs out; it is claimed again */
        }
        j->owner = d;
        snprintf(j->tenant_id, sizeof(j->tenant_id), "%s", ks_pg_text(res, r, 0));
        snprintf(j->id, sizeof(j->id), "%s", ks_pg_text(res, r, 1));
        snprintf(j->subscription_id, sizeof(j->subscription_id), "%s", ks_pg_text(res, r, 2));
        j->tries = ks_pg_int(res, r, 4);
        j->created_ms = ks_pg_int(res, r, 5);
        snprintf(ts, sizeof(ts), "%lld", (long long)now_s);

        char *secrets = strdup(ks_pg_text(res, r, 8));
        char *items[8];
        int n_secrets = secrets != NULL ? array_items(secrets, items, 8) : 0;
        sigs[0] = '\0';
        for (int i = 0; i < n_secrets && rc == KS_OK; i++) {
                wh_key *key = NULL;
                char sig[WH_STANDARD_SIGNATURE_BYTES];
                rc = wh_key_new(&key, WH_PROVIDER_STANDARD, items[i], strlen(items[i]), NULL, 0);
                if (rc == KS_OK) {
                        rc = wh_sign_standard(key, event_id, strlen(event_id), now_s, body,
                                              strlen(body), sig, sizeof(sig));
                }
                wh_key_free(key);
                if (rc == KS_OK && w + strlen(sig) + 2 < sizeof(sigs)) {
                        w += (size_t)snprintf(sigs + w, sizeof(sigs) - w, "%s%s", w > 0 ? " " : "",
                                              sig);
                }
        }
        free(secrets);
        if (rc == KS_OK && w == 0) {
                rc = KS_FAILED_PRECONDITION; /* no secret signs: never sent unsigned */
        }
        const wh_header h[4] = {{"webhook-id", event_id},
                                {"webhook-timestamp", ts},
                                {"webhook-signature", sigs},
                                {"content-type", "application/json"}};
        const wh_attempt a = {.url = ks_pg_text(res, r, 6),
                              .body = body,
                              .body_len = strlen(body),
                              .headers = h,
                              .headers_n = 4};
        pthread_mutex_lock(&d->mu);
        busy_add(d, j->subscription_id, 1);
        d->in_flight++;
        ks_gauge_set(d->svc->deliveries_in_flight, d->in_flight);
        pthread_mutex_unlock(&d->mu);
        if (rc == KS_OK) {
                rc = wh_sender_submit(d->sender, &a, on_done, j);
        }
        if (rc != KS_OK) {
                /* Not sent: recorded as an internal failure, retried on the schedule. */
                const wh_result fake = {.outcome = WH_SEND_INTERNAL,
                                        .retry_after_s = -1,
                                        .excerpt = "",
                                        .detail = rc == KS_FAILED_PRECONDITION
                                                      ? "no signing secret"
                                                      : "the sender is busy or stopping"};
                on_done(&fake, j);
        }
}

static int claim(wh_deliverer *d, PGconn *conn, int *n_claimed)
{
        const wh_config *c = d->svc->cfg;
        char busy_ids[BUSY_MAX * (WH_UUID_LEN + 1) + 4];
        int64_t room;

        *n_claimed = 0;
        pthread_mutex_lock(&d->mu);
        busy_list(d, busy_ids, sizeof(busy_ids));
        room = c->delivery_concurrency * 2 - d->in_flight;
        pthread_mutex_unlock(&d->mu);
        if (room <= 0) {
                return KS_OK;
        }
        ks_pg_num batch = ks_pg_num_of(room < c->delivery_batch_max ? room : c->delivery_batch_max);
        /* Long enough for the attempt to wait its turn behind others to its host, and run. */
        ks_pg_num lease = ks_pg_num_of(c->delivery_timeout_ms * 4 + LEASE_SLACK_MS);
        const char *p[3] = {busy_ids, batch.s, lease.s};
        PGresult *due = NULL, *res = NULL;
        const ks_pg_stmt s[3] = {{.sql = "BEGIN"},
                                 {.sql = "SET LOCAL ROLE keelson_webhook_worker"},
                                 {.sql = sql_due, .out = &due}};
        const ks_pg_stmt claim_stmt[1] = {
            {.sql = d->claim_sql, .n_params = 3, .params = p, .out = &res, .unprepared = true}};
        int rc = ks_pg_pipeline(conn, "deliver", s, 3);
        bool any = rc == KS_OK && PQntuples(due) == 1 && PQgetvalue(due, 0, 0)[0] == 't';
        PQclear(due);
        if (any) {
                rc = ks_pg_pipeline(conn, "deliver", claim_stmt, 1);
        }
        if (rc == KS_OK) {
                rc = ks_pg_commit(conn, "deliver");
        }
        if (rc != KS_OK) {
                ks_pg_rollback(conn);
                PQclear(res);
                return rc;
        }
        *n_claimed = res != NULL ? PQntuples(res) : 0;
        for (int r = 0; r < *n_claimed; r++) {
                submit(d, res, r);
        }
        PQclear(res);
        return KS_OK;
}

/* ---- the tickers ------------------------------------------------------------------------- */

static ks_ticker_next claims_step(void *arg)
{
        wh_deliverer *d = arg;
        PGconn *conn = NULL;
        int n = 0, rc;

        if (ks_pg_acquire(d->svc->pool, &conn) != KS_OK) {
                return KS_TICKER_REST;
        }
        if ((rc = record_done(d, conn)) == KS_OK) {
                rc = claim(d, conn, &n);
        }
        ks_pg_release(d->svc->pool, conn);
        if (rc != KS_OK) {
                ks_log_warn(NULL, "webhook delivery step failed", "{s:s}", "code",
                            ks_code_name(rc));
                return KS_TICKER_REST;
        }
        return n == d->svc->cfg->delivery_batch_max ? KS_TICKER_AGAIN : KS_TICKER_REST;
}

/* Retention: at most once a minute, from the feed's ticker (any replica; they skip each
 * other's rows). */
static void sweep(wh_deliverer *d, PGconn *conn)
{
        int64_t now = ks_now_ms();
        ks_pg_num keep = ks_pg_num_of(d->svc->cfg->delivery_retention_s);
        const char *p[1] = {keep.s};
        PGresult *res = NULL;

        if (now - d->swept_ms < SWEEP_EVERY_MS) {
                return;
        }
        d->swept_ms = now;
        const ks_pg_stmt s[5] = {{.sql = "BEGIN"},
                                 {.sql = "SET LOCAL ROLE keelson_webhook_worker"},
                                 {.sql = sql_sweep, .n_params = 1, .params = p, .out = &res},
                                 {.sql = sql_sweep_events, .n_params = 1, .params = p},
                                 {.sql = "COMMIT"}};
        int rc = ks_pg_pipeline(conn, "sweep", s, 5);
        if (rc != KS_OK) {
                ks_pg_rollback(conn);
                ks_log_warn(NULL, "webhook delivery retention step failed", "{s:s}", "code",
                            ks_code_name(rc));
        } else if (atol(PQcmdTuples(res)) == 1000) {
                d->swept_ms = 0; /* more to delete: again at the next step */
        }
        PQclear(res);
}

static ks_ticker_next feed_step(void *arg)
{
        wh_deliverer *d = arg;
        PGconn *conn = NULL;
        bool more = false;

        if (ks_pg_acquire(d->svc->pool, &conn) != KS_OK) {
                return KS_TICKER_REST;
        }
        sweep(d, conn);
        int rc = wh_feed_step(d->svc, conn, &more);
        ks_pg_release(d->svc->pool, conn);
        if (rc == KS_OK && !more) {
                /* New deliveries are due at once. */
                ks_ticker_wake(d->claims);
        }
        return rc == KS_OK && more ? KS_TICKER_AGAIN : KS_TICKER_REST;
}

int wh_deliverer_start(wh_deliverer **out, wh_service *svc)
{
        const wh_config *c = svc->cfg;
        wh_deliverer *d = calloc(1, sizeof(*d));
        wh_sender_options o;
        int rc;

        *out = NULL;
        if (d == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        d->svc = svc;
        pthread_mutex_init(&d->mu, NULL);
        snprintf(d->claim_sql, sizeof(d->claim_sql), sql_claim_fmt,
                 (long long)c->delivery_destination_concurrency, (long long)c->delivery_batch_max);
        wh_sender_options_init(&o);
        o.attempts_max = c->delivery_concurrency;
        o.destination_attempts_max = c->delivery_destination_concurrency < c->delivery_concurrency
                                         ? c->delivery_destination_concurrency
                                         : c->delivery_concurrency;
        o.queue_max = c->delivery_concurrency * 2;
        o.connect_timeout_ms = c->delivery_connect_timeout_ms;
        o.timeout_ms = c->delivery_timeout_ms;
        o.excerpt_bytes_max = WH_EXCERPT_MAX;
        o.allow = &c->allow;
        o.metrics = ks_metrics_default();
        if ((rc = wh_sender_new(&d->sender, &o)) != KS_OK) {
                pthread_mutex_destroy(&d->mu);
                free(d);
                return rc;
        }
        const ks_ticker_options co = {.name = "deliver",
                                      .interval_ms = c->delivery_poll_ms,
                                      .step_at_start = true,
                                      .step = claims_step,
                                      .arg = d};
        const ks_ticker_options fo = {.name = "feed",
                                      .interval_ms = c->delivery_poll_ms,
                                      .step_at_start = true,
                                      .step = feed_step,
                                      .arg = d};
        if ((rc = ks_ticker_start(&d->claims, &co)) != KS_OK ||
            (rc = ks_ticker_start(&d->feed, &fo)) != KS_OK) {
                wh_deliverer_stop(d);
                return rc;
        }
        *out = d;
        return KS_OK;
}

void wh_deliverer_wake(wh_deliverer *d)
{
        if (d != NULL) {
                ks_ticker_wake(d->claims);
        }
}

void wh_deliverer_stop(wh_deliverer *d)
{
        PGconn *conn = NULL;

        if (d == NULL) {
                return;
        }
        pthread_mutex_lock(&d->mu);
        d->stopping = true;
        pthread_mutex_unlock(&d->mu);
        ks_ticker_stop(d->feed);
        ks_ticker_stop(d->claims); /* no submit after this */
        /* Every attempt still running ends now, as WH_SHUTDOWN: released, due again. */
        wh_sender_free(d->sender);
        if (d->done != NULL && ks_pg_acquire(d->svc->pool, &conn) == KS_OK) {
                if (record_done(d, conn) != KS_OK) {
                        ks_log_warn(NULL,
                                    "webhook delivery: outcomes at stop not recorded; their"
                                    " leases run out",
                                    NULL);
                }
                ks_pg_release(d->svc->pool, conn);
        }
        for (job *j = d->done, *next; j != NULL; j = next) {
                next = j->next;
                free(j);
        }
        pthread_mutex_destroy(&d->mu);
        free(d);
}
