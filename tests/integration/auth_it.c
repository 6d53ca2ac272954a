/*
 * auth_it: AuthService through the stack's gateway in JSON, and what its
 * writes left in the database (see auth_it.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "auth_it.h"

#include <time.h>
#include <unistd.h>

#include "keelson/auth/v1/events.pb-c.h"
#include "ks_crypto.h"

#define AIT_POLL_MS 50

it_stack ait_stack;

int ait_setup(void **state)
{
        (void)state;
        return it_stack_load(&ait_stack);
}

/* ---- calls ---------------------------------------------------------------- */

void ait_post(const char *method, const char *content_type, const void *body, size_t len,
              const char *token, const char *request_id, it_http_response *out)
{
        it_request req = {.content_type = content_type, .token = token, .request_id = request_id};
        char path[128];

        snprintf(path, sizeof(path), AIT_PATH "%s", method);
        if (it_connect(ait_stack.gateway_url, path, body, len, &req, out) != 0) {
                fail_msg("%s: no HTTP reply", method);
        }
}

void ait_call_rid(const char *method, const char *json, const char *token, const char *request_id,
                  it_http_response *out)
{
        ait_post(method, NULL, json, strlen(json), token, request_id, out);
}

void ait_call(const char *method, const char *json, const char *token, it_http_response *out)
{
        ait_call_rid(method, json, token, NULL, out);
}

long ait_status(const char *method, const char *json, const char *token)
{
        it_http_response r;
        long status;

        ait_call(method, json, token, &r);
        status = r.status;
        it_http_response_free(&r);
        return status;
}

json_t *ait_json(const it_http_response *r)
{
        json_error_t err;
        json_t *j = json_loadb(r->body, r->body_len, 0, &err);

        if (j == NULL || !json_is_object(j)) {
                fail_msg("reply is not a JSON object (%s): %.300s", err.text, r->body);
        }
        return j;
}

const char *ait_str(json_t *obj, const char *key)
{
        json_t *v = json_object_get(obj, key);

        if (!json_is_string(v)) {
                fail_msg("reply lacks the string \"%s\"", key);
        }
        return json_string_value(v);
}

const char *ait_str_or(json_t *obj, const char *key)
{
        json_t *v = json_object_get(obj, key);

        return json_is_string(v) ? json_string_value(v) : "";
}

json_t *ait_ok(const char *method, const char *json, const char *token)
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

void ait_fails_with(const char *method, const char *json, const char *token, const char *code,
                    const char *message)
{
        it_http_response r;

        ait_call(method, json, token, &r);
        it_assert_refused(&r, method, code, message);
        it_http_response_free(&r);
}

void ait_fails(const char *method, const char *json, const char *token, const char *code)
{
        ait_fails_with(method, json, token, code, NULL);
}

void ait_assert_same_reply(const it_http_response *a, const it_http_response *b)
{
        assert_int_equal(a->status, b->status);
        assert_int_equal(a->body_len, b->body_len);
        assert_memory_equal(a->body, b->body, a->body_len);
}

void ait_wait_status(const char *method, const char *json, const char *token, long want)
{
        long status = 0;

        for (int waited_ms = 0; waited_ms <= AIT_REVOKE_WAIT_MS; waited_ms += AIT_POLL_MS) {
                if ((status = ait_status(method, json, token)) == want) {
                        return;
                }
                it_sleep_ms(AIT_POLL_MS);
        }
        fail_msg("%s still answers HTTP %ld, not %ld, after %d ms", method, status, want,
                 AIT_REVOKE_WAIT_MS);
}

void ait_wait_unauthenticated(const char *token)
{
        ait_wait_status("WhoAmI", "{}", token, 401);
}

/* ---- accounts ------------------------------------------------------------- */

void ait_signup(const char *prefix, const char *tenant_name, ait_user *u)
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
        ait_login(u, NULL, u->token);
}

void ait_login_with(const char *email, const char *password, it_http_response *out)
{
        char body[1024];

        AIT_BODY(body, "{s:s, s:s}", "email", email, "password", password);
        ait_call("Login", body, NULL, out);
}

long ait_login_status(const char *email, const char *password)
{
        it_http_response r;
        long status;

        ait_login_with(email, password, &r);
        status = r.status;
        it_http_response_free(&r);
        return status;
}

void ait_login(const ait_user *u, const char *tenant_id, char token[AIT_TOKEN_MAX])
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

void ait_invite(const ait_user *owner, const char *email, const char *role,
                char token[AIT_TOKEN_MAX])
{
        char body[1024];
        long mark = ait_outbox_mark();

        AIT_BODY(body, "{s:[s], s:s}", "emails", email, "role", role);
        json_decref(ait_ok("Invite", body, owner->token));
        assert_int_equal(ait_mail_token(mark, email, "invitation", token), 1);
}

