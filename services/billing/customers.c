/*
 * Customers: CreateCustomer, GetCustomer, UpdateCustomer, ListCustomers,
 * ArchiveCustomer, and the list frame every billing list shares
 * (bl_list_runner).
 *
 * A customer's currency is fixed at creation (every invoice, subscription
 * and ledger account of it is in that currency), and so is its test clock.
 * Archiving stops new subscriptions and invoices; what exists goes on.
 */
#include "billing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_text.h"

/*
 * A customer's columns (customer_fields reads them by position); a NULL
 * test_clock_id reads as "". The metadata comes after them where it is
 * replied (column 12); a page does not list it, so its query does not read it.
 */
#define CUSTOMER_COLUMNS                                                                           \
        "id, email, name, currency, tax_rate_bp, tax_exempt, default_payment_method, archived,"    \
        " created_ms, updated_ms, credit_balance, test_clock_id"
#define CUSTOMER_METADATA_COLUMN 12
#define CUSTOMER_SELECT          "SELECT " CUSTOMER_COLUMNS ", metadata FROM billing.customers"
#define CUSTOMER_PAGE_SELECT     "SELECT " CUSTOMER_COLUMNS " FROM billing.customers"

static const char sql_insert[] =
    "INSERT INTO billing.customers (tenant_id, email, name, currency, tax_rate_bp, tax_exempt,"
    " metadata, default_payment_method, test_clock_id, created_ms, updated_ms)"
    " VALUES (billing.ctx_tenant(), $1, $2, $3, $4::int4, $5::bool, $6::jsonb, $7,"
    " NULLIF($8, '')::uuid, $9::int8, $9::int8)"
    " RETURNING " CUSTOMER_COLUMNS ", metadata";

static const char sql_get[] =
    CUSTOMER_SELECT " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";

static const char sql_clock_exists[] = "SELECT 1 FROM billing.test_clocks"
                                       " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid";

/* The customer of a customers row (CUSTOMER_SELECT's columns) into m, but its metadata. */
static void customer_fields(const PGresult *r, int i, Keelson__Billing__V1__Customer *m)
{
        keelson__billing__v1__customer__init(m);
        m->id = (char *)ks_pg_text(r, i, 0);
        m->email = (char *)ks_pg_text(r, i, 1);
        m->name = (char *)ks_pg_text(r, i, 2);
        m->currency = (char *)ks_pg_text(r, i, 3);
        m->tax_rate_bp = (int32_t)ks_pg_int(r, i, 4);
        m->tax_exempt = ks_pg_bool(r, i, 5);
        m->default_payment_method = (char *)ks_pg_text(r, i, 6);
        m->archived = ks_pg_bool(r, i, 7);
        m->created_at_unix_ms = ks_pg_int(r, i, 8);
        m->updated_at_unix_ms = ks_pg_int(r, i, 9);
        m->credit_balance = ks_pg_int(r, i, 10);
        m->test_clock_id = (char *)ks_pg_text(r, i, 11);
}

/* The same with its metadata (allocated: bl_metadata_free). */
static int customer_of(const PGresult *r, int i, Keelson__Billing__V1__Customer *m)
{
        customer_fields(r, i, m);
        return bl_metadata_from_json(ks_pg_text(r, i, CUSTOMER_METADATA_COLUMN), &m->metadata,
                                     &m->n_metadata);
}

