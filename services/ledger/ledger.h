/*
 * keelson-ledger internals: TigerBeetle's double-entry contract on
 * PostgreSQL, per tenant.
 *
 * How a batch runs (transfers.c, accounts.c): one transaction per batch.
 *   1. BEGIN, the runtime role, the tenant, and the tenant's clock row
 *      (locked: it serialises a tenant's writers and hands out the batch's
 *      strictly increasing timestamps);
 *   2. every account the batch touches, and every transfer and failed id
 *      it refers to, each found by its key (LG_BY_KEYS); the clock is the
 *      only lock, and every writer takes it first;
 *   3. the batch runs in memory in machine.c, event by event, exactly as
 *      TigerBeetle's state machine would, with linked chains rolled back
 *      through an undo log;
 *   4. what changed goes back in one statement of set-based writes (unnest
 *      of arrays), then COMMIT.
 * 1 and 2 travel in one libpq pipeline, 4 in another: two round trips per
 * batch, whatever its size.
 *
 * Files: machine.c (the pure state machine: no I/O, unit of the contract),
 * map.c (u128 -> index hash map), u128.c (tenant ids; 128-bit text is ks_u128.h),
 * convert.c (protobuf <-> structs), db.c (transactions on ks_pg_pipeline, arrays,
 * retries), rows.c (row readers, the write statement), accounts.c,
 * transfers.c, queries.c (handlers), imported.c (what an imported batch is checked
 * against), group.c (a tenant's concurrent batches in one
 * transaction), expiry.c (the sweeper thread), main.c
 * (configuration and wiring); tests/ (the machine's unit tests).
 */
#ifndef LEDGER_H
#define LEDGER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "keelson/ledger/v1/ledger.pb-c.h"
#include "ks_metrics.h"
#include "ks_pg.h"
#include "ks_rpc.h"
#include "ks_service.h"
#include "ks_ticker.h"
#include "ks_u128.h"

/* ---- 128-bit values ------------------------------------------------------ */

/*
 * TigerBeetle's u128 and its text forms live in core (ks_u128.h), where
 * billing reads them too; these are the ledger's names for them.
 */
typedef ks_u128 u128;
#define U128_MAX KS_U128_MAX

#define LG_UUID_LEN   KS_U128_UUID_LEN /* text form of a u128 stored as uuid */
#define LG_DEC128_LEN KS_U128_DEC_LEN  /* decimal digits of 2^128 - 1 */
#define LG_INT8_LEN   20               /* "-9223372036854775808" */
#define LG_TENANT_LEN 36

static inline u128 lg_u128(uint64_t hi, uint64_t lo)
{
        return ks_u128_of(hi, lo);
}
static inline uint64_t lg_hi(u128 v)
{
        return ks_u128_hi(v);
}
static inline uint64_t lg_lo(u128 v)
{
        return ks_u128_lo(v);
}

/* Writers NUL-terminate and return the length. */
static inline int lg_u128_to_uuid(u128 v, char out[LG_UUID_LEN + 1])
{
        return ks_u128_to_uuid(v, out);
}
static inline int lg_u128_to_dec(u128 v, char out[LG_DEC128_LEN + 1])
{
        return ks_u128_to_dec(v, out);
}
/* Parsers return 0, or -1 for text that is not exactly that form. */
static inline int lg_uuid_to_u128(const char *s, u128 *out)
{
        return ks_u128_from_uuid(s, out);
}
static inline int lg_dec_to_u128(const char *s, u128 *out)
{
        return ks_u128_from_dec(s, out);
}
/* A tenant id from the caller context: 36 characters, hex and dashes (u128.c). */
bool lg_tenant_valid(const char *s);

/* ---- limits ------------------------------------------------------------- */

#define LG_BATCH_MAX          KS_RPC_ITEMS_MAX /* events per request (ks_rpc.h) */
#define LG_ACCOUNTS_PER_EVENT 4 /* a post may name 2 accounts and its pending 2 others */
#define LG_TX_RETRIES_MAX     20
#define LG_TIMEOUT_NS_PER_S   1000000000ull
/* The timestamps an imported event may carry: TigerBeetle's range (its top bit is a tombstone). */
#define LG_TIMESTAMP_MIN 1ull
#define LG_TIMESTAMP_MAX ((uint64_t)INT64_MAX)

