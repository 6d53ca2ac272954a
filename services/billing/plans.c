/*
 * Plans: CreatePlan, GetPlan, UpdatePlan, ListPlans, ArchivePlan.
 *
 * A plan is a code with versions. A version's price, currency and interval
 * never change: a subscription points at a version, so what it was sold
 * stays what it is billed. UpdatePlan with a new price makes the next
 * version (the latest); the name and trial days change the latest version
 * in place. Archiving a code archives every version: no new subscription
 * on it, existing ones go on.
 */
#include "billing.h"
#include "ks_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_SELECT                                                                                \
        "SELECT id, code, version, name, currency, interval_unit, interval_count, trial_days,"     \
        " price_model, price_amount, tiers, archived, created_ms FROM billing.plans"
#define PLAN_RETURNING                                                                             \
        " RETURNING id, code, version, name, currency, interval_unit, interval_count,"             \
        " trial_days, price_model, price_amount, tiers, archived, created_ms"

typedef struct plan_msg {
        Keelson__Billing__V1__Plan m;
        Keelson__Billing__V1__Price price;
        Keelson__Billing__V1__Tier tiers[BL_TIERS_MAX];
        Keelson__Billing__V1__Tier *tier_ptrs[BL_TIERS_MAX];
} plan_msg;

/* The message of a plan; strings point into p. */
static void plan_message(const bl_plan *p, plan_msg *out)
{
        keelson__billing__v1__plan__init(&out->m);
        keelson__billing__v1__price__init(&out->price);
        out->m.id = (char *)p->id;
        out->m.code = (char *)p->code;
        out->m.version = p->version;
        out->m.name = (char *)p->name;
        out->m.currency = (char *)p->currency->code;
        out->m.interval_unit = (Keelson__Billing__V1__IntervalUnit)p->interval.unit;
        out->m.interval_count = p->interval.count;
        out->m.trial_days = p->trial_days;
        out->m.archived = p->archived;
        out->m.created_at_unix_ms = p->created_ms;
        out->price.model = (Keelson__Billing__V1__PriceModel)p->price.model;
        out->price.amount = p->price.amount;
        for (size_t i = 0; i < p->price.n_tiers; i++) {
                keelson__billing__v1__tier__init(&out->tiers[i]);
                out->tiers[i].up_to = p->price.tiers[i].up_to;
                out->tiers[i].unit_amount = p->price.tiers[i].unit_amount;
                out->tiers[i].flat_amount = p->price.tiers[i].flat_amount;
                out->tier_ptrs[i] = &out->tiers[i];
        }
        out->price.n_tiers = p->price.n_tiers;
        out->price.tiers = out->tier_ptrs;
        out->m.price = &out->price;
}

static int reply_plan(bl_tx *tx, const bl_plan *p)
{
        Keelson__Billing__V1__PlanResponse resp = KEELSON__BILLING__V1__PLAN_RESPONSE__INIT;
        plan_msg pm;

        plan_message(p, &pm);
        resp.plan = &pm.m;
        return ks_call_reply(tx->call, &resp.base);
}

