/*
 * keelson-auth internals: the service state every handler shares, the
 * handlers of keelson.auth.v1.AuthService, and the modules they share:
 *
 *   db.c         connections, transactions acting for a tenant, bytea helpers
 *   tx.c         the tenant-method runner: caller, role, permission, dedupe
 *   events.c     outbox events: users.admin_summary, auth.context_revoked, auth.email
 *   audit.c      the append-only audit log and ListAudit
 *   list.c       the list methods on core's frame (ks_list_reply), in the tenant transaction
 *   hash_pool.c  scrypt on its own bounded pool of threads
 *   hash_worker.c  ... each thread's scrypt in a process of its own, at low priority
 *   passwords.c  password checks with lockout, shared by Login, AcceptInvitation, ChangePassword
 *   sessions.c   session tokens, ResolveContext, WhoAmI, Logout, tenants, RevokeAllSessions
 *   signup.c login.c members.c invitations.c reset.c api_keys.c: the methods
 *   validate.c   auth's own pure input rules (unit-tested without a database); the
 *                shared ones (UTF-8, e-mail addresses, names) are core's, ks_text.h
 */
#ifndef AUTH_H
#define AUTH_H

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keelson/auth/v1/auth.pb-c.h"
#include "ks_crypto.h"
#include "ks_list.h"
#include "ks_metrics.h"
#include "ks_perms.h"
#include "ks_pg.h"
#include "ks_rpc.h"
#include "ks_service.h"
#include "ks_text.h"

/* ---- limits (bytes unless said otherwise) ------------------------------ */

#define AUTH_PASSWORD_CHARS_MIN 8    /* UTF-8 code points */
#define AUTH_PASSWORD_BYTES_MAX 1024 /* bounds the work one request can ask scrypt for */
#define AUTH_NAME_CHARS_MAX     200  /* tenant, display and API key names, code points */
#define AUTH_NAME_BYTES_MAX     (AUTH_NAME_CHARS_MAX * KS_UTF8_CHAR_BYTES_MAX)
#define AUTH_TOKEN_BYTES        32  /* random bytes behind every token and key */
#define AUTH_TOKEN_LEN          43  /* base64url of 32 bytes, unpadded */
#define AUTH_TOKEN_BYTES_MAX    512 /* longer bearer strings are refused unread */
#define AUTH_UUID_LEN           36
#define AUTH_ERR_MAX            128 /* validation messages */
#define AUTH_ROLE_MAX           16  /* "owner", "admin", "member", "viewer" + NUL */
#define AUTH_INVITE_BATCH_MAX   100 /* addresses in one Invite */
#define AUTH_REQUEST_ID_MAX     128

/* API keys: "ks_live_" + 43 base64url characters; lists show the first 12. */
#define AUTH_API_KEY_PREFIX     "ks_live_"
#define AUTH_API_KEY_PREFIX_LEN 8
#define AUTH_API_KEY_LEN        (AUTH_API_KEY_PREFIX_LEN + AUTH_TOKEN_LEN)
#define AUTH_API_KEY_SHOWN      12

/* Every reply to a failed Login, whatever failed: nothing tells them apart. */
#define AUTH_LOGIN_FAILED_MSG "invalid email or password"
/* Every database failure: the detail is in the log under the request id. */
#define AUTH_INTERNAL_MSG "internal error"

/* ---- the hash pool (hash_pool.c) ---------------------------------------- */

typedef struct auth_hash_pool auth_hash_pool;

/*
 * workers threads hash; at most queue_max jobs wait for one. A job beyond
 * that is refused at once (resource_exhausted), so the RPC workers that can
 * be blocked on hashing are bounded: workers + queue_max. With worker_exe
 * (auth's own binary, "/proc/self/exe"), each thread hands its scrypt to a
 * hash worker process at nice value nice (0..19) in a scheduling group of
 * its own (hash_worker.c); with NULL, the threads run scrypt themselves at
 * that nice value. With cpus, the hashing runs on those CPUs only (the
 * threads are pinned, and the worker processes they start inherit it);
 * NULL: wherever the scheduler puts it.
 */
