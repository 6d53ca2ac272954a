/*
 * SignUp: a user, their first tenant and the owner membership, together.
 *
 * The password is hashed (on the hash pool) before a connection is taken:
 * neither a pool connection nor a transaction is held across scrypt. The
 * ids are made here, so that the transaction can say from its first
 * statement which tenant and user it acts for (row-level security checks
 * every insert against them). The three inserts, the audit row and the
 * users.admin_summary event commit together or not at all. A taken email is
 * found by ON CONFLICT DO NOTHING returning no row rather than by a unique
 * violation: an expected outcome, not an error to log.
 */
#include "auth.h"

#include <jansson.h>
#include <string.h>

#include "ks_log.h"

static const char sql_insert_user[] =
    "INSERT INTO auth.users (id, email, password_hash, display_name)"
    " VALUES ($1::uuid, $2, $3, $4) ON CONFLICT (email) DO NOTHING RETURNING id";

static const char sql_insert_tenant[] = "INSERT INTO auth.tenants (id, name) VALUES ($1::uuid, $2)";

static const char sql_insert_owner[] =
    "INSERT INTO auth.memberships (tenant_id, user_id, role) VALUES ($1::uuid, $2::uuid, 'owner')";

typedef struct signup_input {
        char email[KS_EMAIL_BYTES_MAX + 1];
        char tenant_name[AUTH_NAME_BYTES_MAX + 1];
        char display_name[AUTH_NAME_BYTES_MAX + 1];
        char hash[KS_PASSWORD_HASH_MAX];
} signup_input;

/* Normalises and validates every field; the first bad one names itself in the reply. */
static int check_request(ks_call *call, const Keelson__Auth__V1__SignUpRequest *req,
                         signup_input *in)
{
        char err[AUTH_ERR_MAX];
        int rc;

        if (ks_email_normalize(req->email ? req->email : "", in->email, sizeof(in->email)) != 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "email: at most %d bytes",
                                    KS_EMAIL_BYTES_MAX);
        }
        if ((rc = ks_email_validate(in->email, err, sizeof(err))) != KS_OK ||
            (rc = auth_password_validate(req->password, err, sizeof(err))) != KS_OK ||
            (rc = ks_name_normalize("tenant_name", req->tenant_name, AUTH_NAME_CHARS_MAX,
                                    in->tenant_name, sizeof(in->tenant_name), err, sizeof(err))) !=
                KS_OK ||
            (rc = ks_name_normalize("display_name", req->display_name, AUTH_NAME_CHARS_MAX,
                                    in->display_name, sizeof(in->display_name), err,
                                    sizeof(err))) != KS_OK) {
                return ks_call_fail(call, rc, "%s", err);
        }
        if (in->tenant_name[0] == '\0') {
                auth_default_tenant_name(in->email, in->tenant_name, sizeof(in->tenant_name));
        }
        return KS_OK;
}

/*
 * Everything after BEGIN. Returns KS_OK after COMMIT; KS_ALREADY_EXISTS when
 * the email is taken; another code on failure. The caller rolls back.
 */
static int insert_all(PGconn *conn, const char *request_id, const signup_input *in,
                      const auth_actor *owner)
{
        const char *user_params[4] = {owner->user_id, in->email, in->hash, in->display_name};
        const char *tenant_params[2] = {owner->tenant_id, in->tenant_name};
        const char *owner_params[2] = {owner->tenant_id, owner->user_id};
        PGresult *res = NULL;
        int rc;

        if ((rc = auth_tx_begin(conn, request_id, owner->tenant_id, owner->user_id)) != KS_OK ||
            (rc = ks_pg_exec(conn, request_id, sql_insert_user, 4, user_params, &res)) != KS_OK) {
                return rc;
        }
        rc = PQntuples(res) == 1 ? KS_OK : KS_ALREADY_EXISTS;
        PQclear(res);
        if (rc != KS_OK) {
                return rc;
        }
        /* No conflict is possible below (fresh ids): a unique violation would be a bug. */
        if ((rc = ks_pg_exec(conn, request_id, sql_insert_tenant, 2, tenant_params, NULL)) !=
                KS_OK ||
            (rc = ks_pg_exec(conn, request_id, sql_insert_owner, 2, owner_params, NULL)) != KS_OK ||
            (rc = auth_audit(conn, request_id, owner, "tenant.created", "tenant", owner->tenant_id,
                             json_pack("{s:s}", "name", in->tenant_name))) != KS_OK ||
            (rc = auth_emit_admin_summary(conn, request_id, owner->tenant_id, "SignUp")) != KS_OK) {
                return rc == KS_ALREADY_EXISTS ? KS_INTERNAL : rc;
        }
        return ks_pg_commit(conn, request_id);
}

static int reply_ids(ks_call *call, const auth_actor *owner)
{
        Keelson__Auth__V1__SignUpResponse resp = KEELSON__AUTH__V1__SIGN_UP_RESPONSE__INIT;

        resp.user_id = (char *)owner->user_id;
        resp.tenant_id = (char *)owner->tenant_id;
        return ks_call_reply(call, &resp.base);
}

int auth_signup(ks_call *call)
{
        const Keelson__Auth__V1__SignUpRequest *req =
            (const Keelson__Auth__V1__SignUpRequest *)call->in;
        auth_service *svc = call->service;
        signup_input in;
        auth_actor owner;
        PGconn *conn = NULL;
        int rc;

        memset(&in, 0, sizeof(in));
        memset(&owner, 0, sizeof(owner));
        if ((rc = check_request(call, req, &in)) != KS_OK ||
            (rc = auth_hash_admit(call)) != KS_OK ||
            (rc = auth_password_new_hash(call, req->password, in.hash)) != KS_OK) {
                return rc;
        }
        if (ks_uuid_v4(owner.user_id) != 0 || ks_uuid_v4(owner.tenant_id) != 0) {
                return ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        }
        if ((rc = ks_pg_acquire(svc->pool, &conn)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        rc = insert_all(conn, call->request_id, &in, &owner);
        if (rc != KS_OK) {
                ks_pg_rollback(conn);
        }
        ks_pg_release(svc->pool, conn);
        explicit_bzero(in.hash, sizeof(in.hash));
        if (rc == KS_ALREADY_EXISTS) {
                return ks_call_fail(call, KS_ALREADY_EXISTS,
                                    "an account with this email already exists");
        }
        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        ks_log_info(call->request_id, "signed up", "{s:s, s:s}", "user_id", owner.user_id,
                    "tenant_id", owner.tenant_id);
        return reply_ids(call, &owner);
}