/* Replies {customer} from the first row of res. */
static int reply_customer(bl_tx *tx, const PGresult *res)
{
        Keelson__Billing__V1__CustomerResponse resp = KEELSON__BILLING__V1__CUSTOMER_RESPONSE__INIT;
        Keelson__Billing__V1__Customer c;
        int rc;

        if (customer_of(res, 0, &c) != 0) {
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        resp.customer = &c;
        rc = ks_call_reply(tx->call, &resp.base);
        bl_metadata_free(c.metadata, c.n_metadata);
        return rc;
}

static int not_found(bl_tx *tx)
{
        return bl_fail(tx, KS_NOT_FOUND, "customer not found");
}

/* ---- CreateCustomer ---------------------------------------------------------- */

typedef struct create_args {
        char email[BL_EMAIL_BYTES_MAX + 1];
        char name[BL_NAME_BYTES_MAX + 1];
        const Keelson__Billing__V1__CreateCustomerRequest *in;
        char *metadata;
} create_args;

static int create_tx(bl_tx *tx, void *arg)
{
        create_args *a = arg;
        const Keelson__Billing__V1__CreateCustomerRequest *in = a->in;
        ks_pg_num rate = ks_pg_num_of(in->tax_rate_bp);
        const char *clock = in->test_clock_id;
        PGresult *res = NULL;
        int64_t now;
        int rc;

        if (clock[0] != '\0') {
                const char *cp[1] = {clock};
                if ((rc = bl_exec(tx, sql_clock_exists, 1, cp, &res)) != KS_OK) {
                        return rc;
                }
                rc =
                    PQntuples(res) == 1 ? KS_OK : bl_fail(tx, KS_NOT_FOUND, "test clock not found");
                PQclear(res);
                if (rc != KS_OK) {
                        return rc;
                }
        }
        if ((rc = bl_now_for(tx, clock, &now)) != KS_OK) {
                return rc;
        }
        ks_pg_num created = ks_pg_num_of(now);
        const char *p[9] = {a->email,
                            a->name,
                            in->currency,
                            rate.s,
                            in->tax_exempt ? "t" : "f",
                            a->metadata,
                            in->default_payment_method,
                            clock,
                            created.s};
        if ((rc = bl_exec(tx, sql_insert, 9, p, &res)) != KS_OK) {
                return rc;
        }
        rc = reply_customer(tx, res);
        PQclear(res);
        return rc == KS_OK ? bl_event_summary(tx, "CreateCustomer") : rc;
}

/* The request's metadata as key/value pairs (n entries of kv). */
static void kv_of(Keelson__Billing__V1__CreateCustomerRequest__MetadataEntry **e, size_t n,
                  bl_kv *kv)
{
        for (size_t i = 0; i < n; i++) {
                kv[i] = (bl_kv){e[i]->key, e[i]->value};
        }
}

int bl_create_customer(ks_call *call)
{
        const Keelson__Billing__V1__CreateCustomerRequest *in = (const void *)call->in;
        bl_kv kv[BL_METADATA_KEYS_MAX];
        create_args a = {.in = in};
        char err[BL_ERR_MAX];
        int rc;

        if (!bl_email_valid(in->email, a.email, sizeof(a.email), err, sizeof(err)) ||
            !bl_name_valid("name", in->name, BL_NAME_CHARS_MAX, a.name, sizeof(a.name), err,
                           sizeof(err)) ||
            !bl_tax_valid(in->tax_rate_bp, err, sizeof(err)) ||
            !bl_payment_method_valid("default_payment_method", in->default_payment_method, err,
                                     sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if (bl_currency_find(in->currency) == NULL) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "currency: an ISO 4217 code in upper case (\"USD\")");
        }
        if (in->test_clock_id[0] != '\0' &&
            !bl_id_valid("test_clock_id", in->test_clock_id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if (in->n_metadata > BL_METADATA_KEYS_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "metadata: at most %d keys",
                                    BL_METADATA_KEYS_MAX);
        }
        kv_of(in->metadata, in->n_metadata, kv);
        if (!bl_metadata_valid(kv, in->n_metadata, false, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if ((a.metadata = bl_metadata_json(kv, in->n_metadata)) == NULL) {
                return ks_call_oom(call);
        }
        rc = bl_tx_run(call, create_tx, &a);
        free(a.metadata);
        return rc;
}

/* ---- GetCustomer, ArchiveCustomer ---------------------------------------------------- */

static int get_tx(bl_tx *tx, void *arg)
{
        const char *params[1] = {arg};
        PGresult *res = NULL;
        int rc;

        if ((rc = bl_exec(tx, sql_get, 1, params, &res)) != KS_OK) {
                return rc;
        }
        rc = PQntuples(res) == 1 ? reply_customer(tx, res) : not_found(tx);
        PQclear(res);
        return rc;
}

int bl_get_customer(ks_call *call)
{
        const Keelson__Billing__V1__GetCustomerRequest *in = (const void *)call->in;
        char err[BL_ERR_MAX];

        if (!bl_id_valid("id", in->id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        return bl_tx_run_reads(call, get_tx, in->id);
}

static const char sql_archive[] =
    "UPDATE billing.customers SET archived = true, updated_ms = CASE WHEN archived THEN"
    " updated_ms ELSE $2::int8 END WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid"
    " RETURNING " CUSTOMER_COLUMNS ", metadata";

static int archive_tx(bl_tx *tx, void *arg)
{
        bl_customer cust;
        PGresult *res = NULL;
        int64_t now;
        int rc;

        if ((rc = bl_customer_load(tx, arg, true, &cust)) != KS_OK) {
                return rc == KS_NOT_FOUND ? not_found(tx) : rc;
        }
        if ((rc = bl_now_for(tx, cust.test_clock_id, &now)) != KS_OK) {
                return rc;
        }
        ks_pg_num t = ks_pg_num_of(now);
        const char *params[2] = {arg, t.s};
        if ((rc = bl_exec(tx, sql_archive, 2, params, &res)) != KS_OK) {
                return rc;
        }
        rc = reply_customer(tx, res);
        PQclear(res);
        return rc;
}

int bl_archive_customer(ks_call *call)
{
        const Keelson__Billing__V1__ArchiveCustomerRequest *in = (const void *)call->in;
        char err[BL_ERR_MAX];

        if (!bl_id_valid("id", in->id, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        return bl_tx_run(call, archive_tx, in->id);
}

/* ---- UpdateCustomer ------------------------------------------------------------------- */

enum {
        M_EMAIL = 1u << 0,
        M_NAME = 1u << 1,
        M_TAX_RATE = 1u << 2,
        M_TAX_EXEMPT = 1u << 3,
        M_PM = 1u << 4
};
static const char *const update_fields[] = {
    "email", "name", "tax_rate_bp", "tax_exempt", "default_payment_method", NULL};

/* $3.. take the new value when the mask names it ($2 holds the mask bits). */
static const char sql_update[] =
    "UPDATE billing.customers SET"
    " email = CASE WHEN $2::int4 & 1 <> 0 THEN $3 ELSE email END,"
    " name = CASE WHEN $2::int4 & 2 <> 0 THEN $4 ELSE name END,"
    " tax_rate_bp = CASE WHEN $2::int4 & 4 <> 0 THEN $5::int4 ELSE tax_rate_bp END,"
    " tax_exempt = CASE WHEN $2::int4 & 8 <> 0 THEN $6::bool ELSE tax_exempt END,"
    " default_payment_method = CASE WHEN $2::int4 & 16 <> 0 THEN $7 ELSE"
    " default_payment_method END,"
    " metadata = (metadata - $8::text[]) || $9::jsonb, updated_ms = $10::int8"
    " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid"
    " AND (SELECT count(*) FROM jsonb_object_keys((metadata - $8::text[]) || $9::jsonb)) <= "
    "$11::int4"
    " RETURNING " CUSTOMER_COLUMNS ", metadata";

typedef struct update_args {
        const Keelson__Billing__V1__UpdateCustomerRequest *in;
        unsigned mask;
        char email[BL_EMAIL_BYTES_MAX + 1];
        char name[BL_NAME_BYTES_MAX + 1];
        char *set, *deleted;
} update_args;

static int update_tx(bl_tx *tx, void *arg)
{
        update_args *a = arg;
        bl_customer cust;
        PGresult *res = NULL;
        int64_t now;
        int rc;

        if ((rc = bl_customer_load(tx, a->in->id, true, &cust)) != KS_OK) {
                return rc == KS_NOT_FOUND ? not_found(tx) : rc;
        }
        if ((rc = bl_now_for(tx, cust.test_clock_id, &now)) != KS_OK) {
                return rc;
        }
        ks_pg_num mask = ks_pg_num_of(a->mask), rate = ks_pg_num_of(a->in->tax_rate_bp),
                  t = ks_pg_num_of(now), keys = ks_pg_num_of(BL_METADATA_KEYS_MAX);
        const char *p[11] = {a->in->id,
                             mask.s,
                             a->email,
                             a->name,
                             rate.s,
                             a->in->tax_exempt ? "t" : "f",
                             a->in->default_payment_method,
                             a->deleted,
                             a->set,
                             t.s,
                             keys.s};
        if ((rc = bl_exec(tx, sql_update, 11, p, &res)) != KS_OK) {
                return rc;
        }
        /* The customer is there (locked above): no row means the merge passed the bound. */
        rc = PQntuples(res) == 1
                 ? reply_customer(tx, res)
                 : bl_fail(tx, KS_INVALID_ARGUMENT, "metadata: at most %d keys once merged",
                           BL_METADATA_KEYS_MAX);
        PQclear(res);
        return rc;
}

static bool update_valid(update_args *a, char *err, size_t err_len)
{
        const Keelson__Billing__V1__UpdateCustomerRequest *in = a->in;

        if (!bl_id_valid("id", in->id, err, err_len) ||
            !ks_mask_parse(in->update_mask, in->n_update_mask, update_fields, &a->mask, err,
                           err_len)) {
                return false;
        }
        if ((a->mask & M_EMAIL) != 0 &&
            !bl_email_valid(in->email, a->email, sizeof(a->email), err, err_len)) {
                return false;
        }
        if ((a->mask & M_NAME) != 0 && !bl_name_valid("name", in->name, BL_NAME_CHARS_MAX, a->name,
                                                      sizeof(a->name), err, err_len)) {
                return false;
        }
        return ((a->mask & M_TAX_RATE) == 0 || bl_tax_valid(in->tax_rate_bp, err, err_len)) &&
               ((a->mask & M_PM) == 0 ||
                bl_payment_method_valid("default_payment_method", in->default_payment_method, err,
                                        err_len));
}

int bl_update_customer(ks_call *call)
{
        const Keelson__Billing__V1__UpdateCustomerRequest *in = (const void *)call->in;
        update_args a = {.in = in};
        bl_kv kv[BL_METADATA_KEYS_MAX];
        char err[BL_ERR_MAX];
        int rc;

        if (!update_valid(&a, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if (in->n_metadata > BL_METADATA_KEYS_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "metadata: at most %d keys",
                                    BL_METADATA_KEYS_MAX);
        }
        kv_of((Keelson__Billing__V1__CreateCustomerRequest__MetadataEntry **)in->metadata,
              in->n_metadata, kv);
        if (!bl_metadata_valid(kv, in->n_metadata, true, err, sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        a.set = bl_metadata_json(kv, in->n_metadata);
        a.deleted = bl_metadata_deleted(kv, in->n_metadata);
        rc =
            a.set != NULL && a.deleted != NULL ? bl_tx_run(call, update_tx, &a) : ks_call_oom(call);
        free(a.set);
        free(a.deleted);
        return rc;
}

/* ---- ListCustomers, and the frame of every billing list --------------------------------- */

/* A page is one read (bl_tx_run_reads): the tenant and the page query in one round trip. */
static int list_page(bl_tx *tx, void *query)
{
        return bl_pipeline(tx, query, 1);
}

static int list_run(ks_call *call, const ks_pg_stmt *query, void *run_arg)
{
        (void)run_arg;
        return bl_tx_run_reads(call, list_page, (void *)query);
}

const ks_list_runner bl_list_runner = {.run = list_run, .internal_msg = BL_INTERNAL_MSG};

/* Items keep pointers into the page's result; metadata is not listed (GetCustomer has it). */
static void list_item(void *item, const PGresult *r, int i)
{
        customer_fields(r, i, item);
}

#define LIST_PAGE                                                                                  \
        KS_LIST_PAGE("keelson.billing.v1.BillingService/ListCustomers",                            \
                     Keelson__Billing__V1__Customer, list_item, KS_LIST_DESC_INT64(8),             \
                     KS_LIST_DESC_UUID(0))
#define LIST_AFTER KS_LIST_BEFORE("created_ms", "id")

static const ks_list_method list_all = {
    .page = LIST_PAGE,
    .sql = CUSTOMER_PAGE_SELECT " WHERE tenant_id = billing.ctx_tenant()" LIST_AFTER
                                " AND ($4::bool OR NOT archived)"
                                " ORDER BY created_ms DESC, id DESC LIMIT $3::int4",
    .items_field = "customers",
};

/* By address: its own statement, so that its plan is the index on lower(email). */
static const ks_list_method list_by_email = {
    .page = LIST_PAGE,
    .sql = CUSTOMER_PAGE_SELECT
    " WHERE tenant_id = billing.ctx_tenant() AND lower(email) = lower($5)" LIST_AFTER
    " AND ($4::bool OR NOT archived)"
    " ORDER BY created_ms DESC, id DESC LIMIT $3::int4",
    .items_field = "customers",
};

int bl_list_customers(ks_call *call)
{
        const Keelson__Billing__V1__ListCustomersRequest *in = (const void *)call->in;
        char email[BL_EMAIL_BYTES_MAX + 1];
        size_t start, len;

        ks_trim_bounds(in->email, &start, &len);
        if (len > BL_EMAIL_BYTES_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "email: at most %d bytes",
                                    BL_EMAIL_BYTES_MAX);
        }
        memcpy(email, in->email + start, len);
        email[len] = '\0';
        const char *filters[2] = {in->include_archived ? "t" : "f", email};
        return ks_list_reply(call, len > 0 ? &list_by_email : &list_all, in->page_size,
                             in->page_token, filters, len > 0 ? 2 : 1, &bl_list_runner);
}
