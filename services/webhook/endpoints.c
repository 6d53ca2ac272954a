/*
 * Intake endpoints: CreateIntakeEndpoint, GetIntakeEndpoint,
 * ListIntakeEndpoints, UpdateIntakeEndpoint, RotateIntakeSecret.
 *
 * An endpoint is where one provider account sends its events: its id is in
 * the URL the provider calls (/webhooks/<provider>/<id>), its provider is
 * fixed, and its secrets are the ones the provider signs with. A secret is
 * checked against its provider's rules when given (signature.h) and never
 * shown again: an endpoint lists its active secrets by id and last four
 * characters. A rotation keeps at most two secrets active: the new one, and
 * the newest of the others until the time the rotation gives it (the older
 * ones end at once), so a provider that rolls its secret, and signs with
 * both while it does, is verified throughout.
 */
#include <stdio.h>
#include <string.h>

#include "ks_crypto.h"
#include "ks_text.h"
#include "webhook.h"

#define ENDPOINT_COLUMNS "id, provider, description, tolerance_s, enabled, created_ms, updated_ms"
#define ENDPOINT_SELECT  "SELECT " ENDPOINT_COLUMNS " FROM webhook.intake_endpoints"
#define SECRET_ACTIVE    "(expires_ms IS NULL OR expires_ms > webhook.now_ms())"

static const char sql_insert[] =
    "WITH e AS (INSERT INTO webhook.intake_endpoints (tenant_id, provider, description,"
    " tolerance_s, created_ms, updated_ms) VALUES (webhook.ctx_tenant(), $1::int2, $2, $3::int4,"
    " webhook.now_ms(), webhook.now_ms()) RETURNING id, created_ms)"
    " INSERT INTO webhook.intake_secrets (tenant_id, endpoint_id, secret, created_ms)"
    " SELECT webhook.ctx_tenant(), id, $4, created_ms FROM e RETURNING endpoint_id";

static const char sql_get[] =
    ENDPOINT_SELECT " WHERE tenant_id = webhook.ctx_tenant() AND id = $1::uuid";

static const char sql_secrets[] =
    "SELECT id, right(secret, 4), created_ms, COALESCE(expires_ms, 0) FROM webhook.intake_secrets"
    " WHERE tenant_id = webhook.ctx_tenant() AND endpoint_id = $1::uuid AND " SECRET_ACTIVE
    " ORDER BY created_ms DESC, id DESC";

static const char sql_lock[] = "SELECT provider FROM webhook.intake_endpoints"
                               " WHERE tenant_id = webhook.ctx_tenant() AND id = $1::uuid"
                               " FOR UPDATE";

/* The newest active secret keeps verifying until now + $2 s (or its own end, if sooner). */
static const char sql_retire[] =
    "UPDATE webhook.intake_secrets s SET expires_ms = CASE WHEN s.id = n.id THEN"
    " LEAST(COALESCE(s.expires_ms, 9223372036854775807), webhook.now_ms() + $2::int8 * 1000)"
    " ELSE webhook.now_ms() END"
    " FROM (SELECT id FROM webhook.intake_secrets WHERE tenant_id = webhook.ctx_tenant()"
    " AND endpoint_id = $1::uuid AND " SECRET_ACTIVE " ORDER BY created_ms DESC, id DESC LIMIT 1) n"
    " WHERE s.tenant_id = webhook.ctx_tenant() AND s.endpoint_id = $1::uuid"
    " AND (s.expires_ms IS NULL OR s.expires_ms > webhook.now_ms())";

static const char sql_add_secret[] =
    "INSERT INTO webhook.intake_secrets (tenant_id, endpoint_id, secret, created_ms)"
    " VALUES (webhook.ctx_tenant(), $1::uuid, $2, webhook.now_ms())";

static const char sql_touch[] = "UPDATE webhook.intake_endpoints SET updated_ms = webhook.now_ms()"
                                " WHERE tenant_id = webhook.ctx_tenant() AND id = $1::uuid";

/* ---- the reply -------------------------------------------------------------------------- */

static void path_of(Keelson__Webhook__V1__Provider p, const char *id, char *out, size_t len)
{
        const char *name = wh_provider_name((int)p);

        snprintf(out, len, "/webhooks/%s/%s", name != NULL ? name : "", id);
}

typedef struct endpoint_view {
        Keelson__Webhook__V1__IntakeEndpoint e;
        char path[64];
} endpoint_view;