int auth_hash_pool_new(auth_hash_pool **out, int workers, int queue_max, int nice,
                       const char *worker_exe, const cpu_set_t *cpus);

/*
 * The CPUs hashing is pinned to: the last `workers` of allowed (the highest
 * numbered), so that the cheap calls always have the others; false (out
 * untouched) when workers would take every CPU of allowed, or none: no
 * pinning then. Pure.
 */
bool auth_hash_cpus(const cpu_set_t *allowed, int workers, cpu_set_t *out);
void auth_hash_pool_free(auth_hash_pool *p);

/*
 * Hashes (or verifies) on the pool and waits for the result. deadline is a
 * wall-clock time in ms (0: none); a job still queued at its deadline is
 * dropped. Returns KS_OK, KS_RESOURCE_EXHAUSTED (queue full),
 * KS_DEADLINE_EXCEEDED, or KS_INTERNAL (scrypt failed; for verify: the
 * stored string is malformed, and *ok is false).
 */
int auth_hash_password(auth_hash_pool *p, const char *password, const ks_scrypt_params *params,
                       char out[KS_PASSWORD_HASH_MAX], int64_t deadline_unix_ms);
int auth_verify_password(auth_hash_pool *p, const char *password, const char *stored,
                         const ks_scrypt_params *current, bool *ok, bool *needs_rehash,
                         int64_t deadline_unix_ms);

/*
 * True when a job submitted now would be refused. A hint, not a promise (the
 * queue may drain a moment later): hash-heavy methods check it first and
 * refuse at once, before spending a database round trip on a call whose
 * hash would be refused anyway. A true answer counts as a refusal
 * (auth_hash_pool_rejected, keelson_auth_hash_rejected_total), since the
 * caller refuses on it: the counter then matches the 429s clients got.
 */
bool auth_hash_pool_full(auth_hash_pool *p);

/* The pid of hash thread i's worker process (-1: none, or threads hash themselves). */
int auth_hash_pool_worker_pid(auth_hash_pool *p, int i);

/* ---- hash workers (hash_worker.c) ---------------------------------------- */

/* argv[1] of a hash worker: auth's main() hands such a process to auth_hash_worker_main. */
#define AUTH_HASH_WORKER_ARG "--hash-worker"
/* Password and stored hash bytes one job may carry. */
#define AUTH_HASH_INPUT_MAX (AUTH_PASSWORD_BYTES_MAX + KS_PASSWORD_HASH_MAX)

/* One hash or verification, and its results. */
typedef struct auth_hash_work {
        bool verify;
        const char *password;
        const char *stored; /* verify */
        ks_scrypt_params params;
        int rc;
        bool ok, needs_rehash;          /* verify */
        char out[KS_PASSWORD_HASH_MAX]; /* hash */
} auth_hash_work;

/* Runs w here, on the calling thread. */
void auth_hash_compute(auth_hash_work *w);

typedef struct auth_hasher {
        int pid;
        int fd;
} auth_hasher;

/* Starts a worker process (exe AUTH_HASH_WORKER_ARG nice our-pid). KS_OK or KS_INTERNAL. */
int auth_hasher_start(auth_hasher *h, const char *exe, int nice);
/* Closes its socket and waits for it to exit. */
void auth_hasher_stop(auth_hasher *h);
/* Runs w on the worker, starting another once if it is gone; KS_OK or KS_INTERNAL (w->rc). */
int auth_hasher_run(auth_hasher *h, const char *exe, int nice, auth_hash_work *w);
/* The worker process's main: serves jobs on fd 3 until it closes. */
int auth_hash_worker_main(int argc, char **argv);

/* Jobs waiting for a hash thread now, jobs being hashed now, and jobs refused since start. */
int auth_hash_pool_queued(auth_hash_pool *p);
int auth_hash_pool_running(auth_hash_pool *p);
uint64_t auth_hash_pool_rejected(auth_hash_pool *p);
/* keelson_auth_hash_rejected_total, which the RPC server's refusals of heavy calls count too. */
ks_counter *auth_hash_pool_rejected_counter(auth_hash_pool *p);

