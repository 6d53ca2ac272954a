/*
 * keelson-webhook: webhooks in both directions (keelson.webhook.v1.WebhookService).
 *
 * Intake: providers' events arrive through the gateway's /webhooks/<provider>/<id>
 * routes as ReceiveWebhook calls; each is verified against its endpoint's
 * secrets (signature.c), stored with its deduplication key before the 2xx,
 * and applied later.
 *
 *   main.c        the spec ks_service_run runs
 *   setup.c       its own settings, metrics, start and stop
 *   methods.def   one row per RPC; methods.c its method table
 *   tx.c          the frame of every tenant method: one transaction acting
 *                 for the caller's tenant; row and uuid helpers
 *   endpoints.c   intake endpoints and their secrets
 *   intake.c      ReceiveWebhook: verify, store, deduplicate
 *   received.c    the received events, as operators read them (and re-apply)
 *   apply.c       the applier: pending events applied to billing, at least once
 *   stripe.c      what billing needs of a Stripe event (pure)
 *   sender.c      HTTP attempts to subscribers' URLs (libcurl); addrpolicy.c
 *                 the addresses they may not reach
 *   signature.c   Stripe and Standard Webhooks signatures (pure)
 *
 * Delivery: keelson's own events reach tenants' URLs as Standard Webhooks
 * requests, at least once.
 *
 *   topics.c         the topics tenants may subscribe to (each source's
 *                    topics.def), and the JSON body of one event
 *   subscriptions.c  webhook subscriptions and their signing secrets
 *   feed.c           the feed: other services' outboxes, read in commit
 *                    order and fanned out into deliveries, exactly once
 *   deliver.c        the worker: due deliveries claimed, signed, POSTed
 *                    (sender.c), their outcomes recorded and retried
 *   retry.c          the retry schedule (pure)
 *   deliveries.c     deliveries and their attempts, as tenants read them;
 *                    Redeliver
 *   migrations/      schema "webhook"
 */
#ifndef WH_WEBHOOK_H
#define WH_WEBHOOK_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keelson/webhook/v1/webhook.pb-c.h"
#include "ks_config.h"
#include "ks_list.h"
#include "ks_metrics.h"
#include "ks_pg.h"
#include "ks_rpc.h"
#include "ks_service.h"
#include "addrpolicy.h"
#include "signature.h"

#define WH_INTERNAL_MSG        "internal error"
#define WH_UUID_LEN            36
#define WH_TOLERANCE_DEFAULT_S 300
#define WH_TOLERANCE_MAX_S     3600
#define WH_DESCRIPTION_MAX     200   /* characters */
#define WH_ROTATE_DEFAULT_S    86400 /* the previous secrets' time after a rotation */
#define WH_ROTATE_MAX_S        604800
#define WH_EVENT_ID_MAX        255 /* a provider's event id, in bytes */
#define WH_EVENT_TYPE_MAX      255
#define WH_SUB_TOPICS_MAX      32   /* topics of one subscription */
#define WH_SUB_URL_MAX         2048 /* bytes of a subscription's URL */
#define WH_RETRY_MAX           32   /* waits in a retry schedule */
#define WH_EXCERPT_MAX         1024 /* bytes of a response kept in the delivery log */

typedef struct wh_config {
        ks_service_settings base; /* first: the skeleton's shared settings */
        int64_t intake_body_max_bytes;
        bool apply;
        int64_t apply_poll_ms;
        int64_t apply_batch_max;
        int64_t apply_attempts_max;
        int64_t billing_timeout_ms;
        /* delivery */
        bool deliver;
        int64_t delivery_poll_ms;
        int64_t delivery_batch_max;
        int64_t feed_batch_max;
        char *delivery_retry_schedule; /* text; parsed into retry_ms by wh_check_config */
        int64_t retry_ms[WH_RETRY_MAX];
        size_t retry_n;
        int64_t delivery_disable_after_s;
        int64_t delivery_retention_s;
        int64_t delivery_timeout_ms;
        int64_t delivery_connect_timeout_ms;
        int64_t delivery_concurrency;
        int64_t delivery_destination_concurrency;
        char *delivery_allow; /* text; parsed into allow by wh_check_config */
        wh_addr_policy allow;
} wh_config;

extern const ks_config_var wh_config_vars[];
extern const size_t wh_config_vars_n;

