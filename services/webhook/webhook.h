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
 *   migrations/   schema "webhook"
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

typedef struct wh_config {
        ks_service_settings base; /* first: the skeleton's shared settings */
        int64_t intake_body_max_bytes;
        bool apply;
        int64_t apply_poll_ms;
        int64_t apply_batch_max;
        int64_t apply_attempts_max;
        int64_t billing_timeout_ms;
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

typedef struct wh_service {
        wh_config *cfg;
        ks_pg_pool *pool;
        wh_applier *applier;             /* NULL when this replica applies nothing */
        ks_counter *applied[5];          /* by the status an application left (ReceivedStatus) */
        ks_histogram *apply_lag_seconds; /* received to applied, ignored or failed */
        ks_counter *intake[WH_IN_RESULTS];
        ks_counter *refused[WH_VERDICT_COUNT]; /* by the signature's verdict */
        ks_histogram *intake_seconds;
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

/* ---- tx.c ---------------------------------------------------------------------------------- */

/* A transaction acting for the caller's tenant, as keelson_webhook_rt. */
typedef struct wh_tx {
        ks_call *call;
        wh_service *svc;
        PGconn *conn;
        const char *tenant_id;
} wh_tx;

typedef int (*wh_tx_fn)(wh_tx *tx, void *arg);

/*
 * Runs fn in one transaction acting for the caller's tenant (the RPC server
 * has checked the role against the method's permission): commits when fn
 * returns KS_OK, rolls back otherwise. Returns KS_OK or a code the call carries.
 */
int wh_tx_run(ks_call *call, wh_tx_fn fn, void *arg);

/* Runs statement sql in tx; a database failure is answered (wh_db_fail) and returned. */
int wh_exec(wh_tx *tx, const char *sql, int n, const char *const *params, PGresult **out);

/* A database failure of the call: logged, answered unavailable / aborted / internal. */
int wh_db_fail(ks_call *call, int code);

extern const ks_list_runner wh_list_runner;

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

#endif