/* ---- housekeeping (housekeeping.c) -------------------------------------- */

typedef struct auth_housekeeper auth_housekeeper;
struct auth_service;

/* A thread deleting stale sessions, reset tokens and request records every interval_s. */
int auth_housekeeper_start(auth_housekeeper **out, struct auth_service *svc, int interval_s);
void auth_housekeeper_stop(auth_housekeeper *h);

/* ---- configuration and start (setup.c) ---------------------------------- */

typedef struct auth_config {
        ks_service_settings base; /* the skeleton's shared settings */
        int64_t session_ttl_s;
        int64_t scrypt_log_n;
        int64_t scrypt_r;
        int64_t scrypt_p;
        int64_t hash_workers;
        int64_t hash_queue_max;
        int64_t hash_nice;
        bool hash_pin;
        int64_t invitation_ttl_s;
        int64_t reset_ttl_s;
        int64_t reset_max_per_window;
        int64_t reset_window_s;
        int64_t lockout_max_failures;
        int64_t lockout_window_s;
        int64_t lockout_duration_s;
        int64_t housekeeping_s;
} auth_config;

/* auth's own variables, beside the shared ones of ks_service.h. */
extern const ks_config_var auth_config_vars[];
extern const size_t auth_config_vars_n;

/* The service's methods: methods.def with its handlers (methods.c). */
extern const ks_method_table auth_methods;

/* The hooks of ks_service_spec: relations between settings, start, stop. */
int auth_check_config(void *service, char *err, size_t err_len);
int auth_start(void *service, ks_service_env *env);
void auth_stop(void *service);

/* What a password check refused for a full hash pool answers. */
#define AUTH_HASH_BUSY_MSG "too many password checks in progress, retry later"

/* ---- service state ----------------------------------------------------- */

typedef struct auth_service {
        const auth_config *cfg;
        int hash_workers, hash_queue_max; /* after the "0 = automatic" defaults */
        auth_housekeeper *housekeeper;
        ks_pg_pool *pool;
        auth_hash_pool *hash;
        ks_scrypt_params scrypt;               /* configured hashing parameters */
        char dummy_hash[KS_PASSWORD_HASH_MAX]; /* verified for unknown emails */
        int64_t session_ttl_s;
        int64_t invitation_ttl_s;
        int64_t reset_ttl_s;
        int lockout_max_failures;
        int lockout_window_s;
        int lockout_duration_s;
        int reset_max_per_window; /* reset mails per address and window */
        int reset_window_s;
        ks_counter *logins_ok;     /* keelson_auth_logins_total{result="ok"} */
        ks_counter *logins_failed; /* keelson_auth_logins_total{result="failed"} */
        ks_counter *lockouts;      /* keelson_auth_lockouts_total */
} auth_service;

int auth_signup(ks_call *call);
int auth_login(ks_call *call);
int auth_logout(ks_call *call);
int auth_whoami(ks_call *call);
int auth_resolve_context(ks_call *call);
int auth_list_tenants(ks_call *call);
int auth_switch_tenant(ks_call *call);
int auth_revoke_all_sessions(ks_call *call);
int auth_change_password(ks_call *call);
int auth_list_members(ks_call *call);
int auth_set_role(ks_call *call);
int auth_remove_member(ks_call *call);
int auth_invite(ks_call *call);
int auth_list_invitations(ks_call *call);
int auth_revoke_invitation(ks_call *call);
int auth_accept_invitation(ks_call *call);
int auth_forgot_password(ks_call *call);
int auth_reset_password(ks_call *call);
int auth_create_api_key(ks_call *call);
int auth_list_api_keys(ks_call *call);
int auth_revoke_api_key(ks_call *call);
int auth_list_audit(ks_call *call);

/* ---- tokens (sessions.c) ------------------------------------------------ */

/* 32 random bytes in base64url (43 characters) into out. KS_OK or KS_INTERNAL. */
int auth_new_token(char out[AUTH_TOKEN_LEN + 1]);

