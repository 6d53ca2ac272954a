/*
 * Helpers shared by the auth integration tests (test_auth_tenants.c,
 * test_auth_invitations.c, test_auth_reset_lockout.c, test_auth_api_keys.c,
 * test_auth_isolation.c): calls through the gateway in JSON, accounts and
 * tenants made through the API, and the outbox read back (the events a
 * write published, the tokens a mail would carry).
 *
 * Header-only (static inline) because each test is one program built from
 * its own file and it_support.c. Include after <cmocka.h>.
 */
#ifndef AUTH_IT_H
#define AUTH_IT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "it_support.h"
#include "keelson/auth/v1/events.pb-c.h"
#include "ks_crypto.h"

#define AIT_PATH      "/keelson.auth.v1.AuthService/"
#define AIT_PASSWORD  "correct horse battery staple"
#define AIT_EMAIL_MAX 128
#define AIT_TOKEN_MAX 512
#define AIT_ID_MAX    64

static it_stack ait_stack;

/* A session: what Login, AcceptInvitation and SwitchTenant hand out. */
typedef struct ait_user {
        char email[AIT_EMAIL_MAX];
        char user_id[AIT_ID_MAX];
        char tenant_id[AIT_ID_MAX];
        char token[AIT_TOKEN_MAX];
} ait_user;

static inline int ait_setup(void **state)
{
        (void)state;
        return it_stack_load(&ait_stack);
}

/* POSTs JSON to an AuthService method; token and request_id may be NULL. */
static inline void ait_call_rid(const char *method, const char *json, const char *token,
                                const char *request_id, it_http_response *out)
{
        char path[128], auth[AIT_TOKEN_MAX + 32], rid[160];
        const char *headers[3] = {NULL, NULL, NULL};
        int n = 0;

        snprintf(path, sizeof(path), AIT_PATH "%s", method);
        if (token != NULL) {
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
                headers[n++] = auth;
        }
        if (request_id != NULL) {
                snprintf(rid, sizeof(rid), "X-Request-Id: %s", request_id);
                headers[n++] = rid;
        }
        assert_int_equal(it_http_post(ait_stack.gateway_url, path, "application/json", json,
                                      strlen(json), headers, out),
                         0);
}

static inline void ait_call(const char *method, const char *json, const char *token,
                            it_http_response *out)
{
        ait_call_rid(method, json, token, NULL, out);
}

/* The reply as JSON (an object); the caller json_decref()s it. */
static inline json_t *ait_json(const it_http_response *r)
{
        json_error_t err;
        json_t *j = json_loadb(r->body, r->body_len, 0, &err);

        if (j == NULL || !json_is_object(j)) {
                fail_msg("reply is not a JSON object (%s): %.300s", err.text, r->body);
        }
        return j;
}

static inline const char *ait_str(json_t *obj, const char *key)
{
        json_t *v = json_object_get(obj, key);

        if (!json_is_string(v)) {
                fail_msg("reply lacks the string \"%s\"", key);
        }
        return json_string_value(v);
}

/* A string field, or "" when absent (proto3 JSON omits defaults). */
static inline const char *ait_str_or(json_t *obj, const char *key)
{
        json_t *v = json_object_get(obj, key);

        return json_is_string(v) ? json_string_value(v) : "";
}

/* Calls and expects 200; returns the reply as JSON. */
static inline json_t *ait_ok(const char *method, const char *json, const char *token)
{
        it_http_response r;
        json_t *j;

        ait_call(method, json, token, &r);
        if (r.status != 200) {
                fail_msg("%s: expected HTTP 200, got %ld: %.300s", method, r.status, r.body);
        }
        j = ait_json(&r);
        it_http_response_free(&r);
        return j;
}

/* Calls and expects a Connect error with this code. */
static inline void ait_fails(const char *method, const char *json, const char *token,
                             const char *code)
{
        it_http_response r;
        json_t *j;

        ait_call(method, json, token, &r);
        j = ait_json(&r);
        if (r.status == 200 || strcmp(ait_str_or(j, "code"), code) != 0) {
                fail_msg("%s: expected %s, got HTTP %ld: %.300s", method, code, r.status, r.body);
        }
        json_decref(j);
        it_http_response_free(&r);
}

/*
 * Waits until token no longer authenticates (WhoAmI answers unauthenticated).
 * A revocation reaches a gateway's context cache through the
 * auth.context_revoked event, after the commit: a moment later, not at once.
 */
#define AIT_REVOKE_WAIT_MS 10000
static inline void ait_wait_unauthenticated(const char *token)
{
        struct timespec pause = {0, 50 * 1000 * 1000};
        it_http_response r;
        long status = 0;

        for (int waited_ms = 0; waited_ms <= AIT_REVOKE_WAIT_MS; waited_ms += 50) {
                ait_call("WhoAmI", "{}", token, &r);
                status = r.status;
                it_http_response_free(&r);
                if (status == 401) {
                        return;
                }
                nanosleep(&pause, NULL);
        }
        fail_msg("token still authenticates %d ms after its revocation (HTTP %ld)",
                 AIT_REVOKE_WAIT_MS, status);
}