json_t *ait_accept(const char *invitation_token, const char *password)
{
        char body[1024];

        AIT_BODY(body, "{s:s, s:s}", "token", invitation_token, "password", password);
        return ait_ok("AcceptInvitation", body, NULL);
}

void ait_new_member(const ait_user *owner, const char *prefix, const char *role, ait_user *m)
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

void ait_tenant_of_two(const char *prefix, const char *tenant_name, const char *role,
                       ait_user *owner, ait_user *m)
{
        char member_prefix[64];

        snprintf(member_prefix, sizeof(member_prefix), "%s-%s", prefix, role);
        ait_signup(prefix, tenant_name, owner);
        ait_new_member(owner, member_prefix, role, m);
}

void ait_create_key(const char *token, const char *name, const char *role, char *key, char *id)
{
        char body[512];
        json_t *j;

        AIT_BODY(body, "{s:s, s:s}", "name", name, "role", role);
        j = ait_ok("CreateApiKey", body, token);
        snprintf(key, AIT_TOKEN_MAX, "%s", ait_str(j, "key"));
        if (id != NULL) {
                snprintf(id, AIT_ID_MAX, "%s", ait_str(json_object_get(j, "apiKey"), "id"));
        }
        json_decref(j);
}

/* ---- a replica of the test's own ------------------------------------------ */

#define AIT_REPLICA_ENV_MAX 4

int ait_replica_start(ait_replica *r, const char *const *env)
{
        const char *all[AIT_REPLICA_ENV_MAX + 3] = {r->env_broker,
                                                    "KEELSON_AUTH_OUTBOX_RELAY=false"};
        int n = 2;

        memset(r, 0, sizeof(*r));
        for (size_t i = 0; env != NULL && env[i] != NULL; i++) {
                if (i == AIT_REPLICA_ENV_MAX) {
                        fprintf(stderr, "auth_it: more than %d settings for a replica\n",
                                AIT_REPLICA_ENV_MAX);
                        return -1;
                }
                all[n++] = env[i];
        }
        srand((unsigned)getpid() ^ (unsigned)time(NULL));
        if (it_broker_in_process(&r->broker, r->base, sizeof(r->base)) != 0) {
                return -1;
        }
        snprintf(r->env_broker, sizeof(r->env_broker), "KEELSON_BROKER_URL=%s", r->base);
        if (it_service_start(&ait_stack, "keelson-auth", "KEELSON_AUTH", all, &r->replica) != 0) {
                ait_replica_stop(r);
                return -1;
        }
        return 0;
}

void ait_replica_stop(ait_replica *r)
{
        it_service_stop(&r->replica);
        ks_broker_stop(r->broker);
        r->broker = NULL;
}

/* ---- the database ------------------------------------------------------- */

PGconn *ait_pg(void)
{
        PGconn *pg = it_pg_connect(&ait_stack);

        assert_non_null(pg);
        return pg;
}

long ait_sql_long(const char *sql, int n, const char *const *params)
{
        PGconn *pg = ait_pg();
        long v = it_sql_long(pg, sql, n, params);

        PQfinish(pg);
        return v;
}

void ait_exec(const char *sql, int n, const char *const *params)
{
        it_sql_run(&ait_stack, sql, n, params);
}

long ait_outbox_mark(void)
{
        return ait_sql_long("SELECT coalesce(max(id), 0) FROM auth.outbox", 0, NULL);
}

long ait_events(long mark, const char *topic, const char *tenant_id)
{
        char m[24];
        const char *params[3] = {m, topic, tenant_id ? tenant_id : ""};

        snprintf(m, sizeof(m), "%ld", mark);
        return ait_sql_long("SELECT count(*) FROM auth.outbox WHERE id > $1::int8 AND topic = $2"
                            " AND ($3 = '' OR tenant_id = NULLIF($3, '')::uuid)",
                            3, params);
}

long ait_published_after(long mark)
{
        char m[24];
        const char *params[1] = {m};

        snprintf(m, sizeof(m), "%ld", mark);
        return ait_sql_long("SELECT count(*) FROM auth.outbox WHERE id > $1::int8", 1, params);
}

PGresult *ait_event_rows(PGconn *pg, long mark, const char *topic)
{
        char m[24];
        const char *params[2] = {m, topic};

        snprintf(m, sizeof(m), "%ld", mark);
        return it_sql(pg,
                      "SELECT payload, coalesce(tenant_id::text, '') FROM auth.outbox"
                      " WHERE id > $1::int8 AND topic = $2 ORDER BY id",
                      2, params);
}

uint8_t *ait_unescape(const PGresult *res, int row, size_t *len)
{
        uint8_t *b = PQunescapeBytea((const unsigned char *)PQgetvalue(res, row, 0), len);

        assert_non_null(b);
        return b;
}