/* Text form of a bytea parameter holding SHA-256(token): "\x" + 64 hex. */
#define AUTH_SHA256_PARAM_LEN (2 + 2 * KS_SHA256_BYTES + 1)
void auth_token_hash_param(const char *token, size_t len, char out[AUTH_SHA256_PARAM_LEN]);

typedef struct auth_session {
        char token[AUTH_TOKEN_LEN + 1]; /* shown to the client once, never stored */
        char session_id[AUTH_UUID_LEN + 1];
        char tenant_id[AUTH_UUID_LEN + 1];
        char role[AUTH_ROLE_MAX];
        int64_t expires_at_unix_ms;
} auth_session;

/*
 * Inside a transaction acting for tenant_id: creates a session for user_id
 * in that tenant, in one statement that also proves the membership exists.
 * Returns KS_OK and fills *out; KS_NOT_FOUND when the user is no member of
 * the tenant; another code on a database failure.
 */
int auth_session_create(auth_service *svc, PGconn *conn, const char *request_id,
                        const char *user_id, const char *tenant_id, auth_session *out);

/*
 * A whole transaction: creates the session in tenant_id, or when tenant_id is
 * NULL in the user's oldest membership. Same returns as auth_session_create.
 */
int auth_session_open(auth_service *svc, const char *request_id, const char *user_id,
                      const char *tenant_id, auth_session *out);

/*
 * Inside an open transaction (tenants.c): revokes every session of user_id
 * in every tenant but keep_session_id (may be NULL), and queues
 * auth.context_revoked with their hashes. *n: how many were revoked.
 */
int auth_revoke_user_sessions(PGconn *conn, const char *request_id, const char *user_id,
                              const char *keep_session_id, const char *reason, int *n);

/* ---- db.c -------------------------------------------------------------- */

/*
 * Maps a database failure to the reply: UNAVAILABLE and ABORTED keep their
 * code (the client may retry), anything else becomes INTERNAL; the message
 * says nothing about the database (the detail is logged under the request
 * id). Returns the code, for "return auth_db_fail(call, rc);".
 */
int auth_db_fail(ks_call *call, int code);

/*
 * A transaction outside the tenant frame (public and user methods): fn
 * opens and commits it on a connection of the pool; when fn fails, what it
 * opened is rolled back. Returns fn's code, or the pool's when no
 * connection came.
 */
typedef int (*auth_db_tx_fn)(auth_service *svc, PGconn *conn, const char *request_id, void *arg);
int auth_db_tx(auth_service *svc, const char *request_id, auth_db_tx_fn fn,
               void *arg) KS_MUST_CHECK;

/* Acquires a connection, runs one statement (see ks_pg_exec), releases. */
int auth_db_exec_once(auth_service *svc, const char *request_id, const char *sql, int n_params,
                      const char *const *params, PGresult **out);
/*
 * The same for a statement that changes nothing, as a read (ks_pg_read, no
 * tenant): on the loop it may go with other calls' reads (ks_pg.h,
 * "Batched reads"), and returns KS_PG_DEFERRED while planned.
 */
int auth_db_read_once(auth_service *svc, const char *request_id, const char *sql, int n_params,
                      const char *const *params, PGresult **out);

/* Copies the text of one result field into out, cut to out_len - 1 bytes. */
void auth_copy_field(const PGresult *res, int row, int col, char *out, size_t out_len);

/* A bigint field, 0 when NULL. */
int64_t auth_int_field(const PGresult *res, int row, int col);

/*
 * BEGIN, then the tenant and the user this transaction acts for (NULL or ""
 * for none): every row-level security policy reads them. The caller rolls
 * back on failure. One round trip (a pipeline).
 */
int auth_tx_begin(PGconn *conn, const char *request_id, const char *tenant_id, const char *user_id);

/*
 * auth_tx_begin and the statements then[] (up to KS_PG_PIPELINE_MAX - 2,
 * a COMMIT among them if the caller wants one) in the same round trip: a
 * read that knows its statements in advance costs one network wait.
 */
