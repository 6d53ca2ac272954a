/*
 * keelson-billing internals: the service state every handler shares, the
 * handlers of keelson.billing.v1.BillingService and the modules they share.
 *
 *   model.h         the pure parts: money, calendar, prices, state tables
 *                   (money.c calendar.c pricing.c states.c)
 *   tx.c            the frame of every method: the caller's tenant, one
 *                   transaction acting for it, the idempotency key, and the
 *                   writes that ride on its next round trip (bl_defer)
 *   idempotency.c   Idempotency-Key records: claim, replay, store
 *   validate.c      input rules that need no database
 *   json.c          metadata maps and price tiers to and from jsonb
 *   rows.c          rows of the tables as structs and messages
 *   clock.c         what "now" is for a customer (its test clock, or real time)
 *   customers.c plans.c clocks.c subscriptions.c changes.c usage.c
 *   invoices.c payments.c credit_notes.c reconcile.c summary.c: the methods
 *                   (changes.c: plan and quantity changes, and their preview)
 *   lifecycle.c     what falls due for a subscription (trial ends, renewals,
 *                   dunning retries, cancellations at period end), shared by
 *                   the scheduler and the test clocks
 *   invoicing.c     invoices made, finalized, charged, paid: the steps every
 *                   path that bills shares
 *   provider.c      the payment provider interface and its mock
 *   postings.c      billing's chart of accounts in the ledger, transfer ids,
 *                   the chain of transfers each billing fact posts (pure)
 *   relay.c         the ledger relay: queued postings to LedgerService
 *   scheduler.c     the scheduler thread: due subscriptions on real time
 *   events.c        the events billing publishes through its outbox
 *   setup.c         settings, start and stop; main.c the spec
 */
#ifndef BILLING_H
#define BILLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "keelson/billing/v1/billing.pb-c.h"
#include "keelson/ledger/v1/ledger.pb-c.h"
#include "ks_list.h"
#include "ks_metrics.h"
#include "ks_outbox.h"
#include "ks_pg.h"
#include "ks_rpc.h"
#include "ks_service.h"
#include "model.h"

/* ---- limits ------------------------------------------------------------- */

#define BL_UUID_LEN            36
#define BL_EMAIL_BYTES_MAX     254
#define BL_NAME_CHARS_MAX      200
#define BL_NAME_BYTES_MAX      (BL_NAME_CHARS_MAX * 4)
#define BL_PAYMENT_METHOD_MAX  255
#define BL_METADATA_KEYS_MAX   50 /* Stripe's bounds */
#define BL_METADATA_KEY_MAX    40
#define BL_METADATA_VALUE_MAX  500
#define BL_PLAN_CODE_MAX       64
#define BL_TRIAL_DAYS_MAX      730
#define BL_QUANTITY_MAX        1000000
#define BL_USAGE_BATCH_MAX     1000
#define BL_USAGE_QUANTITY_MAX  1000000000LL
#define BL_EVENT_ID_MAX        128
#define BL_LINE_DESC_MAX       500 /* characters */
#define BL_LINES_PER_CALL_MAX  100
#define BL_LINES_MAX           250 /* lines of one invoice */
#define BL_REASON_MAX          500 /* characters */
#define BL_REFERENCE_MAX       200 /* characters */
#define BL_CLOCK_SUBS_MAX      100 /* subscriptions on one test clock */
#define BL_CLOCK_STEPS_MAX     10000
#define BL_DUNNING_RETRIES_MAX 8 /* Stripe's bound */
#define BL_ERR_MAX             160
#define BL_IDEMPOTENCY_TTL_MS  (24LL * 3600 * 1000)
#define BL_DAY_MS              (86400LL * 1000)
#define BL_INTERNAL_MSG        "internal error"

/* ---- the service ----------------------------------------------------------- */

typedef struct bl_config {
        ks_service_settings base; /* the skeleton's shared settings */
        int64_t ledger_timeout_ms;
        bool relay;
        int64_t relay_batch_max;
        int64_t relay_poll_ms;
        int64_t relay_attempts_max;
        bool scheduler;
        int64_t scheduler_poll_ms;
        int64_t scheduler_batch_max;
        char *dunning_retry_days; /* "3,5,7" */
        int64_t tenant_writers;
        int64_t group_max;
} bl_config;

extern const ks_config_var bl_config_vars[];
extern const size_t bl_config_vars_n;

typedef struct bl_relay bl_relay;
typedef struct bl_scheduler bl_scheduler;

typedef struct bl_service {
        bl_config *cfg;
        ks_pg_pool *pool;
        ks_rpc_client *ledger; /* LedgerService through the brokers */
        bl_relay *relay;
        bl_scheduler *scheduler;
        /* dunning: days from one failed automatic charge to the next try */
        int32_t dunning_days[BL_DUNNING_RETRIES_MAX];
        int n_dunning;
        ks_counter *charges_ok, *charges_declined;
        ks_counter *grouped_committed, *grouped_undone; /* calls, by their group's outcome */
} bl_service;

extern const ks_method_table bl_methods;

/*
 * A group of one tenant's calls of one KS_M_GROUPED method, calls[i]
 * answered with codes[i] (ks_rpc_server_options.group_run; methods.c finds
 * the method's group form).
 */
typedef void (*bl_group_fn)(ks_call *const *calls, int *codes, int n);
void bl_group_run(void *service, ks_call *const *calls, int *codes, int n);

int bl_check_config(void *service, char *err, size_t err_len);
int bl_start(void *service, ks_service_env *env);
void bl_stop(void *service);

/* Parses "3,5,7" (1..BL_DUNNING_RETRIES_MAX numbers of days, each 1..60); -1 when malformed. */
int bl_dunning_parse(const char *s, int32_t *days, int *n);

/* ---- the frame of every method (tx.c) ---------------------------------------- */