/* The first row of res as a plan, replied. */
static int reply_row(bl_tx *tx, const PGresult *res)
{
        bl_plan p;

        if (PQntuples(res) != 1 || bl_plan_read(res, 0, &p) != KS_OK) {
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        return reply_plan(tx, &p);
}

/* A request's price into p; false with the client's message. */
static bool price_of(const Keelson__Billing__V1__Price *in, bl_price *p, char *err, size_t len)
{
        memset(p, 0, sizeof(*p));
        if (in == NULL) {
                snprintf(err, len, "price: required");
                return false;
        }
        if (in->n_tiers > BL_TIERS_MAX) {
                snprintf(err, len, "price.tiers: at most %d", BL_TIERS_MAX);
                return false;
        }
        p->model = (bl_price_model)in->model;
        p->amount = in->amount;
        for (size_t i = 0; i < in->n_tiers; i++) {
                p->tiers[i] = (bl_tier){.up_to = in->tiers[i]->up_to,
                                        .unit_amount = in->tiers[i]->unit_amount,
                                        .flat_amount = in->tiers[i]->flat_amount};
        }
        p->n_tiers = in->n_tiers;
        return bl_price_valid(p, err, len);
}

static bool trial_valid(int32_t days, char *err, size_t len)
{
        if (days < 0 || days > BL_TRIAL_DAYS_MAX) {
                snprintf(err, len, "trial_days: 0 to %d", BL_TRIAL_DAYS_MAX);
                return false;
        }
        return true;
}

/* ---- CreatePlan ------------------------------------------------------------------ */

static const char sql_insert[] =
    "INSERT INTO billing.plans (tenant_id, code, version, latest, name, currency, interval_unit,"
    " interval_count, trial_days, price_model, price_amount, tiers)"
    " VALUES (billing.ctx_tenant(), $1, $2::int4, true, $3, $4, $5::int2, $6::int4, $7::int4,"
    " $8::int2, $9::int8, $10::jsonb) ON CONFLICT DO NOTHING" PLAN_RETURNING;

typedef struct create_args {
        bl_plan p;
        char *tiers;
} create_args;

/* Inserts p as version p->version, the latest; *res has its row, or none when the code is taken. */
static int insert_version(bl_tx *tx, const bl_plan *p, const char *tiers, PGresult **res)
{
        ks_pg_num ver = ks_pg_num_of(p->version), unit = ks_pg_num_of(p->interval.unit),
                  count = ks_pg_num_of(p->interval.count), trial = ks_pg_num_of(p->trial_days),
                  model = ks_pg_num_of(p->price.model), amount = ks_pg_num_of(p->price.amount);
        const char *params[10] = {p->code, ver.s,   p->name, p->currency->code, unit.s,
                                  count.s, trial.s, model.s, amount.s,          tiers};

        return bl_exec(tx, sql_insert, 10, params, res);
}

static int create_tx(bl_tx *tx, void *arg)
{
        create_args *a = arg;
        PGresult *res = NULL;
        int rc;

        if ((rc = insert_version(tx, &a->p, a->tiers, &res)) != KS_OK) {
                return rc;
        }
        rc = PQntuples(res) == 1 ? reply_row(tx, res)
                                 : bl_fail(tx, KS_ALREADY_EXISTS, "a plan with this code exists");
        PQclear(res);
        return rc;
}

int bl_create_plan(ks_call *call)
{
        const Keelson__Billing__V1__CreatePlanRequest *in = (const void *)call->in;
        create_args a;
        char err[BL_ERR_MAX];
        int rc;

        memset(&a, 0, sizeof(a));
        a.p.version = 1;
        a.p.interval = (bl_interval){.unit = (bl_unit)in->interval_unit,
                                     .count = in->interval_count == 0 ? 1 : in->interval_count};
        a.p.trial_days = in->trial_days;
        if (!bl_plan_code_valid(in->code, err, sizeof(err)) ||
            !bl_name_valid("name", in->name, BL_NAME_CHARS_MAX, a.p.name, sizeof(a.p.name), err,
                           sizeof(err)) ||
            !trial_valid(in->trial_days, err, sizeof(err)) ||
            !price_of(in->price, &a.p.price, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if ((a.p.currency = bl_currency_find(in->currency)) == NULL) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "currency: an ISO 4217 code in upper case (\"USD\")");
        }
        if (!bl_interval_valid(a.p.interval)) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "interval: a unit (day, week, month, year) and a count of at"
                                    " most three years");
        }
        snprintf(a.p.code, sizeof(a.p.code), "%s", in->code);
        if ((a.tiers = bl_tiers_json(a.p.price.tiers, a.p.price.n_tiers)) == NULL) {
                return ks_call_oom(call);
        }
        rc = bl_tx_run(call, create_tx, &a);
        free(a.tiers);
        return rc;
}

/* ---- GetPlan ------------------------------------------------------------------------ */

static const char sql_by_version[] =
    PLAN_SELECT " WHERE tenant_id = billing.ctx_tenant() AND code = $1 AND version = $2::int4";