int auth_tx_open(PGconn *conn, const char *request_id, const char *tenant_id, const char *user_id,
                 const ks_pg_stmt *then, int n_then);

/*
 * A read in one round trip and one transaction without BEGIN or COMMIT
 * (ks_pg_read): the tenant and the user, then reads[] (1 to
 * KS_PG_PIPELINE_MAX - 1 statements). The connection must be outside a
 * transaction (KS_INTERNAL otherwise: the setting would outlive the read).
 */
int auth_tx_read(PGconn *conn, const char *request_id, const char *tenant_id, const char *user_id,
                 const ks_pg_stmt *reads, int n_reads);

/* Changes whom an open transaction acts for (SwitchTenant touches two tenants). */
int auth_tx_act_for(PGconn *conn, const char *request_id, const char *tenant_id,
                    const char *user_id);

/* ---- the caller, and tenant transactions (tx.c) ------------------------ */

/* Whoever makes the call: a user with a session, or an API key. */
typedef struct auth_actor {
        char tenant_id[AUTH_UUID_LEN + 1];
        char user_id[AUTH_UUID_LEN + 1];    /* "" for an API key */
        char session_id[AUTH_UUID_LEN + 1]; /* "" for an API key */
        char api_key_id[AUTH_UUID_LEN + 1]; /* "" for a session */
        char role[AUTH_ROLE_MAX];           /* as read in the transaction */
        int rank;
} auth_actor;

typedef struct auth_tx {
        ks_call *call;
        auth_service *svc;
        PGconn *conn;
        auth_actor actor;
} auth_tx;

/* Runs inside the transaction; returns KS_OK after ks_call_reply, else a code it set. */
typedef int (*auth_tx_fn)(auth_tx *tx, void *arg);

enum {
        AUTH_TX_DEDUPE = 1u << 0, /* a write: record the request id, replay its reply */
        AUTH_TX_SECRET = 1u << 1, /* the reply holds a secret: a repeat is already_exists */
};

/*
 * The frame of every tenant method: checks the caller context, opens a
 * transaction acting for the caller's tenant, re-reads the caller's role
 * there (a stale context cannot keep a demoted role), checks the permission
 * of the method's methods.def row (permission_denied), deduplicates by request id when asked, runs
 * fn and commits. Any failure rolls back: nothing fn wrote, no event, no audit row.
 */
int auth_tenant_tx(ks_call *call, unsigned flags, auth_tx_fn fn, void *arg) KS_MUST_CHECK;

/*
 * The same frame for a read, in one round trip with no transaction block
 * (auth_tx_read): the caller's tenant, its role, then reads[] (each out
 * filled), which PostgreSQL runs as one transaction ended by the Sync. The
 * role and the method's permission are checked when the answer is back; a
 * caller they refuse gets that refusal, and every out is NULL (the rows
 * read for it are dropped unseen). Its read may be answered from the
 * loop's batch (ks_pg.h, "Batched reads").
 */
int auth_tenant_read(ks_call *call, const ks_pg_stmt *reads, int n_reads) KS_MUST_CHECK;

/* The caller as a user with a session (user methods); replies and returns a code if not. */
int auth_require_user(ks_call *call, auth_actor *out);

/* ---- list methods (list.c) ---------------------------------------------- */

/* The page of an AuthService list method (KS_LIST_PAGE) named method: "ListMembers". */
#define AUTH_LIST_PAGE(method, item_type, item_fn, ...)                                            \
        KS_LIST_PAGE("keelson.auth.v1.AuthService/" method, item_type, item_fn, __VA_ARGS__)

/*
 * A whole list method (ks_list_reply) in the caller's tenant transaction
 * (auth_tenant_tx: caller, role, the method's permission); what is no fault
 * of the client is AUTH_INTERNAL_MSG. Returns KS_OK or a code the call
 * already carries.
 */
int auth_list_reply(ks_call *call, const ks_list_method *m, int32_t page_size,
                    const char *page_token, const char *const *filters,
                    int n_filters) KS_MUST_CHECK;