/* An endpoint row (ENDPOINT_COLUMNS) into v; its strings point into r. */
static void endpoint_of(const PGresult *r, int i, endpoint_view *v)
{
        Keelson__Webhook__V1__IntakeEndpoint *e = &v->e;

        keelson__webhook__v1__intake_endpoint__init(e);
        e->id = (char *)ks_pg_text(r, i, 0);
        e->provider = (Keelson__Webhook__V1__Provider)ks_pg_int(r, i, 1);
        e->description = (char *)ks_pg_text(r, i, 2);
        e->tolerance_s = (int32_t)ks_pg_int(r, i, 3);
        e->enabled = ks_pg_bool(r, i, 4);
        e->created_at_unix_ms = ks_pg_int(r, i, 5);
        e->updated_at_unix_ms = ks_pg_int(r, i, 6);
        path_of(e->provider, e->id, v->path, sizeof(v->path));
        e->path = v->path;
}

#define SECRETS_MAX 8 /* active at once: two after a rotation; room for what rotations race */

/* Replies {endpoint} of id, with its active secrets; not_found when the tenant has none such. */
static int reply_endpoint(wh_tx *tx, const char *id)
{
        Keelson__Webhook__V1__IntakeEndpointResponse resp =
            KEELSON__WEBHOOK__V1__INTAKE_ENDPOINT_RESPONSE__INIT;
        Keelson__Webhook__V1__IntakeSecret secrets[SECRETS_MAX], *ps[SECRETS_MAX];
        PGresult *er = NULL, *sr = NULL;
        const char *p[1] = {id};
        const ks_pg_stmt s[2] = {{.sql = sql_get, .n_params = 1, .params = p, .out = &er},
                                 {.sql = sql_secrets, .n_params = 1, .params = p, .out = &sr}};
        endpoint_view v;
        int rc = wh_pipeline(tx, s, 2);

        if (rc != KS_OK) {
                return rc;
        }
        if (PQntuples(er) == 0) {
                rc = ks_call_fail(tx->call, KS_NOT_FOUND, "intake endpoint not found");
        } else {
                endpoint_of(er, 0, &v);
                size_t n =
                    (size_t)PQntuples(sr) < SECRETS_MAX ? (size_t)PQntuples(sr) : SECRETS_MAX;
                for (size_t i = 0; i < n; i++) {
                        keelson__webhook__v1__intake_secret__init(&secrets[i]);
                        secrets[i].id = (char *)ks_pg_text(sr, (int)i, 0);
                        secrets[i].hint = (char *)ks_pg_text(sr, (int)i, 1);
                        secrets[i].created_at_unix_ms = ks_pg_int(sr, (int)i, 2);
                        secrets[i].expires_at_unix_ms = ks_pg_int(sr, (int)i, 3);
                        ps[i] = &secrets[i];
                }
                v.e.secrets = ps;
                v.e.n_secrets = n;
                resp.endpoint = &v.e;
                rc = ks_call_reply(tx->call, &resp.base);
        }
        PQclear(er);
        PQclear(sr);
        return rc;
}

/* ---- checks ------------------------------------------------------------------------------ */

static int tolerance_of(ks_call *call, int32_t in, int32_t *out)
{
        if (in == 0) {
                *out = WH_TOLERANCE_DEFAULT_S;
                return KS_OK;
        }
        if (in < 1 || in > WH_TOLERANCE_MAX_S) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "tolerance_s: 1..%d seconds (0: %d)",
                                    WH_TOLERANCE_MAX_S, WH_TOLERANCE_DEFAULT_S);
        }
        *out = in;
        return KS_OK;
}