static int get_tx(bl_tx *tx, void *arg)
{
        const Keelson__Billing__V1__GetPlanRequest *in = arg;
        bl_plan p;
        int rc;

        if (in->id[0] != '\0') {
                rc = bl_plan_load(tx, in->id, &p);
        } else if (in->version > 0) {
                ks_pg_num v = ks_pg_num_of(in->version);
                const char *params[2] = {in->code, v.s};
                PGresult *res = NULL;
                if ((rc = bl_exec(tx, sql_by_version, 2, params, &res)) != KS_OK) {
                        return rc;
                }
                rc = PQntuples(res) != 1
                         ? KS_NOT_FOUND
                         : (bl_plan_read(res, 0, &p) == KS_OK ? KS_OK : KS_INTERNAL);
                PQclear(res);
        } else {
                rc = bl_plan_load_code(tx, in->code, &p);
        }
        if (rc == KS_NOT_FOUND) {
                return bl_fail(tx, KS_NOT_FOUND, "plan not found");
        }
        if (rc == KS_INTERNAL) {
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        return rc == KS_OK ? reply_plan(tx, &p) : rc;
}

int bl_get_plan(ks_call *call)
{
        const Keelson__Billing__V1__GetPlanRequest *in = (const void *)call->in;
        char err[BL_ERR_MAX];

        if (in->id[0] != '\0' ? !bl_id_valid("id", in->id, err, sizeof(err))
                              : !bl_plan_code_valid(in->code, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s (give id, or code)", err);
        }
        return bl_tx_run_reads(call, get_tx, (void *)in);
}

/* ---- UpdatePlan ----------------------------------------------------------------------- */

enum { M_NAME = 1u << 0, M_TRIAL = 1u << 1, M_PRICE = 1u << 2 };
static const char *const update_fields[] = {"name", "trial_days", "price", NULL};

static const char sql_latest_locked[] =
    PLAN_SELECT " WHERE tenant_id = billing.ctx_tenant() AND code = $1 AND latest FOR UPDATE";
static const char sql_retire[] = "UPDATE billing.plans SET latest = false"
                                 " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";
static const char sql_in_place[] =
    "UPDATE billing.plans SET name = $2, trial_days = $3::int4"
    " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid" PLAN_RETURNING;

typedef struct update_args {
        const Keelson__Billing__V1__UpdatePlanRequest *in;
        unsigned mask;
        char name[BL_NAME_BYTES_MAX + 1];
        bl_price price;
        char *tiers;
} update_args;

static bool same_price(const bl_price *a, const bl_price *b)
{
        return a->model == b->model && a->amount == b->amount && a->n_tiers == b->n_tiers &&
               memcmp(a->tiers, b->tiers, a->n_tiers * sizeof(a->tiers[0])) == 0;
}

/* The latest version of the code, locked; NOT_FOUND and archived fail the call. */
static int latest_locked(bl_tx *tx, const char *code, bl_plan *p)
{
        const char *params[1] = {code};
        PGresult *res = NULL;
        int rc;

        if ((rc = bl_exec(tx, sql_latest_locked, 1, params, &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) != 1) {
                rc = bl_fail(tx, KS_NOT_FOUND, "plan not found");
        } else if (bl_plan_read(res, 0, p) != KS_OK) {
                rc = bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        } else if (p->archived) {
                rc = bl_fail(tx, KS_FAILED_PRECONDITION, "the plan is archived");
        }
        PQclear(res);
        return rc;
}

static int update_tx(bl_tx *tx, void *arg)
{
        update_args *a = arg;
        const char *params[3];
        PGresult *res = NULL;
        bl_plan p;
        int rc;

        if ((rc = latest_locked(tx, a->in->code, &p)) != KS_OK) {
                return rc;
        }
        if ((a->mask & M_NAME) != 0) {
                snprintf(p.name, sizeof(p.name), "%s", a->name);
        }
        if ((a->mask & M_TRIAL) != 0) {
                p.trial_days = a->in->trial_days;
        }
        if ((a->mask & M_PRICE) != 0 && !same_price(&p.price, &a->price)) {
                params[0] = p.id;
                if ((rc = bl_exec(tx, sql_retire, 1, params, NULL)) != KS_OK) {
                        return rc;
                }
                p.price = a->price;
                p.version++;
                rc = insert_version(tx, &p, a->tiers, &res);
        } else {
                ks_pg_num trial = ks_pg_num_of(p.trial_days);
                params[0] = p.id;
                params[1] = p.name;
                params[2] = trial.s;
                rc = bl_exec(tx, sql_in_place, 3, params, &res);
        }
        if (rc == KS_OK) {
                rc = reply_row(tx, res);
        }
        PQclear(res);
        return rc;
}

int bl_update_plan(ks_call *call)
{
        const Keelson__Billing__V1__UpdatePlanRequest *in = (const void *)call->in;
        update_args a = {.in = in};
        char err[BL_ERR_MAX];
        int rc;

        if (!bl_plan_code_valid(in->code, err, sizeof(err)) ||
            !ks_mask_parse(in->update_mask, in->n_update_mask, update_fields, &a.mask, err,
                           sizeof(err)) ||
            ((a.mask & M_NAME) != 0 && !bl_name_valid("name", in->name, BL_NAME_CHARS_MAX, a.name,
                                                      sizeof(a.name), err, sizeof(err))) ||
            ((a.mask & M_TRIAL) != 0 && !trial_valid(in->trial_days, err, sizeof(err))) ||
            ((a.mask & M_PRICE) != 0 && !price_of(in->price, &a.price, err, sizeof(err)))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if ((a.tiers = bl_tiers_json(a.price.tiers, a.price.n_tiers)) == NULL) {
                return ks_call_oom(call);
        }
        rc = bl_tx_run(call, update_tx, &a);
        free(a.tiers);
        return rc;
}

/* ---- ArchivePlan ------------------------------------------------------------------------ */

static const char sql_archive[] = "UPDATE billing.plans SET archived = true"
                                  " WHERE tenant_id = billing.ctx_tenant() AND code = $1";

static int archive_tx(bl_tx *tx, void *arg)
{
        const char *params[1] = {arg};
        bl_plan p;
        int rc;

        if ((rc = bl_exec(tx, sql_archive, 1, params, NULL)) != KS_OK) {
                return rc;
        }
        if ((rc = bl_plan_load_code(tx, arg, &p)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_NOT_FOUND, "plan not found") : rc;
        }
        return reply_plan(tx, &p);
}

int bl_archive_plan(ks_call *call)
{
        const Keelson__Billing__V1__ArchivePlanRequest *in = (const void *)call->in;
        char err[BL_ERR_MAX];

        if (!bl_plan_code_valid(in->code, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        return bl_tx_run(call, archive_tx, in->code);
}

/* ---- ListPlans ---------------------------------------------------------------------------- */

/* One plan message per row, with its price and tiers in the item itself. */
static void list_item(void *item, const PGresult *r, int i)
{
        plan_msg *pm = item;
        bl_plan p;

        if (bl_plan_read(r, i, &p) != KS_OK) {
                memset(&p, 0, sizeof(p));
                p.currency = bl_currency_find("USD");
        }
        plan_message(&p, pm);
        /* The strings must outlive p: point them into the result instead. */
        pm->m.id = (char *)ks_pg_text(r, i, 0);
        pm->m.code = (char *)ks_pg_text(r, i, 1);
        pm->m.name = (char *)ks_pg_text(r, i, 3);
        pm->m.currency = (char *)ks_pg_text(r, i, 4);
}

static const ks_list_method list_plans = {
    .page = {.name = "keelson.billing.v1.BillingService/ListPlans",
             .page_size_default = KS_LIST_PAGE_SIZE_DEFAULT,
             .page_size_max = KS_LIST_PAGE_SIZE_MAX,
             .n_keys = 2,
             .keys = {KS_LIST_DESC_INT64(12), KS_LIST_DESC_UUID(0)},
             .item_size = sizeof(plan_msg),
             .item = list_item},
    .sql = PLAN_SELECT " WHERE tenant_id = billing.ctx_tenant() AND latest" KS_LIST_BEFORE(
        "created_ms", "id") " AND ($4::bool OR NOT archived)"
                            " ORDER BY created_ms DESC, id DESC LIMIT $3::int4",
    .items_field = "plans",
};

int bl_list_plans(ks_call *call)
{
        const Keelson__Billing__V1__ListPlansRequest *in = (const void *)call->in;
        const char *filters[1] = {in->include_archived ? "t" : "f"};

        return ks_list_reply(call, &list_plans, in->page_size, in->page_token, filters, 1,
                             &bl_list_runner);
}
