/*
 * Invitations: Invite, ListInvitations, RevokeInvitation (tenant methods,
 * members.invite) and AcceptInvitation (public).
 *
 * An invitation is a random token (32 bytes, base64url) bound to a tenant,
 * an address and a role, valid 7 days (KEELSON_AUTH_INVITATION_TTL_S) and
 * once. Only its SHA-256 is stored; the token itself travels only in the
 * auth.email event a mail sender delivers. Inviting an address again
 * replaces its open invitation (the old token stops working). A batch of up
 * to 100 addresses is one write: all are invited or none (an address that is
 * already a member makes the whole call already_exists), with one
 * users.admin_summary event.
 *
 * AcceptInvitation claims the invitation with one conditional UPDATE, so two
 * concurrent accepts cannot both succeed; a used, expired, revoked or unknown
 * token gets the same not_found. A new address sets its password; an
 * address with an account proves it with its current password (a leaked
 * invitation must not be a way into someone's existing account).
 */
#include "auth.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"

#define INVALID_TOKEN_MSG "this invitation is invalid, expired or already used"

static const char sql_members_with_email[] =
    "SELECT u.email FROM auth.memberships m JOIN auth.users u ON u.id = m.user_id"
    " WHERE m.tenant_id = auth.ctx_tenant()"
    " AND u.email IN (SELECT jsonb_array_elements_text($1::jsonb)) LIMIT 1";

static const char sql_tenant_name[] = "SELECT name FROM auth.tenants WHERE id = auth.ctx_tenant()";

static const char sql_close_open[] =
    "UPDATE auth.invitations SET revoked_at = now()"
    " WHERE tenant_id = auth.ctx_tenant() AND accepted_at IS NULL AND revoked_at IS NULL"
    " AND email IN (SELECT jsonb_array_elements_text($1::jsonb))";

static const char sql_insert[] =
    "INSERT INTO auth.invitations (tenant_id, email, role, token_sha256, invited_by_user_id,"
    " invited_by_api_key_id, expires_at)"
    " VALUES (auth.ctx_tenant(), $1, $2, $3::bytea, NULLIF($4, '')::uuid, NULLIF($5, '')::uuid,"
    " now() + $6::int8 * interval '1 second')"
    " RETURNING id, floor(extract(epoch FROM created_at) * 1000)::int8,"
    " floor(extract(epoch FROM expires_at) * 1000)::int8";

#define STATUS_SQL                                                                                 \
        "CASE WHEN accepted_at IS NOT NULL THEN 'accepted' WHEN revoked_at IS NOT NULL THEN"       \
        " 'revoked' WHEN expires_at <= now() THEN 'expired' ELSE 'pending' END"

/* $1, $2 the cursor (created_at in micros, id), $3 the limit, $4 the filter: list.c. */
static const char sql_list[] =
    "SELECT id, email, role, " STATUS_SQL ", floor(extract(epoch FROM created_at) * 1000)::int8,"
    " floor(extract(epoch FROM expires_at) * 1000)::int8,"
    " coalesce(invited_by_user_id::text, ''), coalesce(invited_by_api_key_id::text, ''),"
    " (extract(epoch FROM created_at) * 1000000)::int8"
    " FROM auth.invitations"
    " WHERE ($4::bool OR (accepted_at IS NULL AND revoked_at IS NULL AND expires_at > now()))"
    " AND (created_at, id) <"
    " (timestamptz 'epoch' + $1::int8 * interval '1 microsecond', $2::uuid)"
    " ORDER BY created_at DESC, id DESC LIMIT $3::int";

static const char sql_get_for_revoke[] =
    "SELECT role, email, " STATUS_SQL " FROM auth.invitations WHERE id = $1::uuid FOR UPDATE";

static const char sql_revoke[] =
    "UPDATE auth.invitations SET revoked_at = now() WHERE id = $1::uuid";

static const char sql_lookup[] =
    "SELECT invitation_id, tenant_id, email, role FROM auth.invitation_lookup($1::bytea)";

static const char sql_claim[] =
    "UPDATE auth.invitations SET accepted_at = now(), accepted_user_id = $2::uuid"
    " WHERE id = $1::uuid AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > now()"
    " RETURNING role";