/* Intake outcomes, as counted (keelson_webhook_intake_total{result}). */
typedef enum wh_intake_result {
        WH_IN_STORED,
        WH_IN_DUPLICATE,
        WH_IN_UNKNOWN_ENDPOINT,
        WH_IN_BAD_REQUEST, /* no event id, body over the limit, bad provider */
        WH_IN_REFUSED,     /* the signature or its time: the verdict's own counter */
        WH_IN_UNAVAILABLE,
        WH_IN_RESULTS
} wh_intake_result;

typedef struct wh_applier wh_applier;
typedef struct wh_deliverer wh_deliverer;

typedef struct wh_service {
        wh_config *cfg;
        ks_pg_pool *pool;
        wh_applier *applier;             /* NULL when this replica applies nothing */
        ks_counter *applied[5];          /* by the status an application left (ReceivedStatus) */
        ks_histogram *apply_lag_seconds; /* received to applied, ignored or failed */
        ks_counter *intake[WH_IN_RESULTS];
        ks_counter *refused[WH_VERDICT_COUNT]; /* by the signature's verdict */
        ks_histogram *intake_seconds;
        wh_deliverer *deliverer;            /* NULL when this replica delivers nothing */
        ks_counter *feed_events;            /* events read from the sources' outboxes */
        ks_counter *feed_deliveries;        /* deliveries they became */
        ks_histogram *feed_lag_seconds;     /* an event's commit to its fan-out */
        ks_counter *deliveries[4];          /* by the status an attempt left (DeliveryStatus) */
        ks_histogram *delivery_lag_seconds; /* a delivery's creation to its delivered attempt */
        ks_gauge *deliveries_in_flight;
} wh_service;

extern const ks_method_table wh_methods;

int wh_check_config(void *service, char *err, size_t err_len);
int wh_start(void *service, ks_service_env *env);
void wh_stop(void *service);

/* ---- apply.c ------------------------------------------------------------------------------ */

/* Starts the applier's ticker and its billing client. KS_OK, or a code (logged by the caller). */
int wh_applier_start(wh_applier **out, wh_service *svc, const ks_service_env *env);
/* Its next step now (a pending event was just stored here). NULL is ignored. */
void wh_applier_wake(wh_applier *a);
/* Lets a step finish, stops. NULL is ignored. */
void wh_applier_stop(wh_applier *a);

/* ---- topics.c ---------------------------------------------------------------------------- */

/* A topic tenants may subscribe to: its name, the schema whose outbox has it, its message. */
typedef struct wh_topic {
        const char *name;
        const char *source;
        const ProtobufCMessageDescriptor *desc;
} wh_topic;

extern const wh_topic wh_topics[];
extern const size_t wh_topics_n;
/* The schemas whose outboxes the feed reads (each once). */
extern const char *const wh_sources[];
extern const size_t wh_sources_n;

/* The topic of that name, or NULL. */
const wh_topic *wh_topic_find(const char *name);

/*
 * The body POSTed for one event: {"type":topic,"timestamp":"<RFC 3339, ms, Z>","data":<the
 * payload in the proto3 JSON mapping>}. KS_OK with *out (malloc'd, NUL-terminated, *out_len
 * bytes); KS_INVALID_ARGUMENT when the payload is not the topic's message; KS_RESOURCE_EXHAUSTED.
 */
int wh_event_body(const wh_topic *t, int64_t at_ms, const uint8_t *payload, size_t len, char **out,
                  size_t *out_len);

/* ---- retry.c ------------------------------------------------------------------------------ */

/*
 * A retry schedule: comma-separated waits, each a whole number and a unit
 * (s, m, h, d): "5s,5m,30m,2h". The first attempt is at once; after the
 * k-th failure the (k)th wait is taken, and after the last the delivery
 * fails. 1..WH_RETRY_MAX waits of 1 s..7 d. 0, or -1 with the reason in err.
 */
int wh_retry_parse(const char *text, int64_t *ms, size_t cap, size_t *n, char *err, size_t err_len);

/*
 * The wait after failed try number tries (1-based) with jitter: the
 * schedule's wait times a factor in [0.8, 1.2] from r (any 32 random bits);
 * -1 when the schedule has run out.
 */
int64_t wh_retry_delay_ms(const int64_t *ms, size_t n, int64_t tries, uint32_t r);

/* ---- feed.c, deliver.c --------------------------------------------------------------------- */

/*
 * One step of the feed on conn (pool's, idle): a page of each source. *more: a
 * page was full. KS_OK, or the first failure's code (logged; the next step retries).
 */
int wh_feed_step(wh_service *svc, PGconn *conn, bool *more);