/* ---- flags (TigerBeetle's bits; see ledger.proto) ------------------------ */

enum {
        LG_AF_LINKED = 1u << 0,
        LG_AF_DEBITS_MUST_NOT_EXCEED_CREDITS = 1u << 1,
        LG_AF_CREDITS_MUST_NOT_EXCEED_DEBITS = 1u << 2,
        LG_AF_HISTORY = 1u << 3,
        LG_AF_IMPORTED = 1u << 4,
        LG_AF_CLOSED = 1u << 5,
        LG_AF_KNOWN = LG_AF_LINKED | LG_AF_DEBITS_MUST_NOT_EXCEED_CREDITS |
                      LG_AF_CREDITS_MUST_NOT_EXCEED_DEBITS | LG_AF_HISTORY | LG_AF_IMPORTED |
                      LG_AF_CLOSED,
};

enum {
        LG_TF_LINKED = 1u << 0,
        LG_TF_PENDING = 1u << 1,
        LG_TF_POST = 1u << 2,
        LG_TF_VOID = 1u << 3,
        LG_TF_BALANCING_DEBIT = 1u << 4,
        LG_TF_BALANCING_CREDIT = 1u << 5,
        LG_TF_CLOSING_DEBIT = 1u << 6,
        LG_TF_CLOSING_CREDIT = 1u << 7,
        LG_TF_IMPORTED = 1u << 8,
        LG_TF_KNOWN = (1u << 9) - 1,
};

enum {
        LG_QUERY_REVERSED = 1u << 0, /* QueryFilter.flags */
};

enum {
        LG_FILTER_DEBITS = 1u << 0,
        LG_FILTER_CREDITS = 1u << 1,
        LG_FILTER_REVERSED = 1u << 2,
        LG_FILTER_KNOWN = (1u << 3) - 1,
};

/* State of a pending transfer (ledger.pending_transfers.status). */
enum {
        LG_PENDING_NONE = 0, /* not a pending transfer */
        LG_PENDING_PENDING = 1,
        LG_PENDING_POSTED = 2,
        LG_PENDING_VOIDED = 3,
        LG_PENDING_EXPIRED = 4,
};

/* ---- result codes: the numbers of ledger.proto --------------------------- */

#define LG_AR(name) KEELSON__LEDGER__V1__CREATE_ACCOUNTS_RESPONSE__RESULT__##name
#define LG_TR(name) KEELSON__LEDGER__V1__CREATE_TRANSFERS_RESPONSE__RESULT__##name

/* True for the failures TigerBeetle remembers with the id (id_already_failed). */
bool lg_transfer_result_transient(int result);

/* ---- records ------------------------------------------------------------ */

typedef struct lg_account {
        u128 id;
        u128 debits_pending, debits_posted, credits_pending, credits_posted;
        u128 user_data_128;
        uint64_t user_data_64;
        uint32_t user_data_32;
        uint32_t ledger;
        uint32_t code; /* checked <= 65535 at the request boundary */
        uint32_t flags;
        uint64_t timestamp;
} lg_account;

typedef struct lg_transfer {
        u128 id;
        u128 debit_account_id, credit_account_id;
        u128 amount;
        u128 pending_id;
        u128 user_data_128;
        uint64_t user_data_64;
        uint32_t user_data_32;
        uint32_t timeout;
        uint32_t ledger;
        uint32_t code;
        uint32_t flags;
        uint64_t timestamp;
} lg_transfer;

/*
 * The fields of the two records, X(name, kind), in the order of their
 * columns (LG_ACCOUNT_COLS, LG_TRANSFER_COLS). The kind says how a field is
 * stored and sent: ID a u128 stored as uuid, AMOUNT a u128 stored as
 * numeric (both travel as <name> and <name>_hi in ledger.proto), U64 and
 * U32 stored as int8. One list drives the row readers (rows.c) and the
 * protobuf conversions (convert.c).
 */
#define LG_ACCOUNT_FIELDS(X)                                                                       \
        X(id, ID)                                                                                  \
        X(debits_pending, AMOUNT)                                                                  \
        X(debits_posted, AMOUNT)                                                                   \
        X(credits_pending, AMOUNT)                                                                 \
        X(credits_posted, AMOUNT)                                                                  \
        X(user_data_128, ID)                                                                       \
        X(user_data_64, U64)                                                                       \
        X(user_data_32, U32)                                                                       \
        X(ledger, U32)                                                                             \
        X(code, U32)                                                                               \
        X(flags, U32)                                                                              \
        X(timestamp, U64)