/* Builds a JSON body from a json_pack format. */
#define AIT_BODY(buf, ...)                                                                         \
        do {                                                                                       \
                json_t *b_ = json_pack(__VA_ARGS__);                                               \
                char *s_ = json_dumps(b_, JSON_COMPACT);                                           \
                assert_non_null(s_);                                                               \
                snprintf((buf), sizeof(buf), "%s", s_);                                            \
                free(s_);                                                                          \
                json_decref(b_);                                                                   \
        } while (0)

/* Signs up (tenant "tenant_name") and logs in. */
static inline void ait_signup(const char *prefix, const char *tenant_name, ait_user *u)
{
        char body[1024];
        json_t *j;

        memset(u, 0, sizeof(*u));
        it_unique_email(prefix, u->email, sizeof(u->email));
        AIT_BODY(body, "{s:s, s:s, s:s, s:s}", "email", u->email, "password", AIT_PASSWORD,
                 "tenantName", tenant_name, "displayName", prefix);
        j = ait_ok("SignUp", body, NULL);
        snprintf(u->user_id, sizeof(u->user_id), "%s", ait_str(j, "userId"));
        snprintf(u->tenant_id, sizeof(u->tenant_id), "%s", ait_str(j, "tenantId"));
        json_decref(j);
        AIT_BODY(body, "{s:s, s:s}", "email", u->email, "password", AIT_PASSWORD);
        j = ait_ok("Login", body, NULL);
        snprintf(u->token, sizeof(u->token), "%s", ait_str(j, "sessionToken"));
        json_decref(j);
}

/* Logs u in again (a second session) into token. */
static inline void ait_login(const ait_user *u, const char *tenant_id, char token[AIT_TOKEN_MAX])
{
        char body[1024];
        json_t *j;

        if (tenant_id != NULL) {
                AIT_BODY(body, "{s:s, s:s, s:s}", "email", u->email, "password", AIT_PASSWORD,
                         "tenantId", tenant_id);
        } else {
                AIT_BODY(body, "{s:s, s:s}", "email", u->email, "password", AIT_PASSWORD);
        }
        j = ait_ok("Login", body, NULL);
        snprintf(token, AIT_TOKEN_MAX, "%s", ait_str(j, "sessionToken"));
        json_decref(j);
}

/* ---- the database ------------------------------------------------------- */

static inline PGconn *ait_pg(void)
{
        PGconn *pg = it_pg_connect(&ait_stack);

        assert_non_null(pg);
        return pg;
}

/* Runs a statement as the superuser; fails the test on error. The caller PQclear()s. */
static inline PGresult *ait_sql(PGconn *pg, const char *sql, int n, const char *const *params)
{
        PGresult *res = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);
        ExecStatusType st = PQresultStatus(res);

        if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
                fail_msg("SQL failed: %s (%s)", PQresultErrorMessage(res), sql);
        }
        return res;
}

