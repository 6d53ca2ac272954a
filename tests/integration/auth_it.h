/*
 * What the auth integration tests share: AuthService calls through the
 * stack's gateway in JSON, accounts, tenants, invitations and API keys
 * made through the API, and what the writes left in the database (outbox
 * events, audit rows, the tokens a mail would carry).
 *
 * Part of the keelson_it_support library (auth_it.c). Every function here
 * fails the test when a call or a query does not go through; call them
 * from the test's own thread. Include after <cmocka.h>.
 */
#ifndef AUTH_IT_H
#define AUTH_IT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "it_support.h"

#define AIT_PATH      "/keelson.auth.v1.AuthService/"
#define AIT_PASSWORD  "correct horse battery staple"
#define AIT_EMAIL_MAX 128
#define AIT_TOKEN_MAX 512
#define AIT_ID_MAX    64

/* How long a revocation may take to reach every gateway's context cache. */
#define AIT_REVOKE_WAIT_MS 10000

/* The stack every ait_ function talks to; ait_setup loads it. */
extern it_stack ait_stack;

/* A session: what Login, AcceptInvitation and SwitchTenant hand out. */
typedef struct ait_user {
        char email[AIT_EMAIL_MAX];
        char user_id[AIT_ID_MAX];
        char tenant_id[AIT_ID_MAX];
        char token[AIT_TOKEN_MAX];
} ait_user;

/* A group setup: loads ait_stack. Returns 0, or -1 (the group fails). */
int ait_setup(void **state);

/* Builds a JSON body from a json_pack format into the array buf. */
#define AIT_BODY(buf, ...)                                                                         \
        do {                                                                                       \
                json_t *b_ = json_pack(__VA_ARGS__);                                               \
                char *s_ = json_dumps(b_, JSON_COMPACT);                                           \
                assert_non_null(s_);                                                               \
                snprintf((buf), sizeof(buf), "%s", s_);                                            \
                free(s_);                                                                          \
                json_decref(b_);                                                                   \
        } while (0)

/* ---- calls ---------------------------------------------------------------- */

/* POSTs body to an AuthService method; content_type, token and request_id may be NULL. */
void ait_post(const char *method, const char *content_type, const void *body, size_t len,
              const char *token, const char *request_id, it_http_response *out);

/* POSTs JSON to an AuthService method; token and request_id may be NULL. */
void ait_call_rid(const char *method, const char *json, const char *token, const char *request_id,
                  it_http_response *out);
void ait_call(const char *method, const char *json, const char *token, it_http_response *out);

/* The status of a call, its reply dropped. */
long ait_status(const char *method, const char *json, const char *token);

/* The reply as JSON (an object); the caller json_decref()s it. */
json_t *ait_json(const it_http_response *r);

/* A string field; fails the test when absent. */
const char *ait_str(json_t *obj, const char *key);

/* A string field, or "" when absent (proto3 JSON omits defaults). */
const char *ait_str_or(json_t *obj, const char *key);

/* Calls and expects 200; returns the reply as JSON. */
json_t *ait_ok(const char *method, const char *json, const char *token);

/* Calls and expects a Connect error with this code. */
void ait_fails(const char *method, const char *json, const char *token, const char *code);

/* The same, and this message. */
void ait_fails_with(const char *method, const char *json, const char *token, const char *code,
                    const char *message);

/* Two replies are the same to the byte: status, length and body. */
void ait_assert_same_reply(const it_http_response *a, const it_http_response *b);

/*
 * Calls until the call answers HTTP want, for at most AIT_REVOKE_WAIT_MS
 * (what a revocation takes to reach the gateways' caches: a moment after
 * the commit, not at once).
 */
void ait_wait_status(const char *method, const char *json, const char *token, long want);

/* Waits until token no longer authenticates (WhoAmI answers 401). */
void ait_wait_unauthenticated(const char *token);

/* ---- accounts ------------------------------------------------------------- */

/* Signs up (tenant "tenant_name", display name prefix) and logs in. */
void ait_signup(const char *prefix, const char *tenant_name, ait_user *u);

/* A Login of email with password, whatever it answers. */
void ait_login_with(const char *email, const char *password, it_http_response *out);

/* The status of that Login. */
long ait_login_status(const char *email, const char *password);

/* Logs u in again (a second session) into token; tenant_id may be NULL. */
void ait_login(const ait_user *u, const char *tenant_id, char token[AIT_TOKEN_MAX]);