#define LG_TRANSFER_FIELDS(X)                                                                      \
        X(id, ID)                                                                                  \
        X(debit_account_id, ID)                                                                    \
        X(credit_account_id, ID)                                                                   \
        X(amount, AMOUNT)                                                                          \
        X(pending_id, ID)                                                                          \
        X(user_data_128, ID)                                                                       \
        X(user_data_64, U64)                                                                       \
        X(user_data_32, U32)                                                                       \
        X(timeout, U32)                                                                            \
        X(ledger, U32)                                                                             \
        X(code, U32)                                                                               \
        X(flags, U32)                                                                              \
        X(timestamp, U64)

/* ---- map.c: u128 -> int32 open-addressing hash map ----------------------- */

typedef struct lg_map_slot {
        u128 key;
        int32_t value;
        uint32_t gen; /* the slot is in use when gen == the map's gen */
} lg_map_slot;

typedef struct lg_map {
        lg_map_slot *slots;
        uint32_t mask; /* capacity - 1, capacity a power of two */
        uint32_t gen;
        uint32_t count;
        uint32_t count_max; /* keeps the load factor at or below 1/2 */
} lg_map;

/* Room for at least n keys. Returns 0 or -1 (no memory). */
int lg_map_init(lg_map *m, uint32_t n);
void lg_map_fini(lg_map *m);
/* Empties the map in O(1). */
void lg_map_clear(lg_map *m);
/* The value of key, or -1. */
int32_t lg_map_get(const lg_map *m, u128 key);
/* Inserts or overwrites. Returns 0, or -1 when full (a bug: sized for the batch). */
int lg_map_put(lg_map *m, u128 key, int32_t value);

/* ---- machine.c: the state machine over a batch's rows -------------------- */

typedef struct lg_xfer {
        lg_transfer t;
        u128 pending_amount;    /* a post: the amount of its pending transfer */
        uint64_t expires_at_ns; /* a pending transfer: 0 = never */
        uint8_t status;         /* LG_PENDING_* */
        uint8_t status_loaded;  /* as read from the database */
} lg_xfer;

typedef struct lg_hist {
        u128 account_id;
        u128 transfer_id;
        uint8_t side; /* 1: the account was debited, 2: credited */
        u128 debits_pending, debits_posted, credits_pending, credits_posted;
        uint64_t timestamp;
} lg_hist;

typedef struct lg_undo lg_undo;

/*
 * A batch's working set: the rows read from the database (loaded), what the
 * events created, and the history rows they produced. Sized once for the
 * largest batch (TigerBeetle's static allocation): no allocation while a
 * batch runs.
 */
typedef struct lg_batch {
        int events_max;
        lg_account *accounts; /* loaded first, then created (CreateAccounts) */
        lg_account *accounts_orig;
        int n_accounts, n_accounts_loaded, accounts_max;
        lg_map account_ix;
        lg_xfer *xfers; /* loaded first, then created */
        int n_xfers, n_xfers_loaded, xfers_max;
        lg_map xfer_ix;
        u128 *failed_ids; /* loaded first, then new */
        uint8_t *failed_results;
        int n_failed, n_failed_loaded, failed_max;
        lg_map failed_ix;
        lg_hist *hist;
        int n_hist, hist_max;
        lg_undo *undo;
        int n_undo, undo_max;
        uint64_t exists_ts; /* the existing object's, after an event answered exists */
        /*
         * An imported batch's context (lg_batch_load_import): the latest
         * timestamp of the batch's kind of object (an imported event must be
         * later), and the timestamps that other objects already hold among
         * those the events carry (sorted; an imported event may not take one).
         */
        uint64_t import_ts_max;
        uint64_t *taken_ts;
        int n_taken_ts;
} lg_batch;

int lg_batch_new(lg_batch **out, int events_max);
void lg_batch_free(lg_batch *b);
/* Forgets everything: the start of a batch (and of each retry). */
void lg_batch_reset(lg_batch *b);

/* Loading rows read from the database; call before running. 0 or -1 (full). */
int lg_batch_load_account(lg_batch *b, const lg_account *a);
int lg_batch_load_transfer(lg_batch *b, const lg_transfer *t, uint8_t status,
                           uint64_t expires_at_ns, u128 pending_amount);