static const char sql_insert_user[] =
    "INSERT INTO auth.users (id, email, password_hash, display_name)"
    " VALUES ($1::uuid, $2, $3, $4) ON CONFLICT (email) DO NOTHING RETURNING id";

static const char sql_insert_member[] =
    "INSERT INTO auth.memberships (tenant_id, user_id, role)"
    " VALUES (auth.ctx_tenant(), $1::uuid, $2) ON CONFLICT (tenant_id, user_id) DO NOTHING";

/* ---- Invite ------------------------------------------------------------- */

typedef struct invite {
        const char *role;
        size_t n;
        char (*emails)[KS_EMAIL_BYTES_MAX + 1];
        char *emails_json; /* the same addresses as a JSON array, for SQL */
        char tenant_name[AUTH_NAME_BYTES_MAX + 1];
        Keelson__Auth__V1__Invitation *out;
        char (*ids)[AUTH_UUID_LEN + 1];
} invite;

/* Normalises, validates and deduplicates the addresses into in. */
static int check_emails(ks_call *call, const Keelson__Auth__V1__InviteRequest *req, invite *in)
{
        char err[AUTH_ERR_MAX];
        json_t *arr = json_array();

        if (arr == NULL) {
                return ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        }
        for (size_t i = 0; i < req->n_emails; i++) {
                char *e = in->emails[i];

                if (ks_email_normalize(req->emails[i], e, KS_EMAIL_BYTES_MAX + 1) != 0 ||
                    ks_email_validate(e, err, sizeof(err)) != KS_OK) {
                        json_decref(arr);
                        return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                            "emails[%zu]: not a valid"
                                            " email address",
                                            i);
                }
                for (size_t j = 0; j < i; j++) {
                        if (strcmp(in->emails[j], e) == 0) {
                                json_decref(arr);
                                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                                    "emails[%zu]: the same address as emails[%zu]",
                                                    i, j);
                        }
                }
                json_array_append_new(arr, json_string(e));
        }
        in->n = req->n_emails;
        in->emails_json = json_dumps(arr, JSON_COMPACT);
        json_decref(arr);
        return in->emails_json != NULL ? KS_OK : ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
}