long ait_memberships(const char *tenant_id, const char *user_id, const char *role)
{
        const char *params[3] = {tenant_id, user_id, role};

        return ait_sql_long("SELECT count(*) FROM auth.memberships WHERE tenant_id = $1::uuid"
                            " AND user_id = $2::uuid AND ($3 = '' OR role = $3)",
                            3, params);
}

long ait_audit_mark(void)
{
        return ait_sql_long("SELECT coalesce(max(id), 0) FROM auth.audit_log", 0, NULL);
}

long ait_audit_rows(long mark, const char *tenant_id, const char *action)
{
        char m[24];
        const char *params[3] = {m, tenant_id, action};

        snprintf(m, sizeof(m), "%ld", mark);
        return ait_sql_long("SELECT count(*) FROM auth.audit_log WHERE id > $1::int8"
                            " AND tenant_id = $2::uuid AND ($3 = '' OR action = $3)",
                            3, params);
}

int ait_each_event(long mark, const char *topic, const ProtobufCMessageDescriptor *d,
                   ait_event_fn fn, void *arg)
{
        PGconn *pg = ait_pg();
        PGresult *res = ait_event_rows(pg, mark, topic);
        int n = 0;

        for (int i = 0; i < PQntuples(res); i++) {
                size_t len = 0;
                uint8_t *b = ait_unescape(res, i, &len);
                ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, b);

                if (m == NULL) {
                        fail_msg("a %s outbox row that is no %s", topic, d->name);
                }
                n += fn(m, PQgetvalue(res, i, 1), arg);
                protobuf_c_message_free_unpacked(m, NULL);
                PQfreemem(b);
        }
        PQclear(res);
        PQfinish(pg);
        return n;
}

typedef struct mail_query {
        const char *to, *kind;
        char *token;
} mail_query;

static int mail_to(const ProtobufCMessage *msg, const char *tenant_id, void *arg)
{
        const Keelson__Auth__V1__EmailRequested *m = (const void *)msg;
        mail_query *q = arg;

        (void)tenant_id;
        if (strcmp(m->to, q->to) != 0 || strcmp(m->kind, q->kind) != 0) {
                return 0;
        }
        snprintf(q->token, AIT_TOKEN_MAX, "%s", m->token);
        return 1;
}

int ait_mail_token(long mark, const char *to, const char *kind, char token[AIT_TOKEN_MAX])
{
        mail_query q = {to, kind, token};

        token[0] = '\0';
        return ait_each_event(mark, "auth.email", &keelson__auth__v1__email_requested__descriptor,
                              mail_to, &q);
}

typedef struct revoked_query {
        uint8_t want[KS_SHA256_BYTES];
        char *reason;
} revoked_query;

/* How many of the event's hashes are the one wanted; its reason when any. */
static int revoked_count(const ProtobufCMessage *msg, const char *tenant_id, void *arg)
{
        const Keelson__Auth__V1__ContextRevoked *m = (const void *)msg;
        revoked_query *q = arg;
        int found = 0;

        (void)tenant_id;
        for (size_t k = 0; k < m->n_token_sha256; k++) {
                if (m->token_sha256[k].len == KS_SHA256_BYTES &&
                    memcmp(m->token_sha256[k].data, q->want, KS_SHA256_BYTES) == 0) {
                        found++;
                        if (q->reason != NULL) {
                                snprintf(q->reason, 64, "%s", m->reason);
                        }
                }
        }
        return found;
}

int ait_revoked_has(long mark, const char *token, char *reason)
{
        revoked_query q = {.reason = reason};

        ks_sha256(token, strlen(token), q.want);
        return ait_each_event(mark, "auth.context_revoked",
                              &keelson__auth__v1__context_revoked__descriptor, revoked_count, &q);
}

typedef struct summary_query {
        const char *tenant_id, *reason;
} summary_query;

static int summary_of(const ProtobufCMessage *msg, const char *tenant_id, void *arg)
{
        const Keelson__Auth__V1__AdminSummaryChanged *m = (const void *)msg;
        summary_query *q = arg;

        if (strcmp(tenant_id, q->tenant_id) != 0) {
                return 0;
        }
        assert_string_equal(m->tenant_id, q->tenant_id);
        assert_string_equal(m->reason, q->reason);
        return 1;
}

void ait_assert_one_summary(long mark, const char *tenant_id, const char *reason)
{
        summary_query q = {tenant_id, reason};
        int n =
            ait_each_event(mark, "users.admin_summary",
                           &keelson__auth__v1__admin_summary_changed__descriptor, summary_of, &q);

        if (n != 1) {
                fail_msg("expected one users.admin_summary (%s) for %s, found %d", reason,
                         tenant_id, n);
        }
}