int lg_batch_load_failed(lg_batch *b, u128 id, int result);
/*
 * An imported batch's context: ts_max, the latest timestamp of an object of
 * the batch's kind (0: none), and n timestamps already held by others.
 * 0 or -1 (more than the batch's size).
 */
int lg_batch_load_import(lg_batch *b, uint64_t ts_max, const uint64_t *taken, int n);

/*
 * Runs the events in order; event i gets timestamp base_ts + i, or its own
 * when imported (which must be before base_ts + n - 1, the batch's time).
 * results[i] receives a CreateAccountsResponse/CreateTransfersResponse
 * result code and timestamps[i] (when not NULL) the result's timestamp: the
 * existing object's for exists, an imported event's own, else base_ts + i.
 */
void lg_create_accounts(lg_batch *b, const lg_account *events, int n, uint64_t base_ts,
                        uint8_t *results, uint64_t *timestamps);
void lg_create_transfers(lg_batch *b, const lg_transfer *events, int n, uint64_t base_ts,
                         uint8_t *results, uint64_t *timestamps);
/*
 * Expires the pending transfers ids (those still pending; others are
 * skipped): releases their pending amounts and reopens accounts they
 * closed. Expiry i gets timestamp base_ts + i (for the history rows).
 * Returns how many expired.
 */
int lg_expire(lg_batch *b, const u128 *ids, int n, uint64_t base_ts);

/* Whether a loaded account changed (balances or flags). */
bool lg_batch_account_changed(const lg_batch *b, int i);

/* ---- service state ------------------------------------------------------ */

#define LG_INTERNAL_MSG "internal error"

typedef struct lg_groups lg_groups;

/* ---- configuration and start (setup.c) ---------------------------------- */

typedef struct lg_config {
        ks_service_settings base; /* the skeleton's shared settings */
        int64_t batch_max;
        int64_t tx_retries;
        int64_t expiry_interval_ms;
        int64_t expiry_batch_max;
        int64_t expiry_tenants_max;
        bool group_batches;
} lg_config;

/* The ledger's own variables, beside the shared ones of ks_service.h. */
extern const ks_config_var lg_config_vars[];
extern const size_t lg_config_vars_n;

/* The service's methods: methods.def with its handlers (methods.c). */
extern const ks_method_table lg_methods;

typedef struct lg_service {
        const lg_config *cfg;
        ks_pg_pool *pool;
        int batch_max;
        lg_groups *groups; /* NULL: every batch runs alone (group.c) */
        int tx_retries;
        int expiry_interval_ms;
        int expiry_batch_max;
        int expiry_tenants_max;
        /* the sweeper thread (expiry.c) */
        ks_ticker *sweeper;
        void *sweeper_state; /* an lg_worker sized for expiry_batch_max */
        /* metrics */
        ks_counter *events_ok[2];     /* [0] accounts, [1] transfers */
        ks_counter *events_failed[2]; /* any result but ok */
        ks_counter *retries;
        ks_counter *reruns;
        ks_counter *grouped; /* batches that shared their transaction with others */
        ks_counter *expired;
        ks_histogram *batch_seconds;
} lg_service;

/* The hooks of ks_service_spec (setup.c). */
int lg_check_config(void *service, char *err, size_t err_len);
int lg_start(void *service, ks_service_env *env);
void lg_stop(void *service);

int lg_create_accounts_handler(ks_call *call);
int lg_create_transfers_handler(ks_call *call);
int lg_lookup_accounts_handler(ks_call *call);
int lg_lookup_transfers_handler(ks_call *call);
int lg_get_account_transfers_handler(ks_call *call);
int lg_get_account_balances_handler(ks_call *call);
int lg_get_trial_balance_handler(ks_call *call);
int lg_query_accounts_handler(ks_call *call);
int lg_query_transfers_handler(ks_call *call);

/* ---- convert.c ---------------------------------------------------------- */

/* Request -> struct. Returns KS_OK, or KS_INVALID_ARGUMENT with a message in err. */
int lg_account_from_pb(const Keelson__Ledger__V1__Account *in, lg_account *out, char *err,
                       size_t err_len);
int lg_transfer_from_pb(const Keelson__Ledger__V1__Transfer *in, lg_transfer *out, char *err,
                        size_t err_len);
