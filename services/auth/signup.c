/*
 * SignUp: a user, their first tenant and the owner membership, together.
 *
 * The password is hashed before a connection is taken: scrypt costs 25-50 ms
 * and neither a pool connection nor a transaction is held across it. The
 * three inserts run in one transaction, so a failure leaves no user without
 * a tenant. A taken email is found by ON CONFLICT DO NOTHING returning no row
 * rather than by a unique violation: an expected outcome, not an error to log.
 */
#include "auth.h"

#include <string.h>

#include "ks_log.h"

static const char sql_insert_user[] =
    "INSERT INTO auth.users (email, password_hash, display_name) VALUES ($1, $2, $3)"
    " ON CONFLICT (email) DO NOTHING RETURNING id";

static const char sql_insert_tenant[] = "INSERT INTO auth.tenants (name) VALUES ($1) RETURNING id";

static const char sql_insert_owner[] =
    "INSERT INTO auth.memberships (tenant_id, user_id, role) VALUES ($1::uuid, $2::uuid, 'owner')";

typedef struct signup_input {
        char email[AUTH_EMAIL_BYTES_MAX + 1];
        char tenant_name[AUTH_NAME_BYTES_MAX + 1];
        char display_name[AUTH_NAME_BYTES_MAX + 1];
        char hash[KS_PASSWORD_HASH_MAX];
} signup_input;

typedef struct signup_ids {
        char user_id[AUTH_UUID_LEN + 1];
        char tenant_id[AUTH_UUID_LEN + 1];
} signup_ids;

/* Normalises and validates every field; the first bad one names itself in the reply. */
static int check_request(ks_call *call, const Keelson__Auth__V1__SignUpRequest *req,
                         signup_input *in)
{
        char err[AUTH_ERR_MAX];
        int rc;

        if (auth_email_normalize(req->email ? req->email : "", in->email, sizeof(in->email)) != 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "email: at most 254 bytes");
        }
        if ((rc = auth_email_validate(in->email, err, sizeof(err))) != KS_OK ||
            (rc = auth_password_validate(req->password, err, sizeof(err))) != KS_OK ||
            (rc = auth_name_normalize("tenant_name", req->tenant_name, in->tenant_name,
                                      sizeof(in->tenant_name), err, sizeof(err))) != KS_OK ||
            (rc = auth_name_normalize("display_name", req->display_name, in->display_name,
                                      sizeof(in->display_name), err, sizeof(err))) != KS_OK) {
                return ks_call_fail(call, rc, "%s", err);
        }
        if (in->tenant_name[0] == '\0') {
                auth_default_tenant_name(in->email, in->tenant_name, sizeof(in->tenant_name));
        }
        return KS_OK;
}

/* Runs one INSERT ... RETURNING id inside the transaction; copies the id. */
static int insert_returning_id(PGconn *conn, const char *request_id, const char *sql, int n,
                               const char *const *params, char out[AUTH_UUID_LEN + 1])
{
        PGresult *res = NULL;
        int rc;

        if ((rc = ks_pg_exec(conn, request_id, sql, n, params, &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) != 1) {
                PQclear(res);
                return KS_ALREADY_EXISTS;
        }
        auth_copy_field(res, 0, 0, out, AUTH_UUID_LEN + 1);
        PQclear(res);
        return KS_OK;
}

/*
 * The three inserts. Returns KS_OK after COMMIT; KS_ALREADY_EXISTS when the
 * email is taken (only the user insert can return no row); another code on
 * failure. The caller rolls back on any failure.
 */
static int insert_all(PGconn *conn, const char *request_id, const signup_input *in, signup_ids *ids)
{
        const char *user_params[3] = {in->email, in->hash, in->display_name};
        const char *tenant_params[1] = {in->tenant_name};
        const char *owner_params[2] = {ids->tenant_id, ids->user_id};
        int rc;

        if ((rc = ks_pg_begin(conn, request_id)) != KS_OK) {
                return rc;
        }
        if ((rc = insert_returning_id(conn, request_id, sql_insert_user, 3, user_params,
                                      ids->user_id)) != KS_OK) {
                return rc;
        }
        if ((rc = insert_returning_id(conn, request_id, sql_insert_tenant, 1, tenant_params,
                                      ids->tenant_id)) != KS_OK) {
                /* No conflict is possible on tenants: a missing row is a bug. */
                return rc == KS_ALREADY_EXISTS ? KS_INTERNAL : rc;
        }
        if ((rc = ks_pg_exec(conn, request_id, sql_insert_owner, 2, owner_params, NULL)) != KS_OK) {
                return rc == KS_ALREADY_EXISTS ? KS_INTERNAL : rc;
        }
        return ks_pg_commit(conn, request_id);
}

static int reply_ids(ks_call *call, signup_ids *ids)
{
        Keelson__Auth__V1__SignUpResponse resp = KEELSON__AUTH__V1__SIGN_UP_RESPONSE__INIT;

        resp.user_id = ids->user_id;
        resp.tenant_id = ids->tenant_id;
        return ks_call_reply(call, &resp.base);
}

int auth_signup(ks_call *call)
{
        const Keelson__Auth__V1__SignUpRequest *req =
            (const Keelson__Auth__V1__SignUpRequest *)call->in;
        auth_service *svc = call->service;
        signup_input in;
        signup_ids ids;
        PGconn *conn = NULL;
        int rc;

        memset(&in, 0, sizeof(in));
        memset(&ids, 0, sizeof(ids));
        if ((rc = check_request(call, req, &in)) != KS_OK) {
                return rc;
        }
        if (ks_password_hash(req->password, &svc->scrypt, in.hash) != 0) {
                ks_log_error(call->request_id, "password hashing failed", NULL);
                return ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        }
        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        rc = insert_all(conn, call->request_id, &in, &ids);
        if (rc != KS_OK) {
                ks_pg_rollback(conn);
        }
        ks_pg_release(svc->pool, conn);
        if (rc == KS_ALREADY_EXISTS) {
                return ks_call_fail(call, KS_ALREADY_EXISTS,
                                    "an account with this email already exists");
        }
        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        ks_log_info(call->request_id, "signed up", "{s:s, s:s}", "user_id", ids.user_id,
                    "tenant_id", ids.tenant_id);
        return reply_ids(call, &ids);
}
