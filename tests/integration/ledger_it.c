/*
 * ledger_it: LedgerService through the stack's gateway in binary protobuf,
 * and the ledger replicas' metrics (see ledger_it.h).
 */
#include "ledger_it.h"

#include <time.h>
#include <unistd.h>

#define LT_POLL_MS 100

uint64_t lt_lo(u128 v)
{
        return (uint64_t)v;
}

uint64_t lt_hi(u128 v)
{
        return (uint64_t)(v >> 64);
}

u128 lt_u128(uint64_t hi, uint64_t lo)
{
        return ((u128)hi << 64) | lo;
}

int lt_post(const char *base, const char *path, const char *type, const void *body, size_t len,
            const char *const *headers, it_http_response *r)
{
        int waited = 0;

        for (;;) {
                char after[32] = "";
                int s = 1;

                if (it_http_post(base, path, type, body, len, headers, r) != 0) {
                        return -1;
                }
                if (r->status != 429 || waited >= LT_RATE_WAIT_S) {
                        return 0;
                }
                if (it_http_header(r, "Retry-After", after, sizeof(after)) == 0) {
                        s = atoi(after) > 0 ? atoi(after) : 1;
                }
                it_http_response_free(r);
                sleep((unsigned)s);
                waited += s;
        }
}

void lt_tenant_new(const it_stack *s, const char *prefix, lt_tenant *t)
{
        memset(t, 0, sizeof(*t));
        snprintf(t->gateway, sizeof(t->gateway), "%s", s->gateway_url);
        assert_int_equal(it_new_session(t->gateway, prefix, t->token, t->tenant_id, NULL), 0);
        assert_true(strlen(t->token) > 0);
        assert_true(strlen(t->tenant_id) == 36);
}

int lt_setup(it_stack *s, const char *prefix, lt_tenant *t)
{
        if (it_stack_load(s) != 0) {
                return -1;
        }
        lt_tenant_new(s, prefix, t);
        return 0;
}

/* The Connect code of an error reply into err ("?" when it has none). */
static void error_code(const it_http_response *r, char *err, size_t err_len)
{
        json_t *j = json_loadb(r->body, r->body_len, 0, NULL);
        json_t *code = j != NULL ? json_object_get(j, "code") : NULL;

        snprintf(err, err_len, "%s", json_is_string(code) ? json_string_value(code) : "?");
        json_decref(j);
}

long lt_call_status(const lt_tenant *t, const char *method, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *out_desc, ProtobufCMessage **out, char *err,
                    size_t err_len)
{
        char path[128], auth[LT_TOKEN_MAX + 32];
        const char *headers[2] = {auth, NULL};
        size_t len;
        uint8_t *body = it_pack(req, &len);
        it_http_response r;
        long status;

        snprintf(path, sizeof(path), LT_PATH "%s", method);
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", t->token);
        assert_int_equal(lt_post(t->gateway, path, "application/proto", body, len, headers, &r), 0);
        free(body);
        status = r.status;
        *out = NULL;
        if (status == 200) {
                *out =
                    protobuf_c_message_unpack(out_desc, NULL, r.body_len, (const uint8_t *)r.body);
                assert_non_null(*out);
        } else if (err != NULL) {
                error_code(&r, err, err_len);
        }
        it_http_response_free(&r);
        return status;
}

void *lt_call(const lt_tenant *t, const char *method, const ProtobufCMessage *req,
              const ProtobufCMessageDescriptor *out_desc)
{
        ProtobufCMessage *out = NULL;
        char err[64] = "";
        long status = lt_call_status(t, method, req, out_desc, &out, err, sizeof(err));

        if (status != 200) {
                fail_msg("%s: HTTP %ld (%s)", method, status, err);
        }
        return out;
}

void lt_account_init(lt_account_pb *a, u128 id, uint32_t ledger, uint32_t code, uint32_t flags)
{
        keelson__ledger__v1__account__init(a);
        a->id = lt_lo(id);
        a->id_hi = lt_hi(id);
        a->ledger = ledger;
        a->code = code;
        a->flags = flags;
}