/* Struct -> reply message (no allocation: every field is a number). */
void lg_account_to_pb(const lg_account *in, Keelson__Ledger__V1__Account *out);
void lg_transfer_to_pb(const lg_transfer *in, Keelson__Ledger__V1__Transfer *out);
/* The repeated fields of a create batch's reply. */
typedef struct lg_results_reply {
        ProtobufCMessage *resp;
        size_t *n_results;
        int **results; /* protobuf-c enums are int-sized */
        size_t *n_timestamps;
        uint64_t **timestamps;
} lg_results_reply;

/*
 * Replies to a create batch: results[0..n) and timestamps[0..n) into the
 * reply's repeated fields, counted in the events metrics of kind (0
 * accounts, 1 transfers) as ok or failed.
 */
int lg_reply_results(ks_call *call, int kind, const uint8_t *results, const uint64_t *timestamps,
                     int n, uint8_t ok, const lg_results_reply *out) KS_MUST_CHECK;
/*
 * A create batch's request: a caller who may write (lg_require_caller), and
 * 1 to batch_max events in its list named what ("transfers"). KS_OK, or the
 * code of the reply sent.
 */
int lg_check_batch(ks_call *call, size_t n, const char *what) KS_MUST_CHECK;
/* Ids from the parallel ids/ids_hi lists. KS_OK or KS_INVALID_ARGUMENT. */
int lg_ids_from_pb(size_t n_ids, const uint64_t *ids, size_t n_hi, const uint64_t *hi, int max,
                   u128 *out, char *err, size_t err_len);

/* ---- db.c --------------------------------------------------------------- */

/*
 * A statement's parameters, built one after another in one growable buffer
 * bounded by LG_ARGS_MAX_BYTES: scalars as text, arrays in PostgreSQL's
 * binary array format (uuid as 16 bytes, numeric as base-10000 digits,
 * int8 as 8 bytes, all big-endian), so that the server parses no text for
 * the thousands of values of a batch. lg_args_params() turns the recorded
 * offsets into parameters once appending is over.
 */
#define LG_ARGS_MAX_BYTES (64u << 20)
#define LG_PARAMS_MAX     48

typedef enum lg_elem { LG_ELEM_UUID, LG_ELEM_NUMERIC, LG_ELEM_INT8 } lg_elem;

/* One parameter as libpq takes it (type 0: the statement's cast decides). */
typedef ks_pg_param lg_param;

typedef struct lg_args {
        char *buf;
        size_t len, cap;
        size_t offsets[LG_PARAMS_MAX];
        size_t lengths[LG_PARAMS_MAX];
        unsigned int types[LG_PARAMS_MAX]; /* 0 for a text scalar */
        int n_params;
        bool failed; /* out of memory, over LG_ARGS_MAX_BYTES, or misuse */
        bool in_array;
        lg_elem elem;  /* of the open array */
        int32_t items; /* of the open array */
} lg_args;

void lg_args_reset(lg_args *t);
void lg_args_fini(lg_args *t);
/* A scalar parameter, as text. */
void lg_args_text(lg_args *t, const char *s);
/* An array parameter of one element type: begin, items of that type, end. */
void lg_args_array_begin(lg_args *t, lg_elem elem);
void lg_args_array_uuid(lg_args *t, u128 v);
void lg_args_array_dec(lg_args *t, u128 v);
void lg_args_array_i64(lg_args *t, int64_t v);
void lg_args_array_end(lg_args *t);
/* Fills params[] (at most LG_PARAMS_MAX); returns the count, or -1 if failed. */
int lg_args_params(lg_args *t, lg_param *params);

/*
 * A connection in a transaction acting for one tenant. The caller fills
 * svc, request_id, tenant and args (a buffer it keeps between calls);
 * lg_tx_run fills the rest.
 */
typedef struct lg_tx {
        lg_service *svc;
        const char *request_id;
        const char *tenant; /* checked by lg_tenant_valid */
        lg_args *args;
        PGconn *conn;
        uint64_t base_ts; /* the first of the timestamps reserved */
        int attempt;      /* 0, then 1.. on retries */
        bool exact;       /* false until a batch asks for LG_RERUN_EXACT */
        /* A failure fn plans for (a SQLSTATE, NULL: none): lg_run has it logged at debug. */
        const char *expected_sqlstate;
        /* lg_run's state */
        int reserve;
        bool read_only;
        bool opened;    /* the opening statements were sent */
        bool committed; /* a COMMIT went with the last statements */
        char reserve_text[16];
        const char *prelude_params[2];
} lg_tx;