static int secret_of(ks_call *call, Keelson__Webhook__V1__Provider p, const char *secret)
{
        char err[KS_MESSAGE_MAX];

        if (wh_secret_check(p, secret, err, sizeof(err)) != 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        return KS_OK;
}

static int endpoint_id_of(ks_call *call, const char *id)
{
        /* Not one of the tenant's, exactly as one of another tenant's. */
        return ks_uuid_valid(id) ? KS_OK
                                 : ks_call_fail(call, KS_NOT_FOUND, "intake endpoint not found");
}

/* ---- CreateIntakeEndpoint ----------------------------------------------------------------- */

typedef struct create_args {
        const Keelson__Webhook__V1__CreateIntakeEndpointRequest *in;
        char description[WH_DESCRIPTION_BYTES];
        int32_t tolerance_s;
} create_args;

static int create_tx(wh_tx *tx, void *arg)
{
        create_args *a = arg;
        ks_pg_num prov = ks_pg_num_of(a->in->provider), tol = ks_pg_num_of(a->tolerance_s);
        const char *p[4] = {prov.s, a->description, tol.s, a->in->secret};
        PGresult *res = NULL;
        char id[WH_UUID_LEN + 1];
        int rc;

        if ((rc = wh_exec(tx, sql_insert, 4, p, &res)) != KS_OK) {
                return rc;
        }
        snprintf(id, sizeof(id), "%s", ks_pg_text(res, 0, 0));
        PQclear(res);
        return reply_endpoint(tx, id);
}

int wh_create_intake_endpoint(ks_call *call)
{
        create_args a = {.in = (const void *)call->in};
        int rc;

        if ((int)a.in->provider != WH_PROVIDER_STRIPE &&
            (int)a.in->provider != WH_PROVIDER_STANDARD) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "provider: PROVIDER_STRIPE or PROVIDER_STANDARD");
        }
        if ((rc = secret_of(call, a.in->provider, a.in->secret)) != KS_OK ||
            (rc = wh_description_of(call, a.in->description, a.description,
                                    sizeof(a.description))) != KS_OK ||
            (rc = tolerance_of(call, a.in->tolerance_s, &a.tolerance_s)) != KS_OK) {
                return rc;
        }
        return wh_tx_run(call, create_tx, &a);
}

/* ---- GetIntakeEndpoint ---------------------------------------------------------------------- */

static int get_tx(wh_tx *tx, void *arg)
{
        return reply_endpoint(tx, arg);
}

int wh_get_intake_endpoint(ks_call *call)
{
        const Keelson__Webhook__V1__GetIntakeEndpointRequest *in = (const void *)call->in;
        int rc = endpoint_id_of(call, in->id);

        return rc != KS_OK ? rc : wh_tx_run_reads(call, get_tx, in->id);
}

/* ---- ListIntakeEndpoints ------------------------------------------------------------------------
 */

/* Items keep pointers into the page's result; secrets are not listed (GetIntakeEndpoint has them).
 */
static void list_item(void *item, const PGresult *r, int i)
{
        Keelson__Webhook__V1__IntakeEndpoint *e = item;

        keelson__webhook__v1__intake_endpoint__init(e);
        e->id = (char *)ks_pg_text(r, i, 0);
        e->provider = (Keelson__Webhook__V1__Provider)ks_pg_int(r, i, 1);
        e->description = (char *)ks_pg_text(r, i, 2);
        e->tolerance_s = (int32_t)ks_pg_int(r, i, 3);
        e->enabled = ks_pg_bool(r, i, 4);
        e->created_at_unix_ms = ks_pg_int(r, i, 5);
        e->updated_at_unix_ms = ks_pg_int(r, i, 6);
        e->path = (char *)ks_pg_text(r, i, 7);
}

static const ks_list_method list_all = {
    .page = KS_LIST_PAGE("keelson.webhook.v1.WebhookService/ListIntakeEndpoints",
                         Keelson__Webhook__V1__IntakeEndpoint, list_item, KS_LIST_DESC_INT64(5),
                         KS_LIST_DESC_UUID(0)),
    .sql = "SELECT " ENDPOINT_COLUMNS ", '/webhooks/' || CASE provider WHEN 1 THEN 'stripe'"
           " ELSE 'standard' END || '/' || id FROM webhook.intake_endpoints"
           " WHERE tenant_id = webhook.ctx_tenant()" KS_LIST_BEFORE(
               "created_ms", "id") " ORDER BY created_ms DESC, id DESC LIMIT $3::int4",
    .items_field = "endpoints",
};

int wh_list_intake_endpoints(ks_call *call)
{
        const Keelson__Webhook__V1__ListIntakeEndpointsRequest *in = (const void *)call->in;

        return ks_list_reply(call, &list_all, in->page_size, in->page_token, NULL, 0,
                             &wh_list_runner);
}

/* ---- UpdateIntakeEndpoint -------------------------------------------------------------------- */

enum { MASK_DESCRIPTION = 1u << 0, MASK_TOLERANCE = 1u << 1, MASK_ENABLED = 1u << 2 };
static const char *const update_fields[] = {"description", "tolerance_s", "enabled", NULL};

static const char sql_update[] =
    "UPDATE webhook.intake_endpoints SET"
    " description = CASE WHEN $2::bool THEN $3 ELSE description END,"
    " tolerance_s = CASE WHEN $4::bool THEN $5::int4 ELSE tolerance_s END,"
    " enabled = CASE WHEN $6::bool THEN $7::bool ELSE enabled END, updated_ms = webhook.now_ms()"
    " WHERE tenant_id = webhook.ctx_tenant() AND id = $1::uuid RETURNING id";