/* The same for a list whose tokens are bound to its filters (ks_list_reply_bound). */
int auth_list_reply_bound(ks_call *call, const ks_list_method *m, int32_t page_size,
                          const char *page_token, const char *const *filters, int n_filters,
                          const char *binding) KS_MUST_CHECK;

/* ---- events (events.c): inside the write's transaction ----------------- */

int auth_emit_admin_summary(PGconn *conn, const char *request_id, const char *tenant_id,
                            const char *reason);

typedef struct auth_revocation {
        const char *tenant_id;  /* NULL: every tenant */
        const char *user_id;    /* may be NULL */
        const char *api_key_id; /* may be NULL */
        const char *reason;
} auth_revocation;

/*
 * One auth.context_revoked per AUTH_REVOKED_PER_EVENT hashes, taken from
 * column col of every row of res (bytea). No row: one event without hashes
 * when r->user_id is set (a role change with no live session still tells
 * caches about the user), none otherwise.
 */
#define AUTH_REVOKED_PER_EVENT 256
int auth_emit_context_revoked(PGconn *conn, const char *request_id, const auth_revocation *r,
                              const PGresult *res, int col);

typedef struct auth_email {
        const char *to;
        const char *kind; /* "invitation" | "password_reset" */
        const char *token;
        const char *tenant_name; /* may be NULL */
        const char *tenant_id;   /* may be NULL */
        const char *role;        /* may be NULL */
        int64_t expires_at_unix_ms;
} auth_email;

/* Serializes an EmailRequested; *out is malloc'd. KS_OK or KS_INTERNAL. */
int auth_email_pack(const auth_email *e, uint8_t **out, size_t *len);
int auth_emit_email(PGconn *conn, const char *request_id, const auth_email *e);

/* ---- audit (audit.c) ---------------------------------------------------- */

/*
 * Appends one row for the transaction's tenant. detail is a jansson object
 * (may be NULL); the reference is stolen. It must never hold a secret.
 */
typedef struct json_t json_t;
int auth_audit(PGconn *conn, const char *request_id, const auth_actor *actor, const char *action,
               const char *target_type, const char *target_id, json_t *detail);

/* ---- password checks with lockout (passwords.c) ------------------------ */

typedef struct auth_login_user {
        bool found;
        bool locked;
        char id[AUTH_UUID_LEN + 1];
        char hash[KS_PASSWORD_HASH_MAX];
} auth_login_user;

/* The account behind a normalised email (not found is KS_OK with found = false). */
int auth_login_lookup(auth_service *svc, const char *request_id, const char *email,
                      auth_login_user *u);

/*
 * Verifies password against u (or the dummy hash when u is not found: the
 * same work either way) on the hash pool, and records the outcome: a
 * failure counts towards the lockout, a success clears the count. *ok is
 * true only for a found, unlocked account with the right password. Returns
 * KS_OK, or the pool's or the database's code (the call is then refused).
 */
int auth_password_check(ks_call *call, const auth_login_user *u, const char *password, bool *ok);

/* KS_OK, or resource_exhausted (replied) when the hash queue is full: see auth_hash_pool_full. */
int auth_hash_admit(ks_call *call);

/* Hashes a new password on the pool; replies (resource_exhausted, ...) on failure. */
int auth_password_new_hash(ks_call *call, const char *password, char out[KS_PASSWORD_HASH_MAX]);

/* ---- validate.c: pure functions, no I/O -------------------------------- */

/*
 * Password rules of SignUp: valid UTF-8, at least 8 code points, at most
 * 1024 bytes. Returns KS_OK or KS_INVALID_ARGUMENT with a message in err.
 */
int auth_password_validate(const char *password, char *err, size_t err_len);

/*
 * "<local part>'s workspace" for a normalised email, the local part cut at
 * a code point boundary so that the whole fits in 200 code points.
 */
void auth_default_tenant_name(const char *email, char *out, size_t out_len);

/* True for the 36-character text form of a uuid (hex digits, dashes at 8-13-18-23). */
bool auth_uuid_valid(const char *s);

#endif