/* Invites email into owner's tenant with role; returns the mailed token. */
void ait_invite(const ait_user *owner, const char *email, const char *role,
                char token[AIT_TOKEN_MAX]);

/* AcceptInvitation with the token and the account's password; the reply as JSON. */
json_t *ait_accept(const char *invitation_token, const char *password);

/* A new account that joins owner's tenant with role through an invitation. */
void ait_new_member(const ait_user *owner, const char *prefix, const char *role, ait_user *m);

/* A new tenant (ait_signup) with a second account of role in it (ait_new_member). */
void ait_tenant_of_two(const char *prefix, const char *tenant_name, const char *role,
                       ait_user *owner, ait_user *m);

/*
 * CreateApiKey as token's caller; the key (AIT_TOKEN_MAX bytes) and its id
 * (AIT_ID_MAX bytes, may be NULL).
 */
void ait_create_key(const char *token, const char *name, const char *role, char *key, char *id);

/* ---- a replica of the test's own ------------------------------------------ */

/* An auth replica that only the test reaches: behind a broker of its own. */
typedef struct ait_replica {
        ks_broker *broker;   /* in this process */
        char base[64];       /* its base URL */
        char env_broker[96]; /* "KEELSON_BROKER_URL=<base>", for a gateway in front */
        it_service replica;  /* keelson-auth on the stack's database */
} ait_replica;

/*
 * Starts the broker on free ports (seeding rand()) and keelson-auth behind
 * it with its outbox relay off (its events would reach nobody there), plus
 * env ("NAME=value" entries, NULL-terminated, at most 4). Returns 0, or -1
 * with whatever it started stopped.
 */
int ait_replica_start(ait_replica *r, const char *const *env);

/* Stops the replica and the broker; accepts one never started. */
void ait_replica_stop(ait_replica *r);

/* ---- the database ------------------------------------------------------- */

/* A superuser connection to the stack's database; the caller PQfinish()es it. */
PGconn *ait_pg(void);

/* The single value of a one-row, one-column query, as a long. */
long ait_sql_long(const char *sql, int n, const char *const *params);

/* Runs one statement as the superuser. */
void ait_exec(const char *sql, int n, const char *const *params);

/* The highest outbox id now: events after it belong to what the test does next. */
long ait_outbox_mark(void);

/* Outbox rows after mark with this topic and tenant ("" or NULL: any tenant). */
long ait_events(long mark, const char *topic, const char *tenant_id);

/* Outbox rows after mark, of every topic and tenant. */
long ait_published_after(long mark);

/* Payloads of outbox rows after mark with this topic, in id order. The caller PQclear()s. */
PGresult *ait_event_rows(PGconn *pg, long mark, const char *topic);

/* The bytea of column 0 of a row, unescaped; the caller PQfreemem()s it. */
uint8_t *ait_unescape(const PGresult *res, int row, size_t *len);

/* Memberships of user_id in tenant_id with role ("": any role): 0 or 1. */
long ait_memberships(const char *tenant_id, const char *user_id, const char *role);

/* The highest audit id now. */
long ait_audit_mark(void);

/* Audit rows after mark of tenant_id with action ("": any action). */
long ait_audit_rows(long mark, const char *tenant_id, const char *action);

/*
 * Calls fn for every outbox row after mark with this topic, in id order,
 * its payload unpacked with d (fails the test when it does not unpack) and
 * its tenant ("" for none). Returns the sum of what fn returned.
 */
typedef int (*ait_event_fn)(const ProtobufCMessage *m, const char *tenant_id, void *arg);
int ait_each_event(long mark, const char *topic, const ProtobufCMessageDescriptor *d,
                   ait_event_fn fn, void *arg);

/*
 * The token of the newest auth.email after mark sent to "to" with this kind
 * ("invitation" | "password_reset"), as a mail sender would read it. Returns
 * how many such mails there were.
 */
int ait_mail_token(long mark, const char *to, const char *kind, char token[AIT_TOKEN_MAX]);

/*
 * How many auth.context_revoked after mark carry SHA-256(token); reason
 * (64 bytes, may be NULL) gets the reason of one.
 */
int ait_revoked_has(long mark, const char *token, char *reason);

/* The reason of the only users.admin_summary after mark for tenant_id (fails otherwise). */
void ait_assert_one_summary(long mark, const char *tenant_id, const char *reason);

#endif