void lt_transfer_init(lt_transfer_pb *t, u128 id, u128 debit, u128 credit, u128 amount,
                      uint32_t ledger, uint32_t code, uint32_t flags)
{
        keelson__ledger__v1__transfer__init(t);
        t->id = lt_lo(id);
        t->id_hi = lt_hi(id);
        t->debit_account_id = lt_lo(debit);
        t->debit_account_id_hi = lt_hi(debit);
        t->credit_account_id = lt_lo(credit);
        t->credit_account_id_hi = lt_hi(credit);
        t->amount = lt_lo(amount);
        t->amount_hi = lt_hi(amount);
        t->ledger = ledger;
        t->code = code;
        t->flags = flags;
}

/* Pointers to n items of size bytes each, for a repeated field; the caller frees them. */
static void **item_ptrs(void *items, size_t size, size_t n)
{
        void **ptrs;

        if (n > LT_BATCH_MAX) {
                fail_msg("a batch of %zu is more than a test sends", n);
        }
        ptrs = calloc(n > 0 ? n : 1, sizeof(*ptrs));
        assert_non_null(ptrs);
        for (size_t i = 0; i < n; i++) {
                ptrs[i] = (char *)items + i * size;
        }
        return ptrs;
}

/*
 * A Create call of n items (size bytes each) through req (either request:
 * its repeated field and count given), its reply's one code per item into
 * results (the field "results" of either reply; protobuf-c enums are
 * int-sized).
 */
_Static_assert(sizeof(Keelson__Ledger__V1__CreateTransfersResponse__Result) == sizeof(int) &&
                   sizeof(Keelson__Ledger__V1__CreateAccountsResponse__Result) == sizeof(int),
               "result codes are copied as ints");
static void create_batch(const lt_tenant *t, const char *method, const ProtobufCMessage *req,
                         size_t *n_field, void ***items_field, void *items, size_t size, size_t n,
                         const ProtobufCMessageDescriptor *desc, int *results)
{
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field_by_name(desc, "results");
        ProtobufCMessage *resp;

        assert_non_null(f);
        *n_field = n;
        *items_field = item_ptrs(items, size, n);
        resp = lt_call(t, method, req, desc);
        assert_int_equal(*(const size_t *)((const char *)resp + f->quantifier_offset), n);
        memcpy(results, *(int *const *)((const char *)resp + f->offset), n * sizeof(int));
        protobuf_c_message_free_unpacked(resp, NULL);
        free(*items_field);
}

void lt_create_accounts(const lt_tenant *t, lt_account_pb *accounts, size_t n, int *results)
{
        Keelson__Ledger__V1__CreateAccountsRequest req =
            KEELSON__LEDGER__V1__CREATE_ACCOUNTS_REQUEST__INIT;

        create_batch(t, "CreateAccounts", &req.base, &req.n_accounts, (void ***)&req.accounts,
                     accounts, sizeof(*accounts), n,
                     &keelson__ledger__v1__create_accounts_response__descriptor, results);
}

void lt_create_transfers(const lt_tenant *t, lt_transfer_pb *transfers, size_t n, int *results)
{
        Keelson__Ledger__V1__CreateTransfersRequest req =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;

        create_batch(t, "CreateTransfers", &req.base, &req.n_transfers, (void ***)&req.transfers,
                     transfers, sizeof(*transfers), n,
                     &keelson__ledger__v1__create_transfers_response__descriptor, results);
}

/*
 * A Lookup of n ids through req (either request: the ids' low and high
 * halves in ids and ids_hi); the caller frees the reply.
 */
static void *lookup(const lt_tenant *t, const char *method, ProtobufCMessage *req, size_t *n_lo,
                    uint64_t **lo, size_t *n_hi, uint64_t **hi,
                    const ProtobufCMessageDescriptor *desc, const u128 *ids, size_t n)
{
        void *resp;

        if (n > LT_BATCH_MAX) {
                fail_msg("a lookup of %zu ids is more than a test sends", n);
        }
        *lo = calloc(n > 0 ? n : 1, sizeof(**lo));
        *hi = calloc(n > 0 ? n : 1, sizeof(**hi));
        assert_non_null(*lo);
        assert_non_null(*hi);
        for (size_t i = 0; i < n; i++) {
                (*lo)[i] = lt_lo(ids[i]);
                (*hi)[i] = lt_hi(ids[i]);
        }
        *n_lo = *n_hi = n;
        resp = lt_call(t, method, req, desc);
        free(*lo);
        free(*hi);
        return resp;
}