/* PostgreSQL array literals of parameters ("{1,2}", "{\"a\",\"b\"}"), grown as needed. */
typedef struct bl_arr {
        char *s;
        size_t len, cap;
        bool oom;
} bl_arr;
void bl_arr_int(bl_arr *a, int64_t v);
void bl_arr_text(bl_arr *a, const char *v);
void bl_arr_null(bl_arr *a);
/* The literal (owned by a; NULL when out of memory); bl_arr_free frees it. */
const char *bl_arr_done(bl_arr *a);
void bl_arr_free(bl_arr *a);

/* A write sent with the transaction's next round trip (tx.c): its own copies. */
typedef struct bl_deferred {
        char *sql;
        int n;
        char **params;
        char row[BL_UUID_LEN + 1]; /* bl_defer_row: the row it writes whole */
        char table[64];            /* bl_defer_insert: the table it inserts into, else "" */
} bl_deferred;

/* An invoice finalized in the transaction, numbered at its end (invoicing.c). */
typedef struct bl_numbered bl_numbered;

typedef struct bl_tx {
        ks_call *call; /* NULL for the scheduler's own transactions */
        bl_service *svc;
        PGconn *conn;
        const char *tenant_id; /* checked */
        const char *request_id;
        bool reads_only;          /* bl_tx_run_reads: every statement a read of its own */
        bool summary_published;   /* users.admin_summary already queued in this transaction */
        char idem_fp[2 + 64 + 1]; /* the request's fingerprint, once claimed ("\\x" + hex) */
        /* writes whose results nobody reads ride on the next statement's round trip */
        bl_deferred *deferred;
        size_t n_deferred, cap_deferred;
        bl_numbered *numbered;
        size_t n_numbered, cap_numbered;
        bool sealed_any; /* bl_tx_seal numbered something */
        /* invoice numbers taken ahead (bl_numbers_take_stmt): the next one, and how many left */
        int64_t take_count;
        ks_pg_num take_n; /* take_count as the statement's parameter */
        const char *take_params[1];
        PGresult *take_res;
        int64_t taken_next, taken_left;
        /* the events of the transaction: one statement, sent with COMMIT (events.c) */
        ks_outbox_batch events;
        bool events_begun;
        /* its ledger postings: one statement, sent with COMMIT (postings.c) */
        bl_arr postings[6];
        size_t n_postings;
} bl_tx;

/*
 * Runs fn in one transaction acting for the caller's tenant, after checking
 * the caller (authenticated, in a tenant) and its role against the
 * permission of the method's row. A write method (one that is not
 * KS_M_IDEMPOTENT) with an Idempotency-Key is claimed first: a stored
 * outcome is replayed instead of running fn. fn replies (ks_call_reply) and
 * returns KS_OK to commit, or fails the call (ks_call_fail) to roll back.
 */
typedef int (*bl_tx_fn)(bl_tx *tx, void *arg);
int bl_tx_run(ks_call *call, bl_tx_fn fn, void *arg);

/*
 * The calls of one group (one tenant, one method; ks_rpc_server.c,
 * "Groups") in one transaction: every call's Idempotency-Key claimed; all
 * their reads in one round trip (reads); body(tx, args[i]) for each, with
 * tx->call that call; the transaction sealed once (bl_tx_seal: every
 * invoice numbered by one take of the counter); then each finish(tx,
 * args[i]), which replies, and its key stored; one COMMIT. codes[i] is each
 * call's outcome. When anything of it fails (a member refused, a key
 * replayed or repeated within the group, the database), it rolls back,
 * forget(args[i]) drops what reads fetched, and every call runs alone, as
 * bl_tx_run(call, whole, args[i]): a group is a shortcut, never a different
 * answer.
 */
typedef struct bl_group_fns {
        bl_tx_fn whole;
        int (*reads)(bl_tx *tx, void *const *args, int n);
        bl_tx_fn body, finish;
        void (*forget)(void *arg);
} bl_group_fns;
void bl_tx_run_group(ks_call *const *calls, void *const *args, int n, const bl_group_fns *fns,
                     int *codes);

/*
 * The same frame for work of the service's own (the scheduler): a
 * transaction acting for tenant_id, no caller, no key. fn returns a code;
 * KS_OK commits. Returns fn's code or the database's.
 */
int bl_tx_run_as(bl_service *svc, const char *request_id, const char *tenant_id, bl_tx_fn fn,
                 void *arg);

/*
 * The frame of a read method (a Get, a list's page): as bl_tx_run, with no
 * transaction block and no Idempotency-Key. Each round trip fn makes
 * (bl_exec, bl_pipeline) is a read: the tenant, then the statements, sent
 * as one pipeline that PostgreSQL runs as one transaction ended by its
 * Sync; a failure is the call's (bl_db_fail), every out NULL. Billing
 * runs at READ COMMITTED, where a transaction block gives its statements
 * no common snapshot, so fn's reads see what they would in one; a
 * single-statement read costs one round trip instead of two (BEGIN with
 * it, then COMMIT), and fn's first read may be answered from the loop's
 * batch (ks_pg.h, "Batched reads"): fn runs twice up to it, so it changes
 * nothing before it. fn defers no write (asserted), nor locks a row (a
 * lock would end with the read's Sync).
 */
int bl_tx_run_reads(ks_call *call, bl_tx_fn fn, void *arg);

/* The caller's tenant, checked (authenticated, a uuid); else the call fails (unauthenticated). */
int bl_require_tenant(ks_call *call);

