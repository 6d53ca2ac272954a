/*
 * BillingService's customers and plans through the gateway, and what every
 * method owes a caller: clear errors for bad input (and nothing written),
 * billing.read and billing.manage from auth's permission table (admins
 * read, owners manage, API keys as their role), and another tenant's ids
 * answered not_found on every method that takes one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "billing_it.h"

static long rows_of(const char *table, const char *tenant_id)
{
        char sql[160];
        const char *p[1] = {tenant_id};

        snprintf(sql, sizeof(sql), "SELECT count(*) FROM billing.%s WHERE tenant_id = $1::uuid",
                 table);
        return ait_sql_long(sql, 1, p);
}

static void test_customers(void **state)
{
        (void)state;
        bit_tenant t;
        char id[BIT_ID_MAX];

        bit_tenant_new("bl-cust", &t);
        json_t *j =
            bit_ok(t.owner.token, "CreateCustomer",
                   "{\"email\":\"  Ada@Example.COM \",\"name\":\"Ada\",\"currency\":\"BHD\","
                   "\"taxRateBp\":725,\"metadata\":{\"crm\":\"42\",\"tier\":\"gold\"}}");
        snprintf(id, sizeof(id), "%s", bit_str(j, "customer.id"));
        assert_string_equal(bit_str(j, "customer.email"), "Ada@Example.COM");
        assert_string_equal(bit_str(j, "customer.currency"), "BHD");
        assert_string_equal(bit_str(j, "customer.metadata.tier"), "gold");
        json_decref(j);

        /* Update by mask: the named fields, metadata merged, "" removes a key. */
        j = bit_ok(t.owner.token, "UpdateCustomer",
                   "{\"id\":\"%s\",\"updateMask\":[\"name\",\"tax_exempt\"],\"name\":\"Ada L.\","
                   "\"taxExempt\":true,\"email\":\"ignored@example.com\","
                   "\"metadata\":{\"tier\":\"\",\"region\":\"eu\"}}",
                   id);
        assert_string_equal(bit_str(j, "customer.name"), "Ada L.");
        assert_true(bit_bool(j, "customer.taxExempt"));
        assert_string_equal(bit_str(j, "customer.email"), "Ada@Example.COM");
        assert_null(bit_at(j, "customer.metadata.tier"));
        assert_string_equal(bit_str(j, "customer.metadata.region"), "eu");
        assert_string_equal(bit_str(j, "customer.metadata.crm"), "42");
        json_decref(j);
        bit_fails_with(t.owner.token, "UpdateCustomer", "invalid_argument",
                       "update_mask: unknown field \"currency\"",
                       "{\"id\":\"%s\",\"updateMask\":[\"currency\"]}", id);

        /* Paged newest first, filtered by address whatever its case; archived ones on request. */
        for (int i = 0; i < 3; i++) {
                /* Newest is by created_ms (ties by id): a millisecond apart, or two creations
                 * of one millisecond come in the order of their random ids. */
                usleep(2000);
                json_decref(bit_ok(t.owner.token, "CreateCustomer",
                                   "{\"email\":\"c%d@example.com\",\"currency\":\"USD\"}", i));
        }
        j = bit_ok(t.owner.token, "ListCustomers", "{\"pageSize\":2}");
        assert_int_equal(json_array_size(bit_at(j, "customers")), 2);
        assert_string_equal(bit_str(json_array_get(bit_at(j, "customers"), 0), "email"),
                            "c2@example.com");
        char token[256];
        snprintf(token, sizeof(token), "%s", bit_str(j, "nextPageToken"));
        json_decref(j);
        j = bit_ok(t.owner.token, "ListCustomers", "{\"pageSize\":2,\"pageToken\":\"%s\"}", token);
        assert_int_equal(json_array_size(bit_at(j, "customers")), 2);
        assert_string_equal(bit_str(j, "nextPageToken"), "");
        json_decref(j);
        j = bit_ok(t.owner.token, "ListCustomers", "{\"email\":\"ADA@example.com\"}");
        assert_int_equal(json_array_size(bit_at(j, "customers")), 1);
        json_decref(j);
        json_decref(bit_ok(t.owner.token, "ArchiveCustomer", "{\"id\":\"%s\"}", id));
        j = bit_ok(t.owner.token, "ListCustomers", "{}");
        assert_int_equal(json_array_size(bit_at(j, "customers")), 3);
        json_decref(j);
        j = bit_ok(t.owner.token, "ListCustomers", "{\"includeArchived\":true}");
        assert_int_equal(json_array_size(bit_at(j, "customers")), 4);
        json_decref(j);

        /* Bad input: a clear invalid_argument, with docs/api.md's message, and no row. */
        long before = rows_of("customers", t.owner.tenant_id);
        static const char *const bad[][2] = {
            {"{\"email\":\"nope\",\"currency\":\"USD\"}", "email: must contain exactly one '@'"},
            {"{\"email\":\"a@b.co\",\"currency\":\"usd\"}",
             "currency: an ISO 4217 code in upper case (\"USD\")"},
            {"{\"email\":\"a@b.co\",\"currency\":\"XTS\"}",
             "currency: an ISO 4217 code in upper case (\"USD\")"},
            {"{\"email\":\"a@b.co\",\"currency\":\"USD\",\"taxRateBp\":10001}",
             "tax_rate_bp: 0 to 10000 basis points"},
            {"{\"email\":\"a@b.co\",\"currency\":\"USD\",\"metadata\":{\"\":\"x\"}}",
             "metadata: keys of 1 to 40 bytes"},
            {"{\"email\":\"a@b.co\",\"currency\":\"USD\",\"testClockId\":\"not-a-uuid\"}",
             "test_clock_id: must be a uuid"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                bit_fails_with(t.owner.token, "CreateCustomer", "invalid_argument", bad[i][1], "%s",
                               bad[i][0]);
        }
        assert_int_equal(rows_of("customers", t.owner.tenant_id), before);
        /* An archived customer takes no new subscription. */
        bit_plan(&t, "p", "BHD", "FLAT", 1000, "MONTH", 1, 0);
        bit_fails_with(t.owner.token, "CreateSubscription", "failed_precondition",
                       "the customer is archived", "{\"customerId\":\"%s\",\"planCode\":\"p\"}",
                       id);
}