Keelson__Ledger__V1__LookupAccountsResponse *lt_lookup_accounts(const lt_tenant *t, const u128 *ids,
                                                                size_t n)
{
        Keelson__Ledger__V1__LookupAccountsRequest req =
            KEELSON__LEDGER__V1__LOOKUP_ACCOUNTS_REQUEST__INIT;

        return lookup(t, "LookupAccounts", &req.base, &req.n_ids, &req.ids, &req.n_ids_hi,
                      &req.ids_hi, &keelson__ledger__v1__lookup_accounts_response__descriptor, ids,
                      n);
}

Keelson__Ledger__V1__LookupTransfersResponse *lt_lookup_transfers(const lt_tenant *t,
                                                                  const u128 *ids, size_t n)
{
        Keelson__Ledger__V1__LookupTransfersRequest req =
            KEELSON__LEDGER__V1__LOOKUP_TRANSFERS_REQUEST__INIT;

        return lookup(t, "LookupTransfers", &req.base, &req.n_ids, &req.ids, &req.n_ids_hi,
                      &req.ids_hi, &keelson__ledger__v1__lookup_transfers_response__descriptor, ids,
                      n);
}

static const char *enum_name(const ProtobufCEnumDescriptor *d, int r)
{
        const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(d, r);

        return v != NULL ? v->name : "?";
}

const char *lt_tr_name(int r)
{
        return enum_name(&keelson__ledger__v1__create_transfers_response__result__descriptor, r);
}

const char *lt_ar_name(int r)
{
        return enum_name(&keelson__ledger__v1__create_accounts_response__result__descriptor, r);
}

int lt_wait_until(int (*fn)(void *), void *arg, int timeout_ms)
{
        for (int waited = 0; waited <= timeout_ms; waited += LT_POLL_MS) {
                if (fn(arg)) {
                        return 1;
                }
                it_sleep_ms(LT_POLL_MS);
        }
        return 0;
}

int lt_ledger_ports(int *ports, int max)
{
        int n = it_stack_ports("KEELSON_IT_LEDGER_HEALTH_PORTS", ports, max);

        if (n <= 0) {
                fail_msg("the stack's env file names no ledger health port");
        }
        return n;
}

double lt_ledger_metric(const char *series)
{
        int ports[IT_REPLICAS_MAX];
        int n = lt_ledger_ports(ports, IT_REPLICAS_MAX);
        double sum = 0;

        for (int i = 0; i < n; i++) {
                char base[64];
                double v = 0;
                snprintf(base, sizeof(base), "http://127.0.0.1:%d", ports[i]);
                if (it_metric(base, series, &v) == 0) {
                        sum += v;
                }
        }
        return sum;
}

const char lt_sql_ledger_sums[] =
    "SELECT count(*) FROM (SELECT tenant_id, ledger FROM ledger.accounts"
    " GROUP BY tenant_id, ledger"
    " HAVING sum(debits_posted) <> sum(credits_posted)"
    " OR sum(debits_pending) <> sum(credits_pending)) x";

const char lt_sql_account_sums[] =
    "WITH t AS (SELECT t.tenant_id, t.debit_account_id, t.credit_account_id, t.amount,"
    "   (t.flags & 10) = 0 AS posts,"
    "   (t.flags & 2) <> 0 AND p.status = 1 AS reserves"
    "  FROM ledger.transfers t LEFT JOIN ledger.pending_transfers p"
    "   ON p.tenant_id = t.tenant_id AND p.id = t.id),"
    " s AS (SELECT a.tenant_id, a.id,"
    "   a.debits_posted, a.credits_posted, a.debits_pending, a.credits_pending,"
    "   (SELECT coalesce(sum(amount), 0) FROM t WHERE t.tenant_id = a.tenant_id"
    "     AND t.debit_account_id = a.id AND posts) AS dpo,"
    "   (SELECT coalesce(sum(amount), 0) FROM t WHERE t.tenant_id = a.tenant_id"
    "     AND t.credit_account_id = a.id AND posts) AS cpo,"
    "   (SELECT coalesce(sum(amount), 0) FROM t WHERE t.tenant_id = a.tenant_id"
    "     AND t.debit_account_id = a.id AND reserves) AS dp,"
    "   (SELECT coalesce(sum(amount), 0) FROM t WHERE t.tenant_id = a.tenant_id"
    "     AND t.credit_account_id = a.id AND reserves) AS cp"
    "  FROM ledger.accounts a WHERE a.tenant_id = '%s')"
    " SELECT count(*) FROM s WHERE debits_posted <> dpo OR credits_posted <> cpo"
    " OR debits_pending <> dp OR credits_pending <> cp";