/* A database failure as the client sees it (unavailable, aborted, internal), logged. */
int bl_db_fail(bl_tx *tx, int code);
/* A failure of tx (the call's message set when there is a call); returns code. */
int bl_fail(bl_tx *tx, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* One statement on tx's connection: KS_OK with *out (may be NULL), else the call failed
 * (bl_db_fail). */
int bl_exec(bl_tx *tx, const char *sql, int n, const char *const *params, PGresult **out);
/* Several statements in one round trip (ks_pg_pipeline); else the call failed. */
int bl_pipeline(bl_tx *tx, const ks_pg_stmt *stmts, int n);
/*
 * A write whose result nobody reads (an insert, an update by key, an
 * event): copied and sent with the transaction's next statement, in the
 * same round trip, in order. Every later statement sees it, as if it had
 * run at once; a failure of it fails that next statement's call (or the
 * COMMIT). Returns KS_OK, or resource_exhausted.
 */
int bl_defer(bl_tx *tx, const char *sql, int n, const char *const *params);
/*
 * The same for a statement that writes every mutable column of one row
 * (a save): one still waiting for the same row and statement is replaced,
 * in its place, since only the last state counts (deferred statements never
 * read, and every statement that does is sent after them).
 */
int bl_defer_row(bl_tx *tx, const char *row, const char *sql, int n, const char *const *params);
/*
 * The same (bl_defer_row when row is not NULL, else bl_defer) for an
 * insert of one row, "INSERT INTO t (cols) VALUES (...)" with every
 * parameter that is not a text column's value cast (ks_pg_rows_sql): at
 * the flush, the rows of the same statement waiting in the transaction
 * are written together, in one execution of its form over arrays, at the
 * place of the first of them. A row so moves ahead of the statements
 * deferred between, up to the first of them that names t; so t must hold
 * no foreign key to a row the transaction writes (billing's point at
 * customers, plans and test clocks, which no transaction inserting such a
 * row writes).
 */
int bl_defer_insert(bl_tx *tx, const char *row, const char *sql, int n, const char *const *params);
/*
 * When a bl_defer_row of (row, sql) still waits, its params [from, from+n)
 * become params: *found true. Else nothing changes (*found false).
 */
int bl_defer_rewrite(bl_tx *tx, const char *row, const char *sql, int from, int n,
                     const char *const *params, bool *found);
/*
 * Takes the bl_defer_row of (row, sql) out of the queue into *out, to be
 * sent as another statement later than the rest (the caller frees it,
 * bl_deferred_free): true. False, and nothing changes, when none waits or
 * a statement deferred after it names table (it may need the row first),
 * other than the same statement for another row.
 */
bool bl_defer_take(bl_tx *tx, const char *row, const char *sql, const char *table,
                   bl_deferred *out);
void bl_deferred_free(bl_deferred *d);
/* Frees what a transaction holds (deferred writes, numbers, events, postings); not its connection.
 */
void bl_tx_free(bl_tx *tx);
/* Sends the deferred writes now (before a statement run on tx->conn directly). */
int bl_flush(bl_tx *tx);

/* How billing's lists run (customers.c): a page in bl_tx_run_reads, for ks_list_reply. */
extern const ks_list_runner bl_list_runner;

/* ---- Idempotency-Key records (idempotency.c) --------------------------------------- */

typedef enum bl_idem_state {
        BL_IDEM_NONE = 0, /* no key, or not a write: nothing to do */
        BL_IDEM_NEW,      /* claimed: run the request, then bl_idem_store */
        BL_IDEM_REPLAYED, /* the stored outcome is in the call */
} bl_idem_state;

/*
 * Claims the call's key in tx (an advisory lock on the tenant and key,
 * held to the end of the transaction). Returns KS_OK with *state NEW or
 * REPLAYED (then *code is the stored reply's code, and the call carries
 * its message or payload), or a refusal: ABORTED while another request
 * holds the key, INVALID_ARGUMENT for a key used with another request.
 */
int bl_idem_claim(bl_tx *tx, bl_idem_state *state, int *code);
/* Stores the call's outcome (code, message, reply) under its key, in tx. */
int bl_idem_store(bl_tx *tx, int code);
/*
 * After a failed run rolled back: whether its outcome is one to keep for the
 * key (the request ran and was refused for what it asked: not_found,
 * already_exists, failed_precondition, out_of_range, or invalid_argument
 * found in the transaction), stored in a transaction of its own. Transient
 * failures store nothing: a retry runs. Between the rollback and that store
 * the key is free: a retry arriving in that instant runs again, and whichever
 * outcome is stored first is the one replayed after.
 */
bool bl_idem_keeps(int code);
void bl_idem_store_failure(ks_call *call, int code);

/* ---- input rules (validate.c, pure) ----------------------------------------- */

bool bl_uuid_valid(const char *s);
/* Each returns true, or false with the client's message in err. */
/* An address as given, trimmed, into out (BL_EMAIL_BYTES_MAX + 1 bytes); the rules of ks_text.h. */
bool bl_email_valid(const char *email, char *out, size_t out_len, char *err, size_t err_len);
/* A name or description trimmed into out (chars_max * 4 + 1 bytes); the rules of ks_text.h. */
bool bl_name_valid(const char *field, const char *name, int chars_max, char *out, size_t out_len,
                   char *err, size_t err_len);
bool bl_plan_code_valid(const char *code, char *err, size_t err_len);
bool bl_payment_method_valid(const char *field, const char *pm, char *err, size_t err_len);
bool bl_tax_valid(int32_t rate_bp, char *err, size_t err_len);
bool bl_event_id_valid(const char *id);
/* A uuid field that must be set: false with "<field>: must be a uuid". */
bool bl_id_valid(const char *field, const char *id, char *err, size_t err_len);
/* A metadata map as the request carries it: bounded keys and values. */
typedef struct bl_kv {
        const char *key;
        const char *value;
} bl_kv;
bool bl_metadata_valid(const bl_kv *kv, size_t n, bool allow_empty_values, char *err,
                       size_t err_len);

/* ---- jsonb (json.c) --------------------------------------------------------- */

/* A metadata map as a JSON object (malloc'ed, free it); NULL when out of memory. */
char *bl_metadata_json(const bl_kv *kv, size_t n);
/* The keys of kv whose values are "" as a PostgreSQL text[] literal (malloc'ed). */
char *bl_metadata_deleted(const bl_kv *kv, size_t n);
typedef Keelson__Billing__V1__Customer__MetadataEntry bl_meta_entry;
/* A jsonb object of strings into map entries (bl_metadata_free); -1 when not such an object. */
int bl_metadata_from_json(const char *json, bl_meta_entry ***entries, size_t *n);
void bl_metadata_free(bl_meta_entry **entries, size_t n);
/* Tiers as a JSON array (malloc'ed), and back (-1 when malformed or more than BL_TIERS_MAX). */
char *bl_tiers_json(const bl_tier *t, size_t n);
int bl_tiers_from_json(const char *json, bl_tier *t, size_t *n);

/* ---- rows (rows.c) ---------------------------------------------------------------- */

/* What the billing engine needs of a customer. */
typedef struct bl_customer {
        char id[BL_UUID_LEN + 1];
        const bl_currency *currency;
        int32_t tax_rate_bp; /* 0 when tax exempt */
        char payment_method[BL_PAYMENT_METHOD_MAX + 1];
        int64_t credit_balance;
        char test_clock_id[BL_UUID_LEN + 1]; /* "" on real time */
        bool archived;
} bl_customer;

typedef struct bl_plan {
        char id[BL_UUID_LEN + 1];
        char code[BL_PLAN_CODE_MAX + 1];
        int32_t version;
        char name[BL_NAME_BYTES_MAX + 1];
        const bl_currency *currency;
        bl_interval interval;
        int32_t trial_days;
        bl_price price;
        bool archived;
        int64_t created_ms;
} bl_plan;

typedef struct bl_subscription {
        char id[BL_UUID_LEN + 1];
        char customer_id[BL_UUID_LEN + 1];
        char plan_id[BL_UUID_LEN + 1];
        int64_t quantity;
        bl_sub_state state;
        char currency[4];
        int64_t anchor_ms;
        int64_t period_n;
        int64_t period_start_ms, period_end_ms;
        int64_t trial_end_ms;
        bool cancel_at_period_end;
        int64_t canceled_ms, paused_ms;
        char test_clock_id[BL_UUID_LEN + 1];
        int64_t next_action_ms; /* 0: none */
        char latest_invoice_id[BL_UUID_LEN + 1];
        int32_t history_seq;
        int64_t created_ms, updated_ms;
} bl_subscription;

typedef enum bl_line_kind {
        BL_LINE_SUBSCRIPTION = 0,
        BL_LINE_PRORATION,
        BL_LINE_USAGE,
        BL_LINE_MANUAL,
} bl_line_kind;

typedef struct bl_line {
        bl_line_kind kind;
        char description[BL_LINE_DESC_MAX * 4 + 1];
        int64_t quantity;
        int64_t unit_amount;
        int64_t amount;
        int64_t tax; /* computed when the invoice is made */
        bool taxable;
        int64_t period_start_ms, period_end_ms;
} bl_line;

typedef enum bl_reason {
        BL_REASON_CREATE = 0, /* subscription_create */
        BL_REASON_CYCLE,      /* subscription_cycle */
        BL_REASON_UPDATE,     /* subscription_update */
        BL_REASON_CANCEL,     /* subscription_cancel */
        BL_REASON_MANUAL,     /* manual */
} bl_reason;

typedef struct bl_invoice {
        char id[BL_UUID_LEN + 1];
        char customer_id[BL_UUID_LEN + 1];
        char subscription_id[BL_UUID_LEN + 1]; /* "" for a one-off invoice */
        char number[32];                       /* "" in draft */
        bl_inv_state state;
        bl_reason reason;
        const bl_currency *currency;
        int64_t subtotal, tax, total;
        int64_t balance_applied, amount_due, amount_paid, amount_credited;
        int32_t n_lines;
        int64_t period_start_ms, period_end_ms;
        bool auto_charge;
        int32_t attempt_count;
        int64_t next_attempt_ms; /* 0: none */
        int64_t created_ms, finalized_ms, paid_ms, voided_ms, uncollectible_ms;
        char description[BL_LINE_DESC_MAX * 4 + 1];
} bl_invoice;

/* What is left to pay on an open or uncollectible invoice. */
int64_t bl_invoice_remaining(const bl_invoice *inv);

const char *bl_reason_name(bl_reason r);
const char *bl_line_kind_name(bl_line_kind k);

/* Loads by id in tx's tenant (for_update: locks the row). KS_NOT_FOUND (call not failed) or KS_OK.
 */
int bl_customer_load(bl_tx *tx, const char *id, bool for_update, bl_customer *out);
int bl_plan_load(bl_tx *tx, const char *id, bl_plan *out);
/* The latest version of a code. */
int bl_plan_load_code(bl_tx *tx, const char *code, bl_plan *out);
int bl_sub_load(bl_tx *tx, const char *id, bool for_update, bl_subscription *out);
/*
 * The statements of those loads ($1 the id, or the code), for a caller
 * that sends them in one pipeline with others, and the rows they return
 * read into out: the result is cleared; KS_NOT_FOUND (call not failed) or
 * KS_OK.
 */
extern const char bl_customer_sql_locked[];
extern const char bl_plan_sql_id[];
extern const char bl_plan_sql_code[];
/* The plan of the subscription $1 (its version), and the subscription $1 (bl_sub_read). */
extern const char bl_plan_sql_of_sub[];
extern const char bl_sub_sql_id[];
int bl_customer_from(bl_tx *tx, PGresult *res, bl_customer *out);
int bl_plan_from(bl_tx *tx, PGresult *res, bl_plan *out);

/*
 * What a payment provider says of a subscription (provider_events.c),
 * applied as CancelSubscription would (subscriptions.c): canceled now, to
 * be canceled at its period's end, or not any more. *changed is false, and
 * nothing happens, when the subscription is already so (a canceled one
 * stays canceled); a move the subscription's state forbids is refused as
 * CancelSubscription refuses it. s: loaded and locked by the caller.
 */
typedef enum bl_provider_cancel {
        BL_PROVIDER_CANCEL_NOW,
        BL_PROVIDER_CANCEL_AT_END,
        BL_PROVIDER_CANCEL_WITHDRAW,
} bl_provider_cancel;
int bl_sub_cancel_as_provider(bl_tx *tx, const bl_subscription *s, bl_provider_cancel how,
                              bool *changed);
int bl_invoice_load(bl_tx *tx, const char *id, bool for_update, bl_invoice *out);
/* SELECT lists matching the readers below, for queries of other files. */
extern const char bl_sub_columns[];
extern const char bl_invoice_columns[];
void bl_sub_read(const PGresult *res, int row, bl_subscription *out);
int bl_invoice_read(const PGresult *res, int row, bl_invoice *out);
int bl_plan_read(const PGresult *res, int row, bl_plan *out);
/* The columns of a credit_notes row as bl_credit_note_item reads them. */
#define BL_NOTE_COLUMNS                                                                            \
        "id, number, invoice_id, amount, subtotal, tax, reason, credited_to, created_ms,"          \
        " COALESCE(refund_payment_id::text, ''), refund_reference"
/* A credit_notes row (BL_NOTE_COLUMNS) as a message, for ks_list. */
void bl_credit_note_item(void *item, const PGresult *r, int i);
/* Writes every mutable column of s (and s->updated_ms = now_ms). */
int bl_sub_save(bl_tx *tx, bl_subscription *s, int64_t now_ms);

/* Messages from rows; strings point into the row (keep it alive while the message is used). */
void bl_sub_message(const bl_subscription *s, const bl_plan *plan,
                    Keelson__Billing__V1__Subscription *m);

/* An invoice as a message, with its lines, payments and credit notes when details. */
typedef struct bl_invoice_view {
        Keelson__Billing__V1__Invoice m;
        PGresult *res[3];
        void *blocks[6];
} bl_invoice_view;
/* Line messages (n) of lines, pointing into them. */
void bl_line_messages(const bl_line *lines, size_t n, Keelson__Billing__V1__InvoiceLine *m,
                      Keelson__Billing__V1__InvoiceLine **ptrs);
/*
 * The view of an invoice made in this very call, from what the call holds
 * (its lines, the payment it made or NULL; no credit note yet): no read.
 * KS_RESOURCE_EXHAUSTED when out of memory.
 */
int bl_invoice_view_fresh(bl_invoice_view *v, const bl_invoice *inv, const bl_line *lines, size_t n,
                          const Keelson__Billing__V1__Payment *payment);
/* Strings point into inv and the view: keep both alive while m is used; free the view. */
int bl_invoice_view_make(bl_tx *tx, const bl_invoice *inv, bool details, bl_invoice_view *v);
void bl_invoice_view_free(bl_invoice_view *v);
/*
 * Seals tx (bl_tx_seal) and gives the view the number its invoice got
 * there, if it was finalized in tx: read a reply's rows first, then seal,
 * so the tenant's invoice counter is held only for the last round trips.
 */
int bl_invoice_view_seal(bl_tx *tx, bl_invoice_view *v);
/* Fills m (no lines) from inv alone. */
void bl_invoice_header(const bl_invoice *inv, Keelson__Billing__V1__Invoice *m);
/* Replies {invoice (re-read in tx, with details), payment (may be NULL)}. */
int bl_reply_invoice(bl_tx *tx, const char *invoice_id,
                     const Keelson__Billing__V1__Payment *payment);
/* The same for inv as the caller read it: its details read, then the reply. */
int bl_reply_invoice_of(bl_tx *tx, const bl_invoice *inv,
                        const Keelson__Billing__V1__Payment *payment);

/* ---- time (clock.c) ----------------------------------------------------------------- */

/* The customer's now: its test clock's frozen time, or the wall clock. */
int bl_now_for(bl_tx *tx, const char *test_clock_id, int64_t *now_ms);

/* ---- events (events.c) ---------------------------------------------------------- */

int bl_event_invoice_finalized(bl_tx *tx, const bl_invoice *inv);
int bl_event_invoice_paid(bl_tx *tx, const bl_invoice *inv);
int bl_event_subscription_changed(bl_tx *tx, const bl_subscription *s, int from_state,
                                  const char *event, int64_t at_ms, const char *invoice_id);

/* A credit note as credit_notes.c makes it: what its row and its event carry. */
typedef struct bl_credit_note {
        char id[BL_UUID_LEN + 1];
        char number[32];
        int64_t amount, subtotal, tax;
        char reason[BL_REASON_MAX * 4 + 1];
        const char *credited_to;
        int64_t created_ms;
        bool refund;
        char refund_payment_id[BL_UUID_LEN + 1]; /* refund: the payment, and the provider's id */
        char refund_reference[64];
} bl_credit_note;
/* billing.credit_note_created for n, issued against inv. */
int bl_event_credit_note_created(bl_tx *tx, const bl_invoice *inv, const bl_credit_note *n);
/* users.admin_summary, at most once per transaction. */
int bl_event_summary(bl_tx *tx, const char *reason);
/* The transaction's events as one deferred statement (tx.c, before COMMIT); then none left. */
int bl_events_flush(bl_tx *tx);
void bl_events_clear(bl_tx *tx);

/* ---- postings to the ledger (postings.c: pure but for bl_posting_queue) --------------- */

typedef unsigned __int128 bl_u128;

/* Billing's chart of accounts, per tenant and currency (the ledger's code of each account). */
typedef enum bl_account_kind {
        BL_ACCT_RECEIVABLE = 1, /* per customer: what it owes */
        BL_ACCT_REVENUE = 2,
        BL_ACCT_TAX_PAYABLE = 3,
        BL_ACCT_CASH = 4,
        BL_ACCT_CUSTOMER_CREDIT = 5, /* per customer: credit it holds */
        BL_ACCT_BAD_DEBT = 6,
} bl_account_kind;

typedef enum bl_source_type {
        BL_SRC_INVOICE = 1, /* finalized */
        BL_SRC_PAYMENT = 2, /* a payment that succeeded */
        BL_SRC_CREDIT_NOTE = 3,
        BL_SRC_VOID = 4,          /* an invoice voided */
        BL_SRC_UNCOLLECTIBLE = 5, /* an invoice marked uncollectible: written off */
} bl_source_type;

#define BL_CHAIN_MAX 6

typedef struct bl_transfer {
        bl_u128 id;
        bl_account_kind debit, credit;
        int64_t amount; /* > 0 */
        uint16_t code;  /* what it records: docs/api.md, "Billing in the ledger" */
} bl_transfer;

/* One billing fact as transfers: a linked chain, all or nothing. */
typedef struct bl_chain {
        bl_source_type type;
        char source_id[BL_UUID_LEN + 1];
        char customer_id[BL_UUID_LEN + 1];
        const bl_currency *currency;
        bl_transfer t[BL_CHAIN_MAX];
        size_t n; /* 0: the fact moves no money (a zero invoice) */
} bl_chain;

/* The facts a chain is made from; the fields each type reads are named. */
typedef struct bl_fact {
        bl_source_type type;
        const char *source_id; /* the invoice, payment or credit note */
        const char *customer_id;
        const bl_currency *currency;
        /* INVOICE, VOID: the invoice's totals */
        int64_t subtotal, tax, total, balance_applied;
        /* PAYMENT, CREDIT_NOTE, UNCOLLECTIBLE: the amount; CREDIT_NOTE also subtotal and tax */
        int64_t amount;
        /* PAYMENT, VOID: the invoice was uncollectible (its receivable written off) */
        bool from_uncollectible;
        /* CREDIT_NOTE: to the customer's credit (a paid invoice) instead of its receivable */
        bool to_credit;
        /* CREDIT_NOTE to_credit: paid back from that credit to the customer (a refund) */
        int64_t refunded;
} bl_fact;

/* The fact of an invoice's finalization (BL_SRC_INVOICE) or void (BL_SRC_VOID): its totals. */
bl_fact bl_invoice_fact(const bl_invoice *inv, bl_source_type type, bool from_uncollectible);
/* The chain of a fact (ids derived from the source); false on a malformed fact. */
bool bl_chain_of(const bl_fact *f, bl_chain *out);
/* The ledger id of an account: of the customer for RECEIVABLE and CUSTOMER_CREDIT. */
bl_u128 bl_account_id(bl_account_kind kind, const bl_currency *cur, const char *customer_id);
/* The ledger account for kind, ready for CreateAccounts (ledger = currency numeric). */
void bl_account_of(bl_account_kind kind, const bl_currency *cur, const char *customer_id,
                   Keelson__Ledger__V1__Account *out);
/* The ledger transfer i of a chain (linked to the next but for the last). */
void bl_transfer_of(const bl_chain *c, size_t i, Keelson__Ledger__V1__Transfer *out);
/*
 * Queues the chain of f in tx (billing.postings); nothing for a chain of no
 * transfers. The transaction's postings go out as one insert, with COMMIT
 * (bl_postings_flush, from tx.c), in the order they were queued.
 */
int bl_posting_queue(bl_tx *tx, const bl_fact *f);
int bl_postings_flush(bl_tx *tx);
void bl_postings_clear(bl_tx *tx);

/* ---- payments (provider.c) --------------------------------------------------------- */

/* An idempotency key handed to the provider: "<subscription>/<period start>/<reason>:auto-<n>". */
#define BL_PROVIDER_KEY_MAX 128

/* The first 16 bytes of text's SHA-256 in lower-case hex: the provider keys' and mock ids' digest.
 */
#define BL_DIGEST_HEX_MAX (2 * 16 + 1)
void bl_digest_hex(const char *text, char out[BL_DIGEST_HEX_MAX]);

typedef struct bl_charge {
        bool ok;
        char failure_code[64]; /* card_declined, insufficient_funds, ... */
        char reference[64];    /* the provider's id of the charge */
} bl_charge;

/*
 * Charges amount of cur to the payment method token. The call carries
 * idempotency_key (the attempt: bl_invoice_charge says how it is made): a
 * provider that sees it twice charges once. The built-in mock answers at once, from the token
 * alone: pm_card_visa and pm_card_mastercard succeed; pm_card_chargeDeclined declines
 * (card_declined), pm_card_chargeDeclinedInsufficientFunds (insufficient_funds); any other token is
 * invalid_payment_method.
 */
void bl_provider_charge(const char *token, int64_t amount, const bl_currency *cur,
                        const char *idempotency_key, bl_charge *out);
/*
 * Pays amount of cur back on the charge charge_reference, made to token,
 * with idempotency_key (the credit note): out->ok, or failure_code. The
 * mock refunds its own charges (ch_mock_...), but not those of
 * pm_card_refundFail (declined).
 */
void bl_provider_refund(const char *token, const char *charge_reference, int64_t amount,
                        const bl_currency *cur, const char *idempotency_key, bl_charge *out);

/* ---- invoicing (invoicing.c) ------------------------------------------------------- */

/*
 * A new draft invoice of cust with lines: taxes and totals computed
 * (bl_totals_of at the customer's rate), the invoice and its lines
 * inserted. inv's header (subscription_id, reason, period, auto_charge) is
 * set by the caller; id, totals and created_ms are filled.
 * FAILED_PRECONDITION when the totals overflow.
 */
int bl_invoice_create(bl_tx *tx, const bl_customer *cust, bl_invoice *inv, bl_line *lines, size_t n,
                      int64_t now_ms);
/* inv's id, made before the invoice is (bl_invoice_create keeps an id already set). */
int bl_invoice_new_id(bl_tx *tx, bl_invoice *inv);
/* Appends lines to a draft (taxes and totals made again over all its lines). */
int bl_invoice_add_lines(bl_tx *tx, const bl_customer *cust, bl_invoice *inv, bl_line *lines,
                         size_t n);
/* A date as "2026-01-31" (UTC) for descriptions. */
void bl_date_text(int64_t ms, char out[16]);
/*
 * Finalizes a draft at at_ms: numbered, customer credit applied, the
 * ledger posting queued, open (or paid when nothing is due), events queued.
 * cust is updated (its credit balance) and must be locked by the caller.
 */
int bl_invoice_finalize(bl_tx *tx, bl_customer *cust, bl_invoice *inv, int64_t at_ms);
/*
 * Charges what remains of an open invoice to token (the customer's default
 * when NULL or ""). automatic: a charge of the billing cycle, which starts or
 * moves dunning on failure. *payment (may be NULL) is the payment row made.
 * KS_OK whatever the card said (see payment->status); a failure of the
 * database or FAILED_PRECONDITION (no payment method, nothing due) else.
 */
typedef struct bl_payment_made {
        char id[BL_UUID_LEN + 1];
        bool succeeded;
        int64_t amount;
        char method[16];
        char token[BL_PAYMENT_METHOD_MAX + 1];
        char failure_code[64];
        char reference[BL_REFERENCE_MAX * 4 + 1];
        int64_t created_ms;
} bl_payment_made;
/* The message of a payment made; strings point into p. */
void bl_payment_message(const bl_payment_made *p, Keelson__Billing__V1__Payment *m);
/*
 * sub: the invoice's subscription when the caller holds it locked (it is
 * updated in place, the caller saves it), or NULL (loaded, changed and
 * saved here when the invoice has one).
 */
int bl_invoice_charge(bl_tx *tx, bl_customer *cust, bl_invoice *inv, bl_subscription *sub,
                      const char *token, bool automatic, int64_t at_ms, bl_payment_made *out);
/* Applies a succeeded payment of amount (<= remaining) to inv: row, posting, paid, events. */
int bl_invoice_apply_payment(bl_tx *tx, bl_invoice *inv, bl_subscription *sub, bl_payment_made *p);
/*
 * A payment of open invoice inv that failed at the provider (p: failed,
 * its code): the failed payment's row, and its active subscription past
 * due, as after a declined automatic charge; keelson schedules no retry of
 * its own (the provider retries).
 */
int bl_invoice_payment_failed(bl_tx *tx, bl_invoice *inv, bl_payment_made *p);
/* The tenant's next number of kind (1 invoices "INV", 2 credit notes "CN"): "INV-000042". */
int bl_next_number(bl_tx *tx, int kind, const char *prefix, char *out, size_t out_len);
/* Adds amount (> 0) to a customer's credit balance (the row is locked by the update). */
int bl_customer_credit(bl_tx *tx, const char *customer_id, int64_t amount);
/*
 * Numbers the invoices finalized in tx so far, in the order they were
 * finalized, and queues their invoice_finalized and invoice_paid events,
 * which carry the number. The numbers come from the tenant's counter moved
 * once for all of them: taken ahead (bl_numbers_take_stmt), else here, in
 * one round trip that also carries the waiting writes. Invoices whose
 * inserts still wait are inserted numbered rather than updated; each
 * numbered statement goes with COMMIT. Called as late as can be: the
 * counter's row is held from the take to COMMIT, so the tenant's
 * finalizations wait for each other only that long. bl_tx_run does it
 * before COMMIT; a reply that shows an invoice finalized in tx does it
 * first, then bl_number_of.
 */
int bl_tx_seal(bl_tx *tx);
/*
 * The statement that takes n invoice numbers of the tenant's counter now,
 * for a transaction that knows how many invoices it will finalize (a group
 * of creations: one each), to send last in the caller's pipeline;
 * bl_numbers_taken then records them. The seal gives them, in the order
 * the invoices were finalized, in the invoices' own inserts, which then go
 * with COMMIT: no round trip of its own. The counter is held from the take
 * to COMMIT. A seal that finds another count of invoices to number fails
 * the transaction (a number left unused would be a gap).
 */
void bl_numbers_take_stmt(bl_tx *tx, int64_t n, ks_pg_stmt *out);
int bl_numbers_taken(bl_tx *tx);
/*
 * invoice_paid for inv: now when inv has its number, else when tx seals
 * (an invoice finalized and paid in one transaction is announced numbered).
 */
int bl_invoice_paid_event(bl_tx *tx, const bl_invoice *inv);
/* The number given to invoice id in tx by bl_tx_seal; NULL when none. */
const char *bl_number_of(const bl_tx *tx, const char *invoice_id);
void bl_tx_numbered_free(bl_tx *tx);
/* Writes the invoice's mutable columns back (not its number: bl_tx_seal's). */
int bl_invoice_save(bl_tx *tx, const bl_invoice *inv);
/* Moves inv by ev (the table of model.h); FAILED_PRECONDITION for an illegal move. */
int bl_invoice_move(bl_tx *tx, bl_invoice *inv, bl_inv_event ev, int64_t at_ms);
/*
 * After an invoice of a subscription left dunning (paid, voided, written
 * off): a past_due subscription with no invoice left in dunning becomes
 * active again, by ev: payment_succeeded when a payment settled it,
 * dues_cleared when a void, a write-off or a credit note did.
 */
int bl_sub_after_invoice(bl_tx *tx, const bl_invoice *inv, bl_subscription *sub, bl_sub_event ev,
                         int64_t at_ms);

/* ---- subscriptions (lifecycle.c) ------------------------------------------------------ */

/*
 * Moves s by ev at at_ms (the table of model.h): state, history row, the
 * subscription_changed event. FAILED_PRECONDITION (call failed) when the
 * table forbids it. Does not save s.
 */
int bl_sub_move(bl_tx *tx, bl_subscription *s, bl_sub_event ev, int64_t at_ms,
                const char *invoice_id, const char *detail);
/* A history row and event for a step that is not a move (creation). */
int bl_sub_record(bl_tx *tx, bl_subscription *s, int from_state, const char *event, int64_t at_ms,
                  const char *invoice_id, const char *detail);
/* The time s must next be looked at (0: never): trial end, period end, a dunning retry. */
int bl_sub_plan_next(bl_tx *tx, bl_subscription *s);
/* The same when the earliest dunning retry of its invoices is known (0: none). */
void bl_sub_plan_next_known(bl_subscription *s, int64_t retry_ms);
/*
 * Runs the one action due for s at s->next_action_ms (<= now_ms): a trial's
 * end, a renewal or cancellation at the period's end, a dunning retry.
 * *ran is false when nothing was due. s is saved.
 */
int bl_sub_step(bl_tx *tx, bl_subscription *s, int64_t now_ms, bool *ran);
/* The full length of s's current period (a first partial one: the interval before the anchor). */
int bl_sub_full_period(const bl_subscription *s, const bl_plan *plan, int64_t *start_ms,
                       int64_t *end_ms);
/* The line of s's current period, billed in advance (flat or per unit; none when metered). */
int bl_sub_period_lines(const bl_subscription *s, const bl_plan *plan, bl_line *lines, size_t *n);
/* The period of s's plan that starts at start_ms: a part before the anchor (n -1), or a full one.
 */
int bl_sub_period_from(const bl_subscription *s, const bl_plan *plan, int64_t start_ms, int64_t *n,
                       int64_t *ps, int64_t *pe);
/* Recorded usage of s in [from, to). */
int bl_sub_usage(bl_tx *tx, const bl_subscription *s, int64_t from_ms, int64_t to_ms,
                 int64_t *units);
/* Appends the usage line of a metered plan over [from, to) (none for other plans). */
int bl_sub_usage_line(bl_tx *tx, const bl_subscription *s, const bl_plan *plan, int64_t from_ms,
                      int64_t to_ms, bl_line *lines, size_t *n);
/*
 * The invoice of s's current period (reason): its line in advance (a
 * creation's and a renewal's only), usage of [usage_from, usage_to) for a
 * metered plan, and the pending items; finalized at at_ms and charged when
 * the customer has a payment method. inv->id may be set beforehand; with
 * nothing to bill at a cancellation or a change no invoice is made (inv->id
 * "").
 */
int bl_sub_bill(bl_tx *tx, bl_subscription *s, const bl_plan *plan, bl_customer *cust,
                bl_reason reason, int64_t usage_from, int64_t usage_to, int64_t at_ms,
                bl_invoice *inv);
/*
 * The subscription_update invoice of a change that started a new cycle at
 * at_ms (another interval, changes.c): s's new period in advance and the
 * pending items, finalized and charged as bl_sub_bill's.
 */
int bl_sub_bill_new_cycle(bl_tx *tx, bl_subscription *s, const bl_plan *plan, bl_customer *cust,
                          int64_t at_ms, bl_invoice *inv);

/* ---- subscriptions: shared by the methods (subscriptions.c, changes.c) ------------------- */

/* The plan a request names (a version id, or a code's latest); not_found, archived refused. */
int bl_plan_named(bl_tx *tx, const char *id, const char *code, bl_plan *out);
/* Replies {subscription (with its plan: read when NULL), latest_invoice (may be NULL)}. */
int bl_reply_subscription(bl_tx *tx, const bl_subscription *s, const bl_plan *plan,
                          const bl_invoice *latest);
/* A pending credit for the unused rest [now, period end) of s's period on plan. */
int bl_proration_credit(bl_tx *tx, const bl_subscription *s, const bl_plan *plan, int64_t now_ms,
                        const char *what);

/* ---- the relay and the scheduler ------------------------------------------------------ */

int bl_relay_start(bl_relay **out, bl_service *svc);
void bl_relay_stop(bl_relay *r);
/*
 * One call of keelson.ledger.v1.LedgerService/<method> ("CreateTransfers")
 * with `in`, acting for tenant_id as its admin, never resent (relay.c; the
 * relay and reconciliation share it). deadline_unix_ms 0: now +
 * ledger_timeout_ms. KS_OK and *out (of out_type: free it with
 * protobuf_c_message_free_unpacked), or the call's code with the ledger's
 * message in msg (KS_MESSAGE_MAX bytes, may be NULL) and *out NULL.
 */
int bl_ledger_call(bl_service *svc, const char *tenant_id, const char *request_id,
                   const char *method, int64_t deadline_unix_ms, const ProtobufCMessage *in,
                   const ProtobufCMessageDescriptor *out_type, ProtobufCMessage **out, char *msg);
/* A code after which the same call may succeed later (unavailable, deadline, aborted, busy). */
bool bl_ledger_transient(int code);
int bl_scheduler_start(bl_scheduler **out, bl_service *svc);
void bl_scheduler_stop(bl_scheduler *s);

/* ---- handlers ------------------------------------------------------------- */

int bl_create_customer(ks_call *call);
int bl_get_customer(ks_call *call);
int bl_update_customer(ks_call *call);
int bl_list_customers(ks_call *call);
int bl_archive_customer(ks_call *call);
int bl_create_plan(ks_call *call);
int bl_get_plan(ks_call *call);
int bl_update_plan(ks_call *call);
int bl_list_plans(ks_call *call);
int bl_archive_plan(ks_call *call);
int bl_create_test_clock(ks_call *call);
int bl_get_test_clock(ks_call *call);
int bl_advance_test_clock(ks_call *call);
int bl_create_subscription(ks_call *call);
void bl_create_subscriptions(ks_call *const *calls, int *codes, int n);
int bl_get_subscription(ks_call *call);
int bl_list_subscriptions(ks_call *call);
int bl_cancel_subscription(ks_call *call);
int bl_pause_subscription(ks_call *call);
int bl_resume_subscription(ks_call *call);
int bl_change_subscription(ks_call *call);
int bl_preview_change(ks_call *call);
int bl_list_subscription_history(ks_call *call);
int bl_record_usage(ks_call *call);
int bl_create_invoice(ks_call *call);
int bl_add_invoice_lines(ks_call *call);
int bl_finalize_invoice(ks_call *call);
int bl_get_invoice(ks_call *call);
int bl_list_invoices(ks_call *call);
int bl_pay_invoice(ks_call *call);
int bl_record_payment(ks_call *call);
int bl_void_invoice(ks_call *call);
int bl_mark_uncollectible(ks_call *call);
int bl_create_credit_note(ks_call *call);
int bl_list_credit_notes(ks_call *call);
int bl_get_reconciliation(ks_call *call);
int bl_get_billing_summary(ks_call *call);
int bl_apply_provider_event(ks_call *call);

#endif