/* Monotonic microseconds, for the timings of the debug log. */
int64_t lg_now_us(void);

/*
 * Runs fn in a transaction as the runtime role for tx->tenant, retried up to
 * svc->tx_retries times on a serialization failure, a deadlock or a unique
 * violation (a concurrent insert of the same id: the retry sees it).
 * reserve_ts > 0 first locks the tenant's clock and reserves that many
 * timestamps (tx->base_ts); a writer must (the clock is the only lock that
 * keeps a tenant's writers apart), so reserve_ts 0 without read_only is
 * refused as an internal error; read_only runs a read-only REPEATABLE READ
 * transaction (one snapshot for every statement). fn returns KS_OK to
 * commit; any other code rolls back and is returned, but LG_RERUN_EXACT,
 * which rolls back and runs fn again at once with tx->exact set (not counted
 * as a retry): fn guessed something it must now read (transfers.c).
 */
#define LG_RERUN_EXACT (KS_CODE_COUNT + 1)

typedef int (*lg_tx_fn)(lg_tx *tx, void *arg);
int lg_tx_run(lg_tx *tx, int reserve_ts, bool read_only, lg_tx_fn fn, void *arg);

/* The transaction of a call: its service, request id, caller's tenant and worker's args. */
lg_tx lg_call_tx(ks_call *call);

/* One statement of a pipeline (ks_pg_pipeline); out (may be NULL) receives its result. */
typedef ks_pg_stmt lg_stmt;

/*
 * Runs the statements in one round trip (libpq's pipeline mode), preceded
 * by the transaction's opening statements (BEGIN, role, tenant, clock) when
 * they have not been sent yet, and followed by COMMIT when commit is true.
 * Returns KS_OK (every out filled) or the code of the first failure (every
 * out NULL), mapped like ks_pg_exec's.
 */
int lg_run(lg_tx *tx, const lg_stmt *stmts, int n, bool commit);

/* One statement (lg_run without commit). */
int lg_exec(lg_tx *tx, const char *sql, int n, const char *const *params, PGresult **out);
/* The same with parameters from lg_args_params. */
int lg_exec_args(lg_tx *tx, const char *sql, int n, const lg_param *args, PGresult **out);

/* Parsers of result fields; a malformed field is an internal error (-1). */
int lg_field_u128_uuid(const PGresult *r, int row, int col, u128 *out);
int lg_field_u128_dec(const PGresult *r, int row, int col, u128 *out);
int64_t lg_field_i64(const PGresult *r, int row, int col);

/* The caller context checks: authenticated, a valid tenant; writes refuse viewers. */
int lg_require_caller(ks_call *call, bool write);

/* Maps a database failure to the reply (as auth_db_fail). */
int lg_db_fail(ks_call *call, int code);

/* Per worker thread: the batch working set and conversion buffers. */
typedef struct lg_worker {
        lg_batch *batch;
        lg_account *account_events;
        lg_transfer *transfer_events;
        uint8_t *results;
        uint64_t *result_ts; /* one per event: the results' timestamps */
        u128 *ids;           /* lookups */
        lg_args args;
} lg_worker;

/* worker.c: ks_rpc_server_options' worker_init / worker_fini, and the sweeper's. */
int lg_worker_init(void *service, int index, void **state);
void lg_worker_fini(void *service, void *state);

/* ---- group.c: a tenant's concurrent batches in one transaction ------------ */

#define LG_GROUP_MAX 64

/* One CreateTransfers batch waiting for, or taking part in, a group. */
typedef struct lg_member {
        lg_worker *w; /* its events in w->transfer_events, its results into w->results */
        int n;
        const char *request_id;
        int rc; /* set by the group's run */
        /* group.c's */
        bool done, lead;
        pthread_cond_t cv;
        struct lg_member *next;
} lg_member;

/* Runs a group (k >= 1, m[0] the calling thread's own): sets every m[i]->rc and results. */
typedef void (*lg_group_fn)(lg_service *svc, const char *tenant, lg_member *const *m, int k);

int lg_groups_new(lg_groups **out);
void lg_groups_free(lg_groups *g);