typedef struct update_args {
        const Keelson__Webhook__V1__UpdateIntakeEndpointRequest *in;
        unsigned mask;
        char description[WH_DESCRIPTION_BYTES];
        int32_t tolerance_s;
} update_args;

static int update_tx(wh_tx *tx, void *arg)
{
        update_args *a = arg;
        ks_pg_num tol = ks_pg_num_of(a->tolerance_s);
        const char *p[7] = {a->in->id,
                            (a->mask & MASK_DESCRIPTION) ? "t" : "f",
                            a->description,
                            (a->mask & MASK_TOLERANCE) ? "t" : "f",
                            tol.s,
                            (a->mask & MASK_ENABLED) ? "t" : "f",
                            a->in->enabled ? "t" : "f"};
        PGresult *res = NULL;
        int rc;

        if ((rc = wh_exec(tx, sql_update, 7, p, &res)) != KS_OK) {
                return rc;
        }
        int n = PQntuples(res);
        PQclear(res);
        if (n == 0) {
                return ks_call_fail(tx->call, KS_NOT_FOUND, "intake endpoint not found");
        }
        return reply_endpoint(tx, a->in->id);
}

int wh_update_intake_endpoint(ks_call *call)
{
        update_args a = {.in = (const void *)call->in, .tolerance_s = WH_TOLERANCE_DEFAULT_S};
        char err[KS_MESSAGE_MAX];
        int rc;

        if ((rc = endpoint_id_of(call, a.in->id)) != KS_OK) {
                return rc;
        }
        if (!ks_mask_parse_some(a.in->update_mask, a.in->n_update_mask, update_fields, &a.mask, err,
                                sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if ((a.mask & MASK_DESCRIPTION) != 0 &&
            (rc = wh_description_of(call, a.in->description, a.description,
                                    sizeof(a.description))) != KS_OK) {
                return rc;
        }
        if ((a.mask & MASK_TOLERANCE) != 0 &&
            (rc = tolerance_of(call, a.in->tolerance_s, &a.tolerance_s)) != KS_OK) {
                return rc;
        }
        return wh_tx_run(call, update_tx, &a);
}

/* ---- RotateIntakeSecret ------------------------------------------------------------------------
 */

typedef struct rotate_args {
        const Keelson__Webhook__V1__RotateIntakeSecretRequest *in;
        int64_t previous_s;
} rotate_args;

static int rotate_tx(wh_tx *tx, void *arg)
{
        rotate_args *a = arg;
        PGresult *res = NULL;
        const char *id[1] = {a->in->id};
        int rc;

        /* The endpoint's row serialises rotations: two at once cannot leave three secrets. */
        if ((rc = wh_exec(tx, sql_lock, 1, id, &res)) != KS_OK) {
                return rc;
        }
        bool found = PQntuples(res) == 1;
        int64_t provider = found ? ks_pg_int(res, 0, 0) : 0;
        PQclear(res);
        if (!found) {
                return ks_call_fail(tx->call, KS_NOT_FOUND, "intake endpoint not found");
        }
        if ((rc = secret_of(tx->call, (Keelson__Webhook__V1__Provider)provider, a->in->secret)) !=
            KS_OK) {
                return rc;
        }
        ks_pg_num prev = ks_pg_num_of(a->previous_s);
        const char *pr[2] = {a->in->id, prev.s}, *pa[2] = {a->in->id, a->in->secret};
        const ks_pg_stmt s[3] = {{.sql = sql_retire, .n_params = 2, .params = pr},
                                 {.sql = sql_add_secret, .n_params = 2, .params = pa},
                                 {.sql = sql_touch, .n_params = 1, .params = id}};
        if ((rc = ks_pg_pipeline(tx->conn, tx->call->request_id, s, 3)) != KS_OK) {
                return wh_db_fail(tx->call, rc);
        }
        return reply_endpoint(tx, a->in->id);
}

int wh_rotate_intake_secret(ks_call *call)
{
        rotate_args a = {.in = (const void *)call->in};
        int rc;

        if ((rc = endpoint_id_of(call, a.in->id)) != KS_OK) {
                return rc;
        }
        if ((rc = wh_rotate_window(call, a.in->previous_expires_in_s, &a.previous_s)) != KS_OK) {
                return rc;
        }
        return wh_tx_run(call, rotate_tx, &a);
}