/* Starts the feed and the delivery worker of this replica. KS_OK or a code (logged here). */
int wh_deliverer_start(wh_deliverer **out, wh_service *svc);
/* Its next claim now (a Redeliver was committed here). NULL is ignored. */
void wh_deliverer_wake(wh_deliverer *d);
/* Lets the steps finish, ends the attempts in flight, stops. NULL is ignored. */
void wh_deliverer_stop(wh_deliverer *d);

/* ---- tx.c ---------------------------------------------------------------------------------- */

/* A transaction acting for the caller's tenant, as keelson_webhook_rt. */
typedef struct wh_tx {
        ks_call *call;
        wh_service *svc;
        PGconn *conn;
        const char *tenant_id;
        bool reads_only; /* wh_tx_run_reads: each round trip a read of its own */
} wh_tx;

typedef int (*wh_tx_fn)(wh_tx *tx, void *arg);

/*
 * Runs fn in one transaction acting for the caller's tenant (the RPC server
 * has checked the role against the method's permission): commits when fn
 * returns KS_OK, rolls back otherwise. Returns KS_OK or a code the call carries.
 */
int wh_tx_run(ks_call *call, wh_tx_fn fn, void *arg);

/*
 * The frame of a read method (a Get, a list's page): as wh_tx_run with no
 * transaction block; each round trip fn makes through wh_exec or
 * wh_pipeline is a read: the tenant, then the statements, sent as one
 * pipeline that PostgreSQL runs as one transaction ended by its Sync, which
 * may be answered from the loop's batch (ks_pg.h, "Batched reads"). A
 * handler shared with writes (a reply that reads its row) is written once
 * for either frame. At READ COMMITTED a block gives its statements no
 * common snapshot, so fn sees what it would in one. fn writes nothing and
 * locks nothing, and changes nothing before its first read (it may run
 * twice up to there: "Batched reads").
 */
int wh_tx_run_reads(ks_call *call, wh_tx_fn fn, void *arg);

/* Runs statement sql in tx; a database failure is answered (wh_db_fail) and returned. */
int wh_exec(wh_tx *tx, const char *sql, int n, const char *const *params, PGresult **out);
/* Several statements in one round trip (ks_pg_pipeline); a failure as wh_exec's. */
int wh_pipeline(wh_tx *tx, const ks_pg_stmt *stmts, int n);

/*
 * How long a rotation keeps the previous secrets (RotateIntakeSecret,
 * RotateWebhookSubscriptionSecret): 0 is WH_ROTATE_DEFAULT_S, else
 * 1..WH_ROTATE_MAX_S, into *out_s. KS_OK, or the call's invalid_argument.
 */
int wh_rotate_window(ks_call *call, int64_t in_s, int64_t *out_s);

/* A database failure of the call: logged, answered unavailable / aborted / internal. */
int wh_db_fail(ks_call *call, int code);

extern const ks_list_runner wh_list_runner;

/* A description in UTF-8, and its NUL. */
#define WH_DESCRIPTION_BYTES (WH_DESCRIPTION_MAX * 4 + 1)

/*
 * A request's description: trimmed, valid UTF-8, no control character, at
 * most WH_DESCRIPTION_MAX characters, into out (len: WH_DESCRIPTION_BYTES).
 * KS_OK, or the call failed invalid_argument "description: ...".
 */
int wh_description_of(ks_call *call, const char *in, char *out, size_t len);

/*
 * Whether secret is one provider p signs with (its form: signature.h);
 * 0, or -1 with the reason in err (never quoting the secret).
 */
int wh_secret_check(Keelson__Webhook__V1__Provider p, const char *secret, char *err,
                    size_t err_len);

/* ---- the handlers (methods.def) ------------------------------------------------------------ */

int wh_create_intake_endpoint(ks_call *call);
int wh_get_intake_endpoint(ks_call *call);
int wh_list_intake_endpoints(ks_call *call);
int wh_update_intake_endpoint(ks_call *call);
int wh_rotate_intake_secret(ks_call *call);
int wh_receive_webhook(ks_call *call);
int wh_list_received_events(ks_call *call);
int wh_get_received_event(ks_call *call);
int wh_reapply_received_event(ks_call *call);
int wh_create_subscription(ks_call *call);
int wh_get_subscription(ks_call *call);
int wh_list_subscriptions(ks_call *call);
int wh_update_subscription(ks_call *call);
int wh_rotate_subscription_secret(ks_call *call);
int wh_list_deliveries(ks_call *call);
int wh_get_delivery(ks_call *call);
int wh_redeliver(ks_call *call);

#endif