/* Refuses the batch when one address already belongs to a member; reads the tenant name. */
static int check_members(auth_tx *tx, invite *in)
{
        const char *params[1] = {in->emails_json};
        PGresult *res = NULL;
        int rc;

        if ((rc = ks_pg_exec(tx->conn, tx->call->request_id, sql_members_with_email, 1, params,
                             &res)) != KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        if (PQntuples(res) > 0) {
                rc = ks_call_fail(tx->call, KS_ALREADY_EXISTS, "%s is already a member",
                                  PQgetvalue(res, 0, 0));
                PQclear(res);
                return rc;
        }
        PQclear(res);
        if ((rc = ks_pg_exec(tx->conn, tx->call->request_id, sql_tenant_name, 0, NULL, &res)) !=
            KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        if (PQntuples(res) == 1) {
                auth_copy_field(res, 0, 0, in->tenant_name, sizeof(in->tenant_name));
        }
        PQclear(res);
        return KS_OK;
}

/* One invitation: the row, the mail, the audit row; fills in->out[i]. */
static int invite_one(auth_tx *tx, invite *in, size_t i)
{
        auth_service *svc = tx->svc;
        const char *rid = tx->call->request_id;
        char token[AUTH_TOKEN_LEN + 1], hash[AUTH_SHA256_PARAM_LEN], ttl[24];
        const char *params[6] = {in->emails[i],        in->role, hash, tx->actor.user_id,
                                 tx->actor.api_key_id, ttl};
        auth_email mail = {in->emails[i],       "invitation", token, in->tenant_name,
                           tx->actor.tenant_id, in->role,     0};
        Keelson__Auth__V1__Invitation *o = &in->out[i];
        PGresult *res = NULL;
        int rc;

        if (auth_new_token(token) != KS_OK) {
                return KS_INTERNAL;
        }
        auth_token_hash_param(token, AUTH_TOKEN_LEN, hash);
        snprintf(ttl, sizeof(ttl), "%lld", (long long)svc->invitation_ttl_s);
        if ((rc = ks_pg_exec(tx->conn, rid, sql_insert, 6, params, &res)) == KS_OK) {
                auth_copy_field(res, 0, 0, in->ids[i], AUTH_UUID_LEN + 1);
                keelson__auth__v1__invitation__init(o);
                o->id = in->ids[i];
                o->email = in->emails[i];
                o->role = (char *)in->role;
                o->status = "pending";
                o->created_at_unix_ms = auth_int_field(res, 0, 1);
                o->expires_at_unix_ms = mail.expires_at_unix_ms = auth_int_field(res, 0, 2);
                o->invited_by_user_id = tx->actor.user_id;
                o->invited_by_api_key_id = tx->actor.api_key_id;
                PQclear(res);
                rc = auth_emit_email(tx->conn, rid, &mail);
        }
        explicit_bzero(token, sizeof(token));
        if (rc == KS_OK) {
                rc = auth_audit(tx->conn, rid, &tx->actor, "invitation.created", "invitation",
                                in->ids[i],
                                json_pack("{s:s, s:s}", "email", in->emails[i], "role", in->role));
        }
        return rc;
}

static int invite_tx(auth_tx *tx, void *arg)
{
        Keelson__Auth__V1__InviteResponse resp = KEELSON__AUTH__V1__INVITE_RESPONSE__INIT;
        Keelson__Auth__V1__Invitation *ptrs[AUTH_INVITE_BATCH_MAX];
        invite *in = arg;
        const char *params[1] = {in->emails_json};
        int rc;

        if (ks_role_rank(in->role) > tx->actor.rank) {
                return ks_call_fail(tx->call, KS_PERMISSION_DENIED,
                                    "cannot invite with a role above your own (%s)",
                                    tx->actor.role);
        }
        if ((rc = check_members(tx, in)) != KS_OK) {
                return rc;
        }
        if ((rc = ks_pg_exec(tx->conn, tx->call->request_id, sql_close_open, 1, params, NULL)) !=
            KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        for (size_t i = 0; i < in->n; i++) {
                if ((rc = invite_one(tx, in, i)) != KS_OK) {
                        return auth_db_fail(tx->call, rc);
                }
                ptrs[i] = &in->out[i];
        }
        if ((rc = auth_emit_admin_summary(tx->conn, tx->call->request_id, tx->actor.tenant_id,
                                          "Invite")) != KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        resp.n_invitations = in->n;
        resp.invitations = ptrs;
        return ks_call_reply(tx->call, &resp.base);
}

static void invite_free(invite *in)
{
        free(in->emails);
        free(in->emails_json);
        free(in->out);
        free(in->ids);
}

int auth_invite(ks_call *call)
{
        const Keelson__Auth__V1__InviteRequest *req =
            (const Keelson__Auth__V1__InviteRequest *)call->in;
        invite in;
        int rc;

        memset(&in, 0, sizeof(in));
        if (req->n_emails < 1 || req->n_emails > AUTH_INVITE_BATCH_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "emails: 1..%d addresses",
                                    AUTH_INVITE_BATCH_MAX);
        }
        if (ks_role_rank(req->role) == 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "role: one of owner, admin, member, viewer");
        }
        in.role = req->role;
        in.emails = calloc(req->n_emails, sizeof(*in.emails));
        in.out = calloc(req->n_emails, sizeof(*in.out));
        in.ids = calloc(req->n_emails, sizeof(*in.ids));
        if (in.emails == NULL || in.out == NULL || in.ids == NULL) {
                rc = ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        } else if ((rc = check_emails(call, req, &in)) == KS_OK) {
                rc = auth_tenant_tx(call, AUTH_TX_DEDUPE, invite_tx, &in);
        }
        if (rc == KS_OK) {
                ks_log_info(call->request_id, "invited", "{s:i, s:s}", "addresses", (int)in.n,
                            "role", in.role);
        }
        invite_free(&in);
        return rc;
}

/* ---- ListInvitations ---------------------------------------------------- */

static void invitation_item(void *item, const PGresult *res, int row)
{
        Keelson__Auth__V1__Invitation *v = item;

        keelson__auth__v1__invitation__init(v);
        v->id = PQgetvalue(res, row, 0);
        v->email = PQgetvalue(res, row, 1);
        v->role = PQgetvalue(res, row, 2);
        v->status = PQgetvalue(res, row, 3);
        v->created_at_unix_ms = auth_int_field(res, row, 4);
        v->expires_at_unix_ms = auth_int_field(res, row, 5);
        v->invited_by_user_id = PQgetvalue(res, row, 6);
        v->invited_by_api_key_id = PQgetvalue(res, row, 7);
}

/* Newest first; the sort key is (created_at in micros, id). */
static const ks_list_method list_invitations = {
    .page = AUTH_LIST_PAGE("ListInvitations", Keelson__Auth__V1__Invitation, invitation_item,
                           KS_LIST_DESC_MICROS(8), KS_LIST_DESC_UUID(0)),
    .sql = sql_list,
    .items_field = "invitations",
};

int auth_list_invitations(ks_call *call)
{
        const Keelson__Auth__V1__ListInvitationsRequest *req =
            (const Keelson__Auth__V1__ListInvitationsRequest *)call->in;
        const char *filters[1] = {req->include_closed ? "true" : "false"};

        return auth_list_reply(call, &list_invitations, req->page_size, req->page_token, filters,
                               1);
}

/* ---- RevokeInvitation --------------------------------------------------- */

static int revoke_changes(auth_tx *tx, const char *id, const PGresult *row)
{
        const char *params[1] = {id};
        const char *rid = tx->call->request_id;
        int rc;

        if ((rc = ks_pg_exec(tx->conn, rid, sql_revoke, 1, params, NULL)) != KS_OK ||
            (rc = auth_audit(tx->conn, rid, &tx->actor, "invitation.revoked", "invitation", id,
                             json_pack("{s:s, s:s}", "email", PQgetvalue(row, 0, 1), "role",
                                       PQgetvalue(row, 0, 0)))) != KS_OK ||
            (rc = auth_emit_admin_summary(tx->conn, rid, tx->actor.tenant_id,
                                          "RevokeInvitation")) != KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        return KS_OK;
}

static int revoke_tx(auth_tx *tx, void *arg)
{
        Keelson__Auth__V1__RevokeInvitationResponse resp =
            KEELSON__AUTH__V1__REVOKE_INVITATION_RESPONSE__INIT;
        const char *id = arg;
        const char *params[1] = {id};
        PGresult *res = NULL;
        const char *status;
        int rc;

        if ((rc = ks_pg_exec(tx->conn, tx->call->request_id, sql_get_for_revoke, 1, params,
                             &res)) != KS_OK) {
                return auth_db_fail(tx->call, rc);
        }
        if (PQntuples(res) != 1) {
                rc = ks_call_fail(tx->call, KS_NOT_FOUND, "no such invitation");
        } else if (ks_role_rank(PQgetvalue(res, 0, 0)) > tx->actor.rank) {
                rc = ks_call_fail(tx->call, KS_PERMISSION_DENIED,
                                  "this invitation's role is above yours (%s)", tx->actor.role);
        } else if (strcmp((status = PQgetvalue(res, 0, 2)), "accepted") == 0) {
                rc = ks_call_fail(tx->call, KS_FAILED_PRECONDITION,
                                  "this invitation was already accepted");
        } else if (strcmp(status, "revoked") != 0) {
                /* Pending or expired: revoked now. Already revoked: nothing changes. */
                rc = revoke_changes(tx, id, res);
        }
        PQclear(res);
        return rc == KS_OK ? ks_call_reply(tx->call, &resp.base) : rc;
}

int auth_revoke_invitation(ks_call *call)
{
        const Keelson__Auth__V1__RevokeInvitationRequest *req =
            (const Keelson__Auth__V1__RevokeInvitationRequest *)call->in;

        if (!auth_uuid_valid(req->invitation_id)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "invitation_id: not a valid uuid");
        }
        return auth_tenant_tx(call, AUTH_TX_DEDUPE, revoke_tx, req->invitation_id);
}

/* ---- AcceptInvitation --------------------------------------------------- */

typedef struct accept_state {
        char hash[AUTH_SHA256_PARAM_LEN];
        char invitation_id[AUTH_UUID_LEN + 1];
        char tenant_id[AUTH_UUID_LEN + 1];
        char email[KS_EMAIL_BYTES_MAX + 1];
        char role[AUTH_ROLE_MAX];
        bool new_user;
        char user_id[AUTH_UUID_LEN + 1];
        char display_name[AUTH_NAME_BYTES_MAX + 1];
        char password_hash[KS_PASSWORD_HASH_MAX];
        auth_session session;
} accept_state;

/* The open invitation behind the token; KS_NOT_FOUND when there is none. */
static int lookup_invitation(ks_call *call, accept_state *a)
{
        const char *params[1] = {a->hash};
        PGresult *res = NULL;
        int rc;

        if ((rc = auth_db_exec_once(call->service, call->request_id, sql_lookup, 1, params,
                                    &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) != 1) {
                PQclear(res);
                return KS_NOT_FOUND;
        }
        auth_copy_field(res, 0, 0, a->invitation_id, sizeof(a->invitation_id));
        auth_copy_field(res, 0, 1, a->tenant_id, sizeof(a->tenant_id));
        auth_copy_field(res, 0, 2, a->email, sizeof(a->email));
        auth_copy_field(res, 0, 3, a->role, sizeof(a->role));
        PQclear(res);
        return KS_OK;
}

/*
 * Who accepts: the existing account (its password checked, with lockout) or
 * a new one (its password validated and hashed). Replies on refusal.
 */
static int accepting_user(ks_call *call, const Keelson__Auth__V1__AcceptInvitationRequest *req,
                          accept_state *a)
{
        const char *password = req->password ? req->password : "";
        char err[AUTH_ERR_MAX];
        auth_login_user u;
        bool ok = false;
        int rc;

        if ((rc = auth_hash_admit(call)) != KS_OK) {
                return rc;
        }
        if ((rc = auth_login_lookup(call->service, call->request_id, a->email, &u)) != KS_OK) {
                return auth_db_fail(call, rc);
        }
        if (u.found) {
                if (strlen(password) > AUTH_PASSWORD_BYTES_MAX) {
                        return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                            "password: at most 1024 bytes");
                }
                if ((rc = auth_password_check(call, &u, password, &ok)) != KS_OK) {
                        return rc;
                }
                if (!ok) {
                        return ks_call_fail(call, KS_UNAUTHENTICATED, AUTH_LOGIN_FAILED_MSG);
                }
                snprintf(a->user_id, sizeof(a->user_id), "%s", u.id);
                return KS_OK;
        }
        if ((rc = auth_password_validate(password, err, sizeof(err))) != KS_OK ||
            (rc = ks_name_normalize("display_name", req->display_name, AUTH_NAME_CHARS_MAX,
                                    a->display_name, sizeof(a->display_name), err, sizeof(err))) !=
                KS_OK) {
                return ks_call_fail(call, rc, "%s", err);
        }
        if ((rc = auth_password_new_hash(call, password, a->password_hash)) != KS_OK) {
                return rc;
        }
        a->new_user = true;
        return ks_uuid_v4(a->user_id) == 0 ? KS_OK
                                           : ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
}

/* The user row (new accounts) and the membership, inside the transaction. */
static int join(PGconn *conn, const char *rid, accept_state *a)
{
        const char *user_params[4] = {a->user_id, a->email, a->password_hash, a->display_name};
        const char *member_params[2] = {a->user_id, a->role};
        PGresult *res = NULL;
        int rc;

        if (a->new_user) {
                if ((rc = ks_pg_exec(conn, rid, sql_insert_user, 4, user_params, &res)) != KS_OK) {
                        return rc;
                }
                /* Someone signed up with this address meanwhile: the client retries. */
                rc = PQntuples(res) == 1 ? KS_OK : KS_ABORTED;
                PQclear(res);
                if (rc != KS_OK) {
                        return rc;
                }
        }
        /* Already a member (added meanwhile): the membership and its role stay as they are. */
        return ks_pg_exec(conn, rid, sql_insert_member, 2, member_params, NULL);
}

static int accept_tx(auth_service *svc, PGconn *conn, const char *rid, void *arg)
{
        accept_state *a = arg;
        const char *claim_params[2] = {a->invitation_id, a->user_id};
        auth_actor actor;
        PGresult *res = NULL;
        int rc;

        if ((rc = auth_tx_begin(conn, rid, a->tenant_id, a->user_id)) != KS_OK ||
            (rc = ks_pg_exec(conn, rid, sql_claim, 2, claim_params, &res)) != KS_OK) {
                return rc;
        }
        rc = PQntuples(res) == 1 ? KS_OK : KS_NOT_FOUND; /* accepted or revoked meanwhile */
        PQclear(res);
        if (rc != KS_OK || (rc = join(conn, rid, a)) != KS_OK ||
            (rc = auth_session_create(svc, conn, rid, a->user_id, a->tenant_id, &a->session)) !=
                KS_OK) {
                return rc == KS_NOT_FOUND ? KS_NOT_FOUND : rc;
        }
        memset(&actor, 0, sizeof(actor));
        snprintf(actor.tenant_id, sizeof(actor.tenant_id), "%s", a->tenant_id);
        snprintf(actor.user_id, sizeof(actor.user_id), "%s", a->user_id);
        if ((rc = auth_audit(conn, rid, &actor, "invitation.accepted", "invitation",
                             a->invitation_id,
                             json_pack("{s:s, s:s, s:b}", "email", a->email, "role", a->role,
                                       "new_account", a->new_user))) != KS_OK ||
            (rc = auth_emit_admin_summary(conn, rid, a->tenant_id, "AcceptInvitation")) != KS_OK) {
                return rc;
        }
        return ks_pg_commit(conn, rid);
}

static int reply_accept(ks_call *call, const accept_state *a)
{
        Keelson__Auth__V1__AcceptInvitationResponse resp =
            KEELSON__AUTH__V1__ACCEPT_INVITATION_RESPONSE__INIT;

        resp.session_token = (char *)a->session.token;
        resp.expires_at_unix_ms = a->session.expires_at_unix_ms;
        resp.user_id = (char *)a->user_id;
        resp.tenant_id = (char *)a->session.tenant_id;
        resp.role = (char *)a->session.role;
        return ks_call_reply(call, &resp.base);
}

static int accept_commit(ks_call *call, accept_state *a)
{
        int rc = auth_db_tx(call->service, call->request_id, accept_tx, a);

        if (rc == KS_NOT_FOUND) {
                return ks_call_fail(call, KS_NOT_FOUND, INVALID_TOKEN_MSG);
        }
        if (rc != KS_OK) {
                return auth_db_fail(call, rc);
        }
        ks_log_info(call->request_id, "invitation accepted", "{s:s, s:s, s:s, s:b}",
                    "invitation_id", a->invitation_id, "tenant_id", a->tenant_id, "user_id",
                    a->user_id, "new_account", a->new_user);
        return reply_accept(call, a);
}

int auth_accept_invitation(ks_call *call)
{
        const Keelson__Auth__V1__AcceptInvitationRequest *req =
            (const Keelson__Auth__V1__AcceptInvitationRequest *)call->in;
        size_t len = req->token ? strlen(req->token) : 0;
        accept_state *a;
        int rc;

        if (len == 0 || len > AUTH_TOKEN_BYTES_MAX) {
                return ks_call_fail(call, KS_NOT_FOUND, INVALID_TOKEN_MSG);
        }
        if ((a = calloc(1, sizeof(*a))) == NULL) {
                return ks_call_fail(call, KS_INTERNAL, AUTH_INTERNAL_MSG);
        }
        auth_token_hash_param(req->token, len, a->hash);
        if ((rc = lookup_invitation(call, a)) == KS_NOT_FOUND) {
                rc = ks_call_fail(call, KS_NOT_FOUND, INVALID_TOKEN_MSG);
        } else if (rc != KS_OK) {
                rc = auth_db_fail(call, rc);
        } else if ((rc = accepting_user(call, req, a)) == KS_OK) {
                rc = accept_commit(call, a);
        }
        explicit_bzero(a, sizeof(*a));
        free(a);
        return rc;
}