/* The single value of a one-row, one-column query, as a long. */
static inline long ait_sql_long(const char *sql, int n, const char *const *params)
{
        PGconn *pg = ait_pg();
        PGresult *res = ait_sql(pg, sql, n, params);
        long v;

        assert_int_equal(PQntuples(res), 1);
        v = strtol(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        PQfinish(pg);
        return v;
}

/* The highest outbox id now: events after it belong to what the test does next. */
static inline long ait_outbox_mark(void)
{
        return ait_sql_long("SELECT coalesce(max(id), 0) FROM auth.outbox", 0, NULL);
}

/* Outbox rows after mark with this topic and tenant ("" or NULL: any tenant). */
static inline long ait_events(long mark, const char *topic, const char *tenant_id)
{
        char m[24];
        const char *params[3] = {m, topic, tenant_id ? tenant_id : ""};

        snprintf(m, sizeof(m), "%ld", mark);
        return ait_sql_long("SELECT count(*) FROM auth.outbox WHERE id > $1::int8 AND topic = $2"
                            " AND ($3 = '' OR tenant_id = NULLIF($3, '')::uuid)",
                            3, params);
}

/* Payloads of outbox rows after mark with this topic, in id order. The caller PQclear()s. */
static inline PGresult *ait_event_rows(PGconn *pg, long mark, const char *topic)
{
        char m[24];
        const char *params[2] = {m, topic};

        snprintf(m, sizeof(m), "%ld", mark);
        return ait_sql(pg,
                       "SELECT payload, coalesce(tenant_id::text, '') FROM auth.outbox"
                       " WHERE id > $1::int8 AND topic = $2 ORDER BY id",
                       2, params);
}

static inline uint8_t *ait_unescape(const PGresult *res, int row, size_t *len)
{
        uint8_t *b = PQunescapeBytea((const unsigned char *)PQgetvalue(res, row, 0), len);

        assert_non_null(b);
        return b;
}

/*
 * The token of the newest auth.email after mark sent to "to" with this kind
 * ("invitation" | "password_reset"), as a mail sender would read it. Returns
 * how many such mails there were.
 */
static inline int ait_mail_token(long mark, const char *to, const char *kind,
                                 char token[AIT_TOKEN_MAX])
{
        PGconn *pg = ait_pg();
        PGresult *res = ait_event_rows(pg, mark, "auth.email");
        int found = 0;

        token[0] = '\0';
        for (int i = 0; i < PQntuples(res); i++) {
                size_t len = 0;
                uint8_t *b = ait_unescape(res, i, &len);
                Keelson__Auth__V1__EmailRequested *m =
                    keelson__auth__v1__email_requested__unpack(NULL, len, b);

                assert_non_null(m);
                if (strcmp(m->to, to) == 0 && strcmp(m->kind, kind) == 0) {
                        snprintf(token, AIT_TOKEN_MAX, "%s", m->token);
                        found++;
                }
                keelson__auth__v1__email_requested__free_unpacked(m, NULL);
                PQfreemem(b);
        }
        PQclear(res);
        PQfinish(pg);
        return found;
}

/*
 * Whether an auth.context_revoked after mark carries SHA-256(token); *reason
 * gets its reason (when found).
 */
static inline int ait_revoked_has(long mark, const char *token, char reason[64])
{
        uint8_t want[KS_SHA256_BYTES];
        PGconn *pg = ait_pg();
        PGresult *res = ait_event_rows(pg, mark, "auth.context_revoked");
        int found = 0;

        ks_sha256(token, strlen(token), want);
        for (int i = 0; i < PQntuples(res); i++) {
                size_t len = 0;
                uint8_t *b = ait_unescape(res, i, &len);
                Keelson__Auth__V1__ContextRevoked *m =
                    keelson__auth__v1__context_revoked__unpack(NULL, len, b);

                assert_non_null(m);
                for (size_t k = 0; k < m->n_token_sha256; k++) {
                        if (m->token_sha256[k].len == KS_SHA256_BYTES &&
                            memcmp(m->token_sha256[k].data, want, KS_SHA256_BYTES) == 0) {
                                found++;
                                if (reason != NULL) {
                                        snprintf(reason, 64, "%s", m->reason);
                                }
                        }
                }
                keelson__auth__v1__context_revoked__free_unpacked(m, NULL);
                PQfreemem(b);
        }
        PQclear(res);
        PQfinish(pg);
        return found;
}

/* The reason of the only users.admin_summary after mark for tenant_id (fails otherwise). */
static inline void ait_assert_one_summary(long mark, const char *tenant_id, const char *reason)
{
        PGconn *pg = ait_pg();
        PGresult *res = ait_event_rows(pg, mark, "users.admin_summary");
        int n = 0;

        for (int i = 0; i < PQntuples(res); i++) {
                size_t len = 0;
                uint8_t *b;
                Keelson__Auth__V1__AdminSummaryChanged *m;

                if (strcmp(PQgetvalue(res, i, 1), tenant_id) != 0) {
                        continue;
                }
                b = ait_unescape(res, i, &len);
                m = keelson__auth__v1__admin_summary_changed__unpack(NULL, len, b);
                assert_non_null(m);
                assert_string_equal(m->tenant_id, tenant_id);
                assert_string_equal(m->reason, reason);
                keelson__auth__v1__admin_summary_changed__free_unpacked(m, NULL);
                PQfreemem(b);
                n++;
        }
        PQclear(res);
        PQfinish(pg);
        if (n != 1) {
                fail_msg("expected one users.admin_summary (%s) for %s, found %d", reason,
                         tenant_id, n);
        }
}

/* ---- invitations, shared by several tests -------------------------------- */

/* Invites email into owner's tenant with role; returns the mailed token. */
static inline void ait_invite(const ait_user *owner, const char *email, const char *role,
                              char token[AIT_TOKEN_MAX])
{
        char body[1024];
        long mark = ait_outbox_mark();
        json_t *j;

        AIT_BODY(body, "{s:[s], s:s}", "emails", email, "role", role);
        j = ait_ok("Invite", body, owner->token);
        json_decref(j);
        assert_int_equal(ait_mail_token(mark, email, "invitation", token), 1);
}

/* A new account that joins owner's tenant with role through an invitation. */
static inline void ait_new_member(const ait_user *owner, const char *prefix, const char *role,
                                  ait_user *m)
{
        char body[1024], token[AIT_TOKEN_MAX];
        json_t *j;

        memset(m, 0, sizeof(*m));
        it_unique_email(prefix, m->email, sizeof(m->email));
        ait_invite(owner, m->email, role, token);
        AIT_BODY(body, "{s:s, s:s, s:s}", "token", token, "password", AIT_PASSWORD, "displayName",
                 prefix);
        j = ait_ok("AcceptInvitation", body, NULL);
        snprintf(m->user_id, sizeof(m->user_id), "%s", ait_str(j, "userId"));
        snprintf(m->tenant_id, sizeof(m->tenant_id), "%s", ait_str(j, "tenantId"));
        snprintf(m->token, sizeof(m->token), "%s", ait_str(j, "sessionToken"));
        assert_string_equal(ait_str(j, "role"), role);
        assert_string_equal(m->tenant_id, owner->tenant_id);
        json_decref(j);
}

#endif