/*
 * Runs me's batch through fn, alone or with the tenant's other batches that
 * wait; returns me->rc once its group has run.
 */
int lg_group_run(lg_service *svc, const char *tenant, lg_member *me, lg_group_fn fn);

/* Batches of the tenant waiting for a group to take them (tests watch this). */
int lg_group_waiting(lg_service *svc, const char *tenant);

/* ---- rows.c: shared row readers and the write statement ------------------ */

/*
 * The rows of table whose ids are in the uuid[] parameter param, each
 * found by its primary key: a nested loop over the distinct ids whose inner
 * side, fenced by OFFSET 0, can only be a key lookup. Given the ids as an
 * array filter instead (id = ANY (...)), the planner may read every row of
 * the tenant and test each against the array, which grows with the tenant
 * (1.4 s for 8,190 ids once a tenant had 57,000 transfers, when the
 * statistics did not know the tenant yet). $1 is the tenant.
 */
#define LG_BY_KEYS(cols, table, param)                                                             \
        "SELECT r.* FROM (SELECT DISTINCT unnest(" param "::uuid[]) AS id) k,"                     \
        " LATERAL (SELECT " cols " FROM " table " WHERE tenant_id = $1::uuid AND id = k.id"        \
        " OFFSET 0) r"

/* The columns lg_read_account / lg_read_transfer expect, in order. */
#define LG_ACCOUNT_COLS                                                                            \
        "id, debits_pending, debits_posted, credits_pending, credits_posted, user_data_128,"       \
        " user_data_64, user_data_32, ledger, code, flags, timestamp"
#define LG_ACCOUNT_NCOLS 12
#define LG_TRANSFER_COLS                                                                           \
        "id, debit_account_id, credit_account_id, amount, pending_id, user_data_128,"              \
        " user_data_64, user_data_32, timeout, ledger, code, flags, timestamp"
#define LG_TRANSFER_NCOLS 13

int lg_read_account(const PGresult *r, int row, int col0, lg_account *out);
int lg_read_transfer(const PGresult *r, int row, int col0, lg_transfer *out);

/*
 * Writes what the batch changed: new accounts, changed accounts, new
 * transfers, pending states, failed ids and history rows, in one statement,
 * and commits in the same round trip.
 */
int lg_write_batch(lg_tx *tx, const lg_batch *b);

/*
 * The same write, on the condition that none of the n ids in absent is a
 * transfer that committed before it: checked by the same statement, on its
 * snapshot; when one is, the write is not committed and LG_RERUN_EXACT is
 * returned. n 0 is lg_write_batch.
 */
int lg_write_batch_unless(lg_tx *tx, const lg_batch *b, const u128 *absent, int n);

/*
 * transfers.c: resets the batch, reads the accounts that the events ev (and
 * the pending transfers they name) touch, and loads the transfers and failed
 * ids they refer to. exact false leaves out the batch's own ids from the
 * transfers read (their pending ids are still read): the caller then guesses
 * that none of them exists and checks the guess when it writes.
 */
int lg_load_for_transfers(lg_tx *tx, lg_batch *b, const lg_transfer *ev, int n, bool exact);

/* ---- imported.c: an imported batch's context ------------------------------ */

/* Whether a batch of n events (lg_transfer or lg_account) imports: its first event decides. */
bool lg_batch_imports(const void *ev, int n, bool transfers);
/*
 * Reads what an imported batch's timestamps are checked against into b
 * (lg_batch_load_import), after the batch's rows: the tenant's latest
 * timestamp of the events' kind and the events' timestamps that other
 * objects hold. KS_OK or a database failure's code.
 */
int lg_load_import(lg_tx *tx, lg_batch *b, bool transfers, const void *ev, int n);

/* ---- expiry.c ----------------------------------------------------------- */

int lg_sweeper_start(lg_service *svc);
void lg_sweeper_stop(lg_service *svc);
/* One pass over the tenants with due pending transfers. Returns how many expired, or -1. */
int lg_sweep_once(lg_service *svc);
/*
 * The pass's first statement, as keelson_ledger_sweeper: up to tenants_max
 * tenants with due pending transfers, found by an index scan bounded by
 * "now" (services/ledger/tests/test_ledger_expiry.c checks the bound).
 */
void lg_expiry_due_tenants_sql(char *out, size_t len, int tenants_max);

#endif