static void test_plans_have_versions(void **state)
{
        (void)state;
        bit_tenant t;
        char v1[BIT_ID_MAX], cust[BIT_ID_MAX];

        bit_tenant_new("bl-plan", &t);
        bit_plan(&t, "pro", "USD", "FLAT", 1000, "MONTH", 1, 7);
        bit_fails_with(
            t.owner.token, "CreatePlan", "already_exists", "a plan with this code exists",
            "{\"code\":\"pro\",\"currency\":\"USD\",\"intervalUnit\":\"INTERVAL_UNIT_MONTH\","
            "\"price\":{\"model\":\"PRICE_MODEL_FLAT\",\"amount\":\"5\"}}");
        json_t *j = bit_ok(t.owner.token, "GetPlan", "{\"code\":\"pro\"}");
        snprintf(v1, sizeof(v1), "%s", bit_str(j, "plan.id"));
        assert_int_equal(bit_int(j, "plan.version"), 1);
        json_decref(j);
        bit_customer(&t, "USD", 0, "", "", cust);
        json_t *sub = bit_ok(t.owner.token, "CreateSubscription",
                             "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust);

        /* A new price is a new version; the name changes the latest in place. */
        j = bit_ok(t.owner.token, "UpdatePlan",
                   "{\"code\":\"pro\",\"updateMask\":[\"price\",\"name\"],\"name\":\"Pro 2\","
                   "\"price\":{\"model\":\"PRICE_MODEL_FLAT\",\"amount\":\"1200\"}}");
        assert_int_equal(bit_int(j, "plan.version"), 2);
        assert_int_equal(bit_int(j, "plan.price.amount"), 1200);
        assert_int_equal(bit_int(j, "plan.trialDays"), 7);
        assert_string_not_equal(bit_str(j, "plan.id"), v1);
        json_decref(j);
        j = bit_ok(t.owner.token, "GetPlan", "{\"id\":\"%s\"}", v1);
        assert_int_equal(bit_int(j, "plan.price.amount"), 1000);
        json_decref(j);
        j = bit_ok(t.owner.token, "GetPlan", "{\"code\":\"pro\",\"version\":1}");
        assert_string_equal(bit_str(j, "plan.id"), v1);
        json_decref(j);
        /* The subscription keeps its version. */
        j = bit_ok(t.owner.token, "GetSubscription", "{\"id\":\"%s\"}",
                   bit_str(sub, "subscription.id"));
        assert_string_equal(bit_str(j, "subscription.planId"), v1);
        assert_int_equal(bit_int(j, "subscription.planVersion"), 1);
        json_decref(j);
        json_decref(sub);
        /* The same price again makes no version. */
        j = bit_ok(t.owner.token, "UpdatePlan",
                   "{\"code\":\"pro\",\"updateMask\":[\"price\"],"
                   "\"price\":{\"model\":\"PRICE_MODEL_FLAT\",\"amount\":\"1200\"}}");
        assert_int_equal(bit_int(j, "plan.version"), 2);
        json_decref(j);

        /* Price rules, each a clear message (docs/api.md's). */
        static const char *const bad[][2] = {
            {"\"price\":{\"model\":\"PRICE_MODEL_FLAT\",\"amount\":\"-1\"}",
             "price.amount must not be negative"},
            {"\"price\":{\"model\":\"PRICE_MODEL_UNSPECIFIED\"}",
             "price.model must be PRICE_MODEL_FLAT, PRICE_MODEL_PER_UNIT or PRICE_MODEL_GRADUATED"},
            {"\"price\":{\"model\":\"PRICE_MODEL_GRADUATED\",\"tiers\":[{\"upTo\":\"10\","
             "\"unitAmount\":\"1\"}]}",
             "price.tiers[0].up_to must be 0 on the last tier (no upper bound)"},
            {"\"price\":{\"model\":\"PRICE_MODEL_GRADUATED\",\"tiers\":[{\"upTo\":\"10\"},"
             "{\"upTo\":\"5\"},{}]}",
             "price.tiers[1].up_to must be above tiers[0].up_to"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                bit_fails_with(t.owner.token, "CreatePlan", "invalid_argument", bad[i][1],
                               "{\"code\":\"x%zu\",\"currency\":\"USD\","
                               "\"intervalUnit\":\"INTERVAL_UNIT_MONTH\",%s}",
                               i, bad[i][0]);
        }
        bit_fails_with(
            t.owner.token, "CreatePlan", "invalid_argument",
            "interval: a unit (day, week, month, year) and a count of at most three years",
            "{\"code\":\"x\",\"currency\":\"USD\",\"intervalUnit\":\"INTERVAL_UNIT_MONTH\","
            "\"intervalCount\":37,\"price\":{\"model\":\"PRICE_MODEL_FLAT\"}}");
        bit_fails_with(t.owner.token, "CreatePlan", "invalid_argument",
                       "code: 1 to 64 characters of [A-Za-z0-9._-]",
                       "{\"code\":\"has space\",\"currency\":\"USD\","
                       "\"intervalUnit\":\"INTERVAL_UNIT_MONTH\",\"price\":{\"model\":"
                       "\"PRICE_MODEL_FLAT\"}}");
        /* Archived: listed only on request, no new subscription. */
        json_decref(bit_ok(t.owner.token, "ArchivePlan", "{\"code\":\"pro\"}"));
        bit_fails_with(t.owner.token, "CreateSubscription", "failed_precondition",
                       "the plan is archived", "{\"customerId\":\"%s\",\"planCode\":\"pro\"}",
                       cust);
        j = bit_ok(t.owner.token, "ListPlans", "{}");
        assert_null(bit_at(j, "plans"));
        json_decref(j);
        j = bit_ok(t.owner.token, "ListPlans", "{\"includeArchived\":true}");
        assert_int_equal(json_array_size(bit_at(j, "plans")), 1);
        json_decref(j);
}

/*
 * Every method that takes an id: another tenant's is not_found, with the message a made-up one
 * gets ("invoice not found"): nothing tells that the id exists elsewhere.
 */
static void test_other_tenants_ids_are_not_found(void **state)
{
        (void)state;
        bit_tenant a, b;
        char cust[BIT_ID_MAX], sub[BIT_ID_MAX], inv[BIT_ID_MAX], plan[BIT_ID_MAX];
        char clock[BIT_ID_MAX];

        bit_tenant_new("bl-iso-a", &a);
        bit_tenant_new("bl-iso-b", &b);
        bit_clock(&a, bit_utc(2027, 1, 1, 0, 0, 0), clock);
        bit_plan(&a, "pro", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_plan(&b, "pro", "USD", "FLAT", 1000, "MONTH", 1, 0);
        bit_customer(&a, "USD", 0, "pm_card_visa", "", cust);
        json_t *j = bit_ok(a.owner.token, "CreateSubscription",
                           "{\"customerId\":\"%s\",\"planCode\":\"pro\"}", cust);
        snprintf(sub, sizeof(sub), "%s", bit_str(j, "subscription.id"));
        snprintf(inv, sizeof(inv), "%s", bit_str(j, "latestInvoice.id"));
        snprintf(plan, sizeof(plan), "%s", bit_str(j, "subscription.planId"));
        json_decref(j);
        const char *tok = b.owner.token;
        /* Each method, what it refers to, and its request around that id. */
        static const struct {
                const char *method, *what, *pre, *post;
        } calls[] = {
            {"GetCustomer", "customer", "{\"id\":\"", "\"}"},
            {"UpdateCustomer", "customer", "{\"id\":\"", "\",\"updateMask\":[\"name\"]}"},
            {"ArchiveCustomer", "customer", "{\"id\":\"", "\"}"},
            {"GetPlan", "plan", "{\"id\":\"", "\"}"},
            {"CreateSubscription", "customer", "{\"customerId\":\"", "\",\"planCode\":\"pro\"}"},
            {"GetSubscription", "subscription", "{\"id\":\"", "\"}"},
            {"CancelSubscription", "subscription", "{\"id\":\"", "\"}"},
            {"PauseSubscription", "subscription", "{\"id\":\"", "\"}"},
            {"ResumeSubscription", "subscription", "{\"id\":\"", "\"}"},
            {"ChangeSubscription", "subscription", "{\"id\":\"", "\",\"quantity\":\"2\"}"},
            {"PreviewChange", "subscription", "{\"id\":\"", "\",\"quantity\":\"2\"}"},
            {"ListSubscriptionHistory", "subscription", "{\"id\":\"", "\"}"},
            {"RecordUsage", "subscription", "{\"subscriptionId\":\"",
             "\",\"events\":[{\"eventId\":\"e\"}]}"},
            {"GetInvoice", "invoice", "{\"id\":\"", "\"}"},
            {"FinalizeInvoice", "invoice", "{\"id\":\"", "\"}"},
            {"AddInvoiceLines", "invoice", "{\"id\":\"",
             "\",\"lines\":[{\"description\":\"x\",\"unitAmount\":\"1\"}]}"},
            {"PayInvoice", "invoice", "{\"id\":\"", "\"}"},
            {"RecordPayment", "invoice", "{\"id\":\"", "\",\"amount\":\"1\"}"},
            {"VoidInvoice", "invoice", "{\"id\":\"", "\"}"},
            {"MarkUncollectible", "invoice", "{\"id\":\"", "\"}"},
            {"CreateCreditNote", "invoice", "{\"invoiceId\":\"", "\"}"},
            {"CreateInvoice", "customer", "{\"customerId\":\"", "\"}"},
            {"GetTestClock", "test clock", "{\"id\":\"", "\"}"},
            /* a day after the clock's start */
            {"AdvanceTestClock", "test clock", "{\"id\":\"",
             "\",\"frozenTimeUnixMs\":\"1798848000000\"}"},
            {"CreateCustomer", "test clock",
             "{\"email\":\"x@example.com\",\"currency\":\"USD\",\"testClockId\":\"", "\"}"},
        };
        for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
                const char *w = calls[i].what;
                const char *id = strcmp(w, "customer") == 0       ? cust
                                 : strcmp(w, "plan") == 0         ? plan
                                 : strcmp(w, "subscription") == 0 ? sub
                                 : strcmp(w, "invoice") == 0      ? inv
                                                                  : clock;
                char message[64];
                snprintf(message, sizeof(message), "%s not found", w);
                bit_fails_with(tok, calls[i].method, "not_found", message, "%s%s%s", calls[i].pre,
                               id, calls[i].post);
        }
        /* And lists filtered by another tenant's ids show nothing. */
        j = bit_ok(tok, "ListInvoices", "{\"customerId\":\"%s\"}", cust);
        assert_null(bit_at(j, "invoices"));
        json_decref(j);
        j = bit_ok(tok, "ListSubscriptions", "{\"customerId\":\"%s\"}", cust);
        assert_null(bit_at(j, "subscriptions"));
        json_decref(j);
}

/* auth's permission table: billing.read for admins and owners, billing.manage for owners; keys too.
 */
static void test_permissions(void **state)
{
        (void)state;
        ait_user owner, admin, viewer;
        char key[256], key_id[BIT_ID_MAX], cust[BIT_ID_MAX];

        ait_tenant_of_two("bl-perm", "bl-perm", "admin", &owner, &admin);
        ait_new_member(&owner, "bl-perm-v", "viewer", &viewer);
        json_t *j = bit_ok(owner.token, "CreateCustomer",
                           "{\"email\":\"p@example.com\",\"currency\":\"USD\"}");
        snprintf(cust, sizeof(cust), "%s", bit_str(j, "customer.id"));
        json_decref(j);
        json_decref(bit_ok(admin.token, "GetCustomer", "{\"id\":\"%s\"}", cust));
        json_decref(bit_ok(admin.token, "ListInvoices", "{}"));
        bit_fails_with(admin.token, "CreateCustomer", "permission_denied",
                       "your role (admin) lacks billing.manage",
                       "{\"email\":\"a@example.com\",\"currency\":\"USD\"}");
        bit_fails_with(viewer.token, "GetCustomer", "permission_denied",
                       "your role (viewer) lacks billing.read", "{\"id\":\"%s\"}", cust);
        /* An owner's key manages; an admin's key only reads. */
        ait_create_key(owner.token, "billing", "owner", key, key_id);
        json_decref(
            bit_ok(key, "CreateCustomer", "{\"email\":\"k@example.com\",\"currency\":\"EUR\"}"));
        ait_create_key(owner.token, "reader", "admin", key, key_id);
        json_decref(bit_ok(key, "ListCustomers", "{}"));
        bit_fails_with(
            key, "CreatePlan", "permission_denied", "your role (admin) lacks billing.manage",
            "{\"code\":\"k\",\"currency\":\"USD\",\"intervalUnit\":\"INTERVAL_UNIT_MONTH\","
            "\"price\":{\"model\":\"PRICE_MODEL_FLAT\"}}");
        /* No token at all. */
        bit_fails_with(NULL, "ListCustomers", "unauthenticated", "missing bearer token", "{}");
        /* The internal summary method is not routed. */
        bit_fails_with(owner.token, "GetBillingSummary", "unimplemented", "unknown method", "{}");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_customers),
            cmocka_unit_test(test_plans_have_versions),
            cmocka_unit_test(test_other_tenants_ids_are_not_found),
            cmocka_unit_test(test_permissions),
        };
        return cmocka_run_group_tests(tests, bit_setup, NULL);
}
