/*
 * GetReconciliation: billing's facts held against what the ledger holds.
 *
 * 1. One read-only transaction of the tenant reads the postings' count
 *    (first: see 4), then the facts made in [from, to) by their own times
 *    (invoices finalized, payments that succeeded, credit notes), each with
 *    the state of its posting, and every customer with a finalized invoice
 *    with what its open invoices owe and its credit balance (always whole).
 *    Each fact's chain is made by bl_chain_of, the function that queued it,
 *    so the check is between billing's own rows and the ledger. The one
 *    amount no fact row keeps, what an invoice marked uncollectible wrote
 *    off, is read from the packed transfers of its posting. Whether a
 *    payment came after the write-off is the order of their postings (ids
 *    are taken in commit order for one invoice, whose row lock serialises
 *    its writes); timestamps alone tie on a test clock's frozen time.
 * 2. No transaction is open while the ledger is asked, as the caller's
 *    tenant and admin: LookupTransfers of every expected id (missing_transfer
 *    unless the fact's posting is still queued; amount_mismatch when found
 *    with another amount, debit or credit account, ledger or code),
 *    GetTrialBalance of each currency ledger the facts and customers use (its
 *    totals cover the whole ledger: one page says whether it balances), and
 *    LookupAccounts of the customers' receivable and credit accounts.
 * 3. Receivables: debits - credits of a customer's receivable account must
 *    be what its open invoices owe (amount_due - amount_paid -
 *    amount_credited), credits - debits of its credit account its
 *    credit_balance.
 * 4. Those two hold only when the ledger has every posting of the rows read.
 *    They are skipped when postings were queued at the start, or when a
 *    posting arrived during the check (the count, read again after the
 *    ledger, moved): postings_pending then says so, and a later run checks
 *    them.
 * At most 1,000 discrepancies are listed; all are counted.
 */
#include "billing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_log.h"
#include "ks_u128.h"

#define ROWS_MAX       20000  /* invoices, payments, credit notes: each, per call */
#define CUSTOMERS_MAX  100000 /* customers with invoices, per tenant */
#define LISTED_MAX     1000
#define DETAIL_MAX     240
#define POST_ERROR_MAX 80
#define CURRENCIES_MAX 256
#define IDS_PER_CALL   KS_RPC_ITEMS_MAX

typedef Keelson__Billing__V1__Discrepancy discrepancy_pb;
typedef Keelson__Ledger__V1__Transfer transfer_pb;
typedef Keelson__Ledger__V1__Account account_pb;
typedef Keelson__Ledger__V1__CreateTransfersRequest transfers_req;

/* ---- the statements ----------------------------------------------------------------- */

/*
 * A posting's columns in the facts' lateral lookups, with its state: 1
 * posted, 2 queued (its id in billing.postings_queue, which a posting
 * leaves once the ledger holds it or it failed), 3 failed; a fact without a
 * posting has none (0).
 */
#define POSTING_COLS                                                                               \
        "id, last_error, transfers, CASE WHEN failed THEN 3 WHEN EXISTS (SELECT 1 FROM"            \
        " billing.postings_queue pq WHERE pq.id = postings.id) THEN 2 ELSE 1 END AS state"

/* The tenant's postings: read first, and again once the ledger has answered (step 4). */
static const char sql_count[] = "SELECT count(*), COALESCE(max(id), 0),"
                                " (SELECT count(*) FROM billing.postings_queue)"
                                " FROM billing.postings WHERE tenant_id = billing.ctx_tenant()";

/*
 * Each fact comes with the state of its posting: a lateral lookup by the
 * posting's unique key, kept a subquery (LIMIT 1: the planner does not
 * flatten it into a join) so that the plan is one index probe per fact
 * whatever the statistics say (a payment's invoice is found the same way). As a join, a generic
 * plan compared every fact with every posting of the tenant (quadratic: seconds at 2,000 facts).
 * The state: 0 none queued, 1 posted, 2 queued, 3 failed; and its last error. An
 * invoice's are p1, p4, p5 (finalized, voided, written off); the write-off's
 * amount is in p5's transfers (the last column guesses it when p5 is missing).
 */
static const char sql_invoices[] =
    "SELECT i.id, i.customer_id, i.currency, i.subtotal, i.tax, i.total, i.balance_applied,"
    " i.voided_ms, i.uncollectible_ms,"
    " COALESCE(p1.state, 0), COALESCE(p1.last_error, ''),"
    " COALESCE(p4.state, 0), COALESCE(p4.last_error, ''),"
    " COALESCE(p5.state, 0), COALESCE(p5.last_error, ''), p5.transfers,"
    " CASE WHEN i.uncollectible_ms > 0 THEN i.amount_due - i.amount_paid - i.amount_credited"
    " + COALESCE((SELECT sum(q.amount) FROM billing.payments q WHERE q.tenant_id = i.tenant_id"
    " AND q.invoice_id = i.id AND q.status = 1 AND q.created_ms > i.uncollectible_ms), 0)"
    " ELSE 0 END"
    " FROM billing.invoices i"
    " LEFT JOIN LATERAL (SELECT " POSTING_COLS " FROM billing.postings"
    " WHERE tenant_id = i.tenant_id AND source_type = 1 AND source_id = i.id LIMIT 1) p1 ON true"
    " LEFT JOIN LATERAL (SELECT " POSTING_COLS " FROM billing.postings"
    " WHERE tenant_id = i.tenant_id AND source_type = 4 AND source_id = i.id LIMIT 1) p4 ON true"
    " LEFT JOIN LATERAL (SELECT " POSTING_COLS " FROM billing.postings"
    " WHERE tenant_id = i.tenant_id AND source_type = 5 AND source_id = i.id LIMIT 1) p5 ON true"
    " WHERE i.tenant_id = billing.ctx_tenant() AND i.state <> 0"
    " AND ($1::int8 = 0 OR i.finalized_ms >= $1::int8)"
    " AND ($2::int8 = 0 OR i.finalized_ms < $2::int8)"
    " ORDER BY i.finalized_ms, i.id LIMIT $3::int8";

/*
 * After the write-off when its posting came after the write-off's (pp, pu);
 * by time when either is missing.
 */
static const char sql_payments[] =
    "SELECT p.id, p.customer_id, i.currency, p.amount,"
    " CASE WHEN pp.id IS NOT NULL AND pu.id IS NOT NULL THEN pp.id > pu.id"
    " ELSE i.uncollectible_ms > 0 AND i.uncollectible_ms <= p.created_ms END,"
    " COALESCE(pp.state, 0), COALESCE(pp.last_error, '')"
    " FROM billing.payments p"
    " JOIN LATERAL (SELECT currency, uncollectible_ms FROM billing.invoices"
    " WHERE tenant_id = p.tenant_id AND id = p.invoice_id LIMIT 1) i ON true"
    " LEFT JOIN LATERAL (SELECT " POSTING_COLS " FROM billing.postings"
    " WHERE tenant_id = p.tenant_id AND source_type = 2 AND source_id = p.id LIMIT 1) pp ON true"
    " LEFT JOIN LATERAL (SELECT " POSTING_COLS " FROM billing.postings"
    " WHERE tenant_id = p.tenant_id AND source_type = 5 AND source_id = p.invoice_id LIMIT 1) pu "
    "ON true"
    " WHERE p.tenant_id = billing.ctx_tenant() AND p.status = 1"
    " AND ($1::int8 = 0 OR p.created_ms >= $1::int8)"
    " AND ($2::int8 = 0 OR p.created_ms < $2::int8)"
    " ORDER BY p.created_ms, p.id LIMIT $3::int8";

static const char sql_credit_notes[] =
    "SELECT c.id, c.customer_id, c.currency, c.amount, c.subtotal, c.tax,"
    " c.credited_to IN ('customer_balance', 'refund'),"
    " COALESCE(pc.state, 0), COALESCE(pc.last_error, ''),"
    " CASE WHEN c.credited_to = 'refund' THEN c.amount ELSE 0 END"
    " FROM billing.credit_notes c"
    " LEFT JOIN LATERAL (SELECT " POSTING_COLS " FROM billing.postings"
    " WHERE tenant_id = c.tenant_id AND source_type = 3 AND source_id = c.id LIMIT 1) pc ON true"
    " WHERE c.tenant_id = billing.ctx_tenant()"
    " AND ($1::int8 = 0 OR c.created_ms >= $1::int8)"
    " AND ($2::int8 = 0 OR c.created_ms < $2::int8)"
    " ORDER BY c.created_ms, c.id LIMIT $3::int8";

/* The tenant's invoices summed per customer in one pass, each customer then found by its key. */
static const char sql_customers[] =
    "SELECT c.id, c.currency, c.credit_balance, o.owed FROM (SELECT customer_id,"
    " COALESCE(sum(amount_due - amount_paid - amount_credited) FILTER (WHERE state = 1), 0) AS owed"
    " FROM billing.invoices WHERE tenant_id = billing.ctx_tenant() AND state <> 0"
    " GROUP BY customer_id ORDER BY customer_id LIMIT $1::int8) o"
    " JOIN LATERAL (SELECT id, currency, credit_balance FROM billing.customers"
    " WHERE tenant_id = billing.ctx_tenant() AND id = o.customer_id LIMIT 1) c ON true"
    " ORDER BY o.customer_id";

/* ---- state --------------------------------------------------------------------------- */

typedef enum posting_state {
        POSTING_NONE = 0,
        POSTING_POSTED = 1,
        POSTING_QUEUED = 2,
        POSTING_FAILED = 3,
} posting_state;

typedef struct fact {
        bl_chain chain;
        bool valid; /* bl_chain_of made a chain of it */
        posting_state posting;
        char error[POST_ERROR_MAX]; /* the posting's last_error */
} fact;

typedef struct customer {
        char id[BL_UUID_LEN + 1];
        const bl_currency *currency;
        int64_t credit_balance;
        int64_t owed; /* what its open invoices owe */
        /* from the ledger: debits - credits of the receivable, credits - debits of the credit */
        __int128 receivable, credit;
        bool have_receivable, have_credit;
} customer;

typedef struct listed {
        discrepancy_pb m;
        char object_id[BL_UUID_LEN + 1];
        char transfer_id[KS_U128_DEC_LEN + 1];
        char currency[4];
        char detail[DETAIL_MAX];
} listed;

typedef struct fingerprint {
        int64_t count, max_id, queued;
} fingerprint;

typedef struct recon {
        ks_call *call;
        int64_t from_ms, to_ms, checked_ms;
        fact *facts;
        size_t n_facts;
        customer *customers;
        size_t n_customers;
        const bl_currency *currencies[CURRENCIES_MAX];
        size_t n_currencies;
        fingerprint start, end;
        int64_t invoices, payments, credit_notes;
        int64_t expected, found, chains;
        listed *list; /* LISTED_MAX, made at the first */
        size_t n_list;
        int64_t total;
        uint64_t *ids_lo, *ids_hi; /* IDS_PER_CALL each */
} recon;

/* ---- discrepancies ---------------------------------------------------------------------- */

static int64_t clamp64(__int128 v)
{
        return v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : (int64_t)v;
}

static int64_t clamp_u128(ks_u128 v)
{
        return v > (ks_u128)INT64_MAX ? INT64_MAX : (int64_t)v;
}

static const char *object_type(bl_source_type t)
{
        return t == BL_SRC_PAYMENT       ? "payment"
               : t == BL_SRC_CREDIT_NOTE ? "credit_note"
                                         : "invoice";
}

static const char *fact_name(bl_source_type t)
{
        static const char *const names[] = {"",
                                            "invoice finalized",
                                            "payment",
                                            "credit note",
                                            "invoice voided",
                                            "invoice written off"};

        return t >= BL_SRC_INVOICE && t <= BL_SRC_UNCOLLECTIBLE ? names[t] : "fact";
}

static const char *account_name(bl_account_kind k)
{
        static const char *const names[] = {"",     "receivable",      "revenue", "tax payable",
                                            "cash", "customer credit", "bad debt"};

        return k >= BL_ACCT_RECEIVABLE && k <= BL_ACCT_BAD_DEBT ? names[k] : "?";
}

/* Counts one discrepancy and lists it while fewer than LISTED_MAX are; NULL when not listed. */
static listed *add(recon *r, const char *kind, const char *type, const char *object_id,
                   const bl_currency *cur, int64_t expected, int64_t found)
{
        listed *d;

        r->total++;
        if (r->n_list == LISTED_MAX) {
                return NULL;
        }
        if (r->list == NULL && (r->list = calloc(LISTED_MAX, sizeof(*r->list))) == NULL) {
                return NULL; /* counted; the reply says how many */
        }
        d = &r->list[r->n_list++];
        keelson__billing__v1__discrepancy__init(&d->m);
        snprintf(d->object_id, sizeof(d->object_id), "%s", object_id);
        snprintf(d->currency, sizeof(d->currency), "%s", cur != NULL ? cur->code : "");
        d->m.kind = (char *)kind;
        d->m.object_type = (char *)type;
        d->m.object_id = d->object_id;
        d->m.transfer_id = d->transfer_id;
        d->m.currency = d->currency;
        d->m.detail = d->detail;
        d->m.expected = expected;
        d->m.found = found;
        return d;
}

/* ---- facts from rows ---------------------------------------------------------------------- */

static void note_currency(recon *r, const bl_currency *cur)
{
        for (size_t i = 0; i < r->n_currencies; i++) {
                if (r->currencies[i] == cur) {
                        return;
                }
        }
        KS_ASSERT(r->n_currencies < CURRENCIES_MAX); /* the ISO 4217 table is smaller */
        r->currencies[r->n_currencies++] = cur;
}

/* Appends the fact f, whose posting's state is in columns col and col + 1 of res row i. */
static void fact_add(recon *r, const bl_fact *f, const PGresult *res, int i, int col)
{
        fact *x = &r->facts[r->n_facts++];

        x->valid = bl_chain_of(f, &x->chain);
        x->posting = (posting_state)ks_pg_int(res, i, col);
        snprintf(x->error, sizeof(x->error), "%s", ks_pg_text(res, i, col + 1));
        if (!x->valid) {
                snprintf(x->chain.source_id, sizeof(x->chain.source_id), "%s", f->source_id);
                x->chain.type = f->type;
                x->chain.currency = f->currency;
                return;
        }
        note_currency(r, f->currency);
        r->expected += (int64_t)x->chain.n;
        r->chains += x->chain.n > 0;
}

/* The write-off's amount: transfer 141 of the invoice's posting, else the guess (column 16). */
static int64_t written_off(const PGresult *res, int i)
{
        int64_t amount = ks_pg_int(res, i, 16);
        size_t len = 0;
        unsigned char *b;
        transfers_req *t;

        if (PQgetisnull(res, i, 15) ||
            (b = PQunescapeBytea((const unsigned char *)PQgetvalue(res, i, 15), &len)) == NULL) {
                return amount;
        }
        t = keelson__ledger__v1__create_transfers_request__unpack(NULL, len, b);
        PQfreemem(b);
        for (size_t k = 0; t != NULL && k < t->n_transfers; k++) {
                if (t->transfers[k]->code == 141 && t->transfers[k]->amount_hi == 0 &&
                    t->transfers[k]->amount <= INT64_MAX) {
                        amount = (int64_t)t->transfers[k]->amount;
                }
        }
        if (t != NULL) {
                keelson__ledger__v1__create_transfers_request__free_unpacked(t, NULL);
        }
        return amount;
}

static void read_invoices(recon *r, const PGresult *res)
{
        for (int i = 0; i < PQntuples(res); i++) {
                bl_fact f = {.source_id = ks_pg_text(res, i, 0),
                             .customer_id = ks_pg_text(res, i, 1),
                             .currency = bl_currency_find(ks_pg_text(res, i, 2)),
                             .subtotal = ks_pg_int(res, i, 3),
                             .tax = ks_pg_int(res, i, 4),
                             .total = ks_pg_int(res, i, 5),
                             .balance_applied = ks_pg_int(res, i, 6)};
                int64_t voided_ms = ks_pg_int(res, i, 7), uncollectible_ms = ks_pg_int(res, i, 8);

                r->invoices++;
                f.type = BL_SRC_INVOICE;
                fact_add(r, &f, res, i, 9);
                if (uncollectible_ms > 0) {
                        f.type = BL_SRC_UNCOLLECTIBLE;
                        f.amount = written_off(res, i);
                        fact_add(r, &f, res, i, 13);
                }
                if (voided_ms > 0) {
                        f.type = BL_SRC_VOID;
                        f.amount = 0;
                        f.from_uncollectible = uncollectible_ms > 0;
                        fact_add(r, &f, res, i, 11);
                }
        }
}

static void read_payments(recon *r, const PGresult *res)
{
        for (int i = 0; i < PQntuples(res); i++) {
                bl_fact f = {.type = BL_SRC_PAYMENT,
                             .source_id = ks_pg_text(res, i, 0),
                             .customer_id = ks_pg_text(res, i, 1),
                             .currency = bl_currency_find(ks_pg_text(res, i, 2)),
                             .amount = ks_pg_int(res, i, 3),
                             .from_uncollectible = ks_pg_bool(res, i, 4)};
                r->payments++;
                fact_add(r, &f, res, i, 5);
        }
}

static void read_credit_notes(recon *r, const PGresult *res)
{
        for (int i = 0; i < PQntuples(res); i++) {
                bl_fact f = {.type = BL_SRC_CREDIT_NOTE,
                             .source_id = ks_pg_text(res, i, 0),
                             .customer_id = ks_pg_text(res, i, 1),
                             .currency = bl_currency_find(ks_pg_text(res, i, 2)),
                             .amount = ks_pg_int(res, i, 3),
                             .subtotal = ks_pg_int(res, i, 4),
                             .tax = ks_pg_int(res, i, 5),
                             .to_credit = ks_pg_bool(res, i, 6),
                             .refunded = ks_pg_int(res, i, 9)};
                r->credit_notes++;
                fact_add(r, &f, res, i, 7);
        }
}

static void read_customers(recon *r, const PGresult *res)
{
        for (int i = 0; i < PQntuples(res); i++) {
                customer *c = &r->customers[r->n_customers];
                snprintf(c->id, sizeof(c->id), "%s", ks_pg_text(res, i, 0));
                c->currency = bl_currency_find(ks_pg_text(res, i, 1));
                c->credit_balance = ks_pg_int(res, i, 2);
                c->owed = ks_pg_int(res, i, 3);
                if (c->currency == NULL || !bl_uuid_valid(c->id)) {
                        continue; /* no write makes such a row; its invoices make no chain */
                }
                note_currency(r, c->currency);
                r->n_customers++;
        }
}

static void read_fingerprint(const PGresult *res, fingerprint *fp)
{
        fp->count = ks_pg_int(res, 0, 0);
        fp->max_id = ks_pg_int(res, 0, 1);
        fp->queued = ks_pg_int(res, 0, 2);
}

/* ---- 1: the transaction -------------------------------------------------------------------- */

enum { R_FP = 1, R_INVOICES, R_PAYMENTS, R_CREDIT_NOTES, R_CUSTOMERS, R_N };

static int take_rows(bl_tx *tx, recon *r, PGresult *const *res)
{
        size_t ni = (size_t)PQntuples(res[R_INVOICES]), np = (size_t)PQntuples(res[R_PAYMENTS]);
        size_t nc = (size_t)PQntuples(res[R_CREDIT_NOTES]);
        size_t nk = (size_t)PQntuples(res[R_CUSTOMERS]);

        if (ni > ROWS_MAX || np > ROWS_MAX || nc > ROWS_MAX) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "more than %d invoices, payments or credit notes in the window:"
                               " reconcile a shorter one (from_unix_ms, to_unix_ms)",
                               ROWS_MAX);
        }
        if (nk > CUSTOMERS_MAX) {
                return bl_fail(tx, KS_FAILED_PRECONDITION,
                               "more than %d customers with invoices: beyond what one"
                               " reconciliation checks",
                               CUSTOMERS_MAX);
        }
        /* An invoice makes up to three facts: finalized, written off, voided. */
        r->facts = calloc(3 * ni + np + nc + 1, sizeof(*r->facts));
        r->customers = calloc(nk + 1, sizeof(*r->customers));
        if (r->facts == NULL || r->customers == NULL) {
                return ks_call_oom(tx->call);
        }
        read_fingerprint(res[R_FP], &r->start);
        read_invoices(r, res[R_INVOICES]);
        read_payments(r, res[R_PAYMENTS]);
        read_credit_notes(r, res[R_CREDIT_NOTES]);
        read_customers(r, res[R_CUSTOMERS]);
        return KS_OK;
}

/*
 * The postings' count first: under READ COMMITTED each statement reads what
 * committed before it began, so a fact seen by a later one has its posting
 * counted by the second count (step 4) if not by this one.
 */
static int read_tx(bl_tx *tx, void *arg)
{
        recon *r = arg;
        ks_pg_num from = ks_pg_num_of(r->from_ms), to = ks_pg_num_of(r->to_ms);
        ks_pg_num rows = ks_pg_num_of(ROWS_MAX + 1), customers = ks_pg_num_of(CUSTOMERS_MAX + 1);
        const char *w[3] = {from.s, to.s, rows.s};
        const char *c[1] = {customers.s};
        PGresult *res[R_N] = {NULL};
        const ks_pg_stmt s[R_N] = {
            {.sql = "SET TRANSACTION READ ONLY"},
            {.sql = sql_count, .out = &res[R_FP]},
            {.sql = sql_invoices, .n_params = 3, .params = w, .out = &res[R_INVOICES]},
            {.sql = sql_payments, .n_params = 3, .params = w, .out = &res[R_PAYMENTS]},
            {.sql = sql_credit_notes, .n_params = 3, .params = w, .out = &res[R_CREDIT_NOTES]},
            {.sql = sql_customers, .n_params = 1, .params = c, .out = &res[R_CUSTOMERS]},
        };
        int rc = bl_pipeline(tx, s, R_N);

        if (rc == KS_OK) {
                rc = take_rows(tx, r, res);
        }
        for (int i = 0; i < R_N; i++) {
                PQclear(res[i]);
        }
        return rc;
}

static int count_tx(bl_tx *tx, void *arg)
{
        recon *r = arg;
        PGresult *res = NULL;
        int rc = bl_exec(tx, sql_count, 0, NULL, &res);

        if (rc == KS_OK) {
                read_fingerprint(res, &r->end);
        }
        PQclear(res);
        return rc;
}

/* ---- 2: the ledger ------------------------------------------------------------------------ */

/*
 * One call of the ledger as the caller's tenant, within the call's own
 * deadline. KS_OK; `tolerated` (a code the caller reports itself) as is;
 * else the call failed: unavailable when the ledger may answer later.
 */
static int ledger(recon *r, const char *method, const ProtobufCMessage *in,
                  const ProtobufCMessageDescriptor *out_type, ProtobufCMessage **out, int tolerated)
{
        bl_service *svc = r->call->service;
        char msg[KS_MESSAGE_MAX];
        int64_t deadline = ks_now_ms() + svc->cfg->ledger_timeout_ms;
        int rc;

        if (r->call->deadline_unix_ms > 0 && r->call->deadline_unix_ms < deadline) {
                deadline = r->call->deadline_unix_ms;
        }
        rc = bl_ledger_call(svc, r->call->caller->tenant_id, r->call->request_id, method, deadline,
                            in, out_type, out, msg);
        if (rc == KS_OK || rc == tolerated) {
                return rc;
        }
        if (bl_ledger_transient(rc)) {
                return ks_call_fail(r->call, KS_UNAVAILABLE, "the ledger did not answer; retry");
        }
        ks_log_error(r->call->request_id, "reconciliation: the ledger refused a call",
                     "{s:s, s:s, s:s}", "method", method, "code", ks_code_name(rc), "message", msg);
        return ks_call_fail(r->call, KS_INTERNAL, BL_INTERNAL_MSG);
}

/* Walks the expected transfers in order: fact f, transfer t. */
typedef struct cursor {
        size_t f, t;
} cursor;

static bool cursor_next(const recon *r, cursor *c, const fact **f, size_t *t)
{
        while (c->f < r->n_facts && (!r->facts[c->f].valid || c->t >= r->facts[c->f].chain.n)) {
                c->f++;
                c->t = 0;
        }
        if (c->f == r->n_facts) {
                return false;
        }
        *f = &r->facts[c->f];
        *t = c->t++;
        return true;
}

static ks_u128 transfer_id_of(const transfer_pb *t)
{
        return ks_u128_of(t->id_hi, t->id);
}

static int transfer_cmp(const void *a, const void *b)
{
        ks_u128 x = transfer_id_of(*(transfer_pb *const *)a);
        ks_u128 y = transfer_id_of(*(transfer_pb *const *)b);

        return x < y ? -1 : x > y;
}

static const transfer_pb *transfer_find(transfer_pb **found, size_t n, ks_u128 id)
{
        transfer_pb key = {.id = ks_u128_lo(id), .id_hi = ks_u128_hi(id)}, *k = &key;
        transfer_pb **hit = bsearch(&k, found, n, sizeof(found[0]), transfer_cmp);

        return hit != NULL ? *hit : NULL;
}

static const char *posting_said(const fact *f, char *buf, size_t len)
{
        switch (f->posting) {
        case POSTING_NONE:
                return "no posting was queued for it";
        case POSTING_FAILED:
                snprintf(buf, len, "its posting failed: %s", f->error);
                return buf;
        default:
                return "its posting was acknowledged";
        }
}

static void missing(recon *r, const fact *f, size_t t)
{
        const bl_transfer *x = &f->chain.t[t];
        char said[POST_ERROR_MAX + 32];
        listed *d = add(r, "missing_transfer", object_type(f->chain.type), f->chain.source_id,
                        f->chain.currency, x->amount, 0);

        if (d == NULL) {
                return;
        }
        ks_u128_to_dec(x->id, d->transfer_id);
        snprintf(d->detail, sizeof(d->detail), "%s: transfer %u (%s -> %s) not in the ledger; %s",
                 fact_name(f->chain.type), x->code, account_name(x->debit), account_name(x->credit),
                 posting_said(f, said, sizeof(said)));
}

/* Compares what the ledger holds with what the fact says; amount_mismatch naming what differs. */
static void compare(recon *r, const fact *f, size_t t, const transfer_pb *got)
{
        const bl_transfer *x = &f->chain.t[t];
        const bl_chain *c = &f->chain;
        ks_u128 amount = ks_u128_of(got->amount_hi, got->amount);
        ks_u128 debit = bl_account_id(x->debit, c->currency, c->customer_id);
        ks_u128 credit = bl_account_id(x->credit, c->currency, c->customer_id);
        bool amount_ok = amount == (ks_u128)x->amount;
        bool debit_ok = ks_u128_of(got->debit_account_id_hi, got->debit_account_id) == debit;
        bool credit_ok = ks_u128_of(got->credit_account_id_hi, got->credit_account_id) == credit;
        bool ledger_ok = got->ledger == (uint32_t)c->currency->numeric;
        bool code_ok = got->code == x->code;

        if (amount_ok && debit_ok && credit_ok && ledger_ok && code_ok) {
                return;
        }
        listed *d = add(r, "amount_mismatch", object_type(c->type), c->source_id, c->currency,
                        x->amount, clamp_u128(amount));
        if (d == NULL) {
                return;
        }
        ks_u128_to_dec(x->id, d->transfer_id);
        snprintf(d->detail, sizeof(d->detail), "%s: transfer %u (%s -> %s) differs:%s%s%s%s%s",
                 fact_name(c->type), x->code, account_name(x->debit), account_name(x->credit),
                 amount_ok ? "" : " amount", debit_ok ? "" : " debit account",
                 credit_ok ? "" : " credit account", ledger_ok ? "" : " ledger",
                 code_ok ? "" : " code");
}

/* One LookupTransfers of the next (at most IDS_PER_CALL) expected ids from *c; *done at the end. */
static int lookup_transfers(recon *r, cursor *c, bool *done)
{
        Keelson__Ledger__V1__LookupTransfersRequest req =
            KEELSON__LEDGER__V1__LOOKUP_TRANSFERS_REQUEST__INIT;
        Keelson__Ledger__V1__LookupTransfersResponse *resp = NULL;
        cursor start = *c;
        const fact *f;
        size_t t, n = 0;
        int rc;

        while (n < IDS_PER_CALL && cursor_next(r, c, &f, &t)) {
                r->ids_lo[n] = ks_u128_lo(f->chain.t[t].id);
                r->ids_hi[n++] = ks_u128_hi(f->chain.t[t].id);
        }
        *done = n < IDS_PER_CALL;
        if (n == 0) {
                return KS_OK;
        }
        req.ids = r->ids_lo;
        req.n_ids = n;
        req.ids_hi = r->ids_hi;
        req.n_ids_hi = n;
        if ((rc = ledger(r, "LookupTransfers", &req.base,
                         &keelson__ledger__v1__lookup_transfers_response__descriptor,
                         (ProtobufCMessage **)&resp, KS_OK)) != KS_OK) {
                return rc;
        }
        /* Found ones come in request order; sorted, any order would do. */
        qsort(resp->transfers, resp->n_transfers, sizeof(resp->transfers[0]), transfer_cmp);
        for (size_t i = 0; i < n; i++) {
                bool more = cursor_next(r, &start, &f, &t);
                KS_ASSERT(more); /* the same walk as above */
                const transfer_pb *got =
                    transfer_find(resp->transfers, resp->n_transfers, f->chain.t[t].id);
                if (got == NULL) {
                        if (f->posting != POSTING_QUEUED) {
                                missing(r, f, t);
                        }
                        continue;
                }
                r->found++;
                compare(r, f, t, got);
        }
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return KS_OK;
}

/* Facts that make no chain at all (a malformed row: a bug), then every expected transfer. */
static int check_transfers(recon *r)
{
        cursor c = {0, 0};
        bool done = false;
        int rc = KS_OK;

        for (size_t i = 0; i < r->n_facts; i++) {
                const fact *f = &r->facts[i];
                if (!f->valid) {
                        listed *d = add(r, "missing_transfer", object_type(f->chain.type),
                                        f->chain.source_id, f->chain.currency, 0, 0);
                        if (d != NULL) {
                                snprintf(d->detail, sizeof(d->detail),
                                         "%s: its amounts or currency make no ledger chain",
                                         fact_name(f->chain.type));
                        }
                }
        }
        while (!done && rc == KS_OK) {
                rc = lookup_transfers(r, &c, &done);
        }
        return rc;
}

static void unbalanced(recon *r, const bl_currency *cur,
                       const Keelson__Ledger__V1__GetTrialBalanceResponse *tb)
{
        const Keelson__Ledger__V1__AccountBalance *t = tb != NULL ? tb->totals : NULL;
        char dp[KS_U128_DEC_LEN + 1] = "0", cp[KS_U128_DEC_LEN + 1] = "0";
        char dn[KS_U128_DEC_LEN + 1] = "0", cn[KS_U128_DEC_LEN + 1] = "0";
        char ledger_no[16];
        ks_u128 debits = 0, credits = 0;

        if (t != NULL) {
                debits = ks_u128_of(t->debits_posted_hi, t->debits_posted);
                credits = ks_u128_of(t->credits_posted_hi, t->credits_posted);
                ks_u128_to_dec(debits, dp);
                ks_u128_to_dec(credits, cp);
                ks_u128_to_dec(ks_u128_of(t->debits_pending_hi, t->debits_pending), dn);
                ks_u128_to_dec(ks_u128_of(t->credits_pending_hi, t->credits_pending), cn);
        }
        snprintf(ledger_no, sizeof(ledger_no), "%d", cur->numeric);
        listed *d = add(r, "unbalanced_ledger", "ledger", ledger_no, cur, clamp_u128(debits),
                        clamp_u128(credits));
        if (d != NULL && tb == NULL) {
                snprintf(d->detail, sizeof(d->detail), "ledger %d: its totals pass 2^128 - 1",
                         cur->numeric);
        } else if (d != NULL) {
                snprintf(d->detail, sizeof(d->detail),
                         "ledger %d: debits posted %s, credits posted %s, debits pending %s,"
                         " credits pending %s",
                         cur->numeric, dp, cp, dn, cn);
        }
}

/* Each currency's ledger: its totals cover every account, so one page says if it balances. */
static int check_balances(recon *r)
{
        for (size_t i = 0; i < r->n_currencies; i++) {
                Keelson__Ledger__V1__GetTrialBalanceRequest req =
                    KEELSON__LEDGER__V1__GET_TRIAL_BALANCE_REQUEST__INIT;
                Keelson__Ledger__V1__GetTrialBalanceResponse *resp = NULL;
                req.ledger = (uint32_t)r->currencies[i]->numeric;
                req.limit = 1;
                int rc = ledger(r, "GetTrialBalance", &req.base,
                                &keelson__ledger__v1__get_trial_balance_response__descriptor,
                                (ProtobufCMessage **)&resp, KS_OUT_OF_RANGE);
                if (rc == KS_OUT_OF_RANGE) {
                        unbalanced(r, r->currencies[i], NULL); /* its sums pass 2^128 - 1 */
                        continue;
                }
                if (rc != KS_OK) {
                        return rc;
                }
                if (!resp->balanced) {
                        unbalanced(r, r->currencies[i], resp);
                }
                protobuf_c_message_free_unpacked(&resp->base, NULL);
        }
        return KS_OK;
}

/* ---- 3: receivables ------------------------------------------------------------------------- */

static ks_u128 account_id_of(const account_pb *a)
{
        return ks_u128_of(a->id_hi, a->id);
}

static int account_cmp(const void *a, const void *b)
{
        ks_u128 x = account_id_of(*(account_pb *const *)a);
        ks_u128 y = account_id_of(*(account_pb *const *)b);

        return x < y ? -1 : x > y;
}

static const account_pb *account_find(account_pb **found, size_t n, ks_u128 id)
{
        account_pb key = {.id = ks_u128_lo(id), .id_hi = ks_u128_hi(id)}, *k = &key;
        account_pb **hit = bsearch(&k, found, n, sizeof(found[0]), account_cmp);

        return hit != NULL ? *hit : NULL;
}

/* debits_posted - credits_posted of a (0 when the ledger has no such account). */
static __int128 net_debits(const account_pb *a)
{
        if (a == NULL) {
                return 0;
        }
        /* Each side is far below 2^127 for int64 amounts; the difference fits. */
        return (__int128)ks_u128_of(a->debits_posted_hi, a->debits_posted) -
               (__int128)ks_u128_of(a->credits_posted_hi, a->credits_posted);
}

/* LookupAccounts of customers [first, first + n): their receivable and credit accounts. */
static int lookup_accounts(recon *r, size_t first, size_t n)
{
        Keelson__Ledger__V1__LookupAccountsRequest req =
            KEELSON__LEDGER__V1__LOOKUP_ACCOUNTS_REQUEST__INIT;
        Keelson__Ledger__V1__LookupAccountsResponse *resp = NULL;
        int rc;

        KS_ASSERT(2 * n <= IDS_PER_CALL);
        for (size_t i = 0; i < n; i++) {
                const customer *c = &r->customers[first + i];
                ks_u128 a = bl_account_id(BL_ACCT_RECEIVABLE, c->currency, c->id);
                ks_u128 b = bl_account_id(BL_ACCT_CUSTOMER_CREDIT, c->currency, c->id);
                r->ids_lo[2 * i] = ks_u128_lo(a);
                r->ids_hi[2 * i] = ks_u128_hi(a);
                r->ids_lo[2 * i + 1] = ks_u128_lo(b);
                r->ids_hi[2 * i + 1] = ks_u128_hi(b);
        }
        req.ids = r->ids_lo;
        req.ids_hi = r->ids_hi;
        req.n_ids = req.n_ids_hi = 2 * n;
        if ((rc = ledger(r, "LookupAccounts", &req.base,
                         &keelson__ledger__v1__lookup_accounts_response__descriptor,
                         (ProtobufCMessage **)&resp, KS_OK)) != KS_OK) {
                return rc;
        }
        qsort(resp->accounts, resp->n_accounts, sizeof(resp->accounts[0]), account_cmp);
        for (size_t i = 0; i < n; i++) {
                customer *c = &r->customers[first + i];
                const account_pb *a = account_find(resp->accounts, resp->n_accounts,
                                                   ks_u128_of(r->ids_hi[2 * i], r->ids_lo[2 * i]));
                const account_pb *b =
                    account_find(resp->accounts, resp->n_accounts,
                                 ks_u128_of(r->ids_hi[2 * i + 1], r->ids_lo[2 * i + 1]));
                c->receivable = net_debits(a);
                c->credit = -net_debits(b);
                c->have_receivable = a != NULL;
                c->have_credit = b != NULL;
        }
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return KS_OK;
}

static int read_accounts(recon *r)
{
        const size_t per_call = IDS_PER_CALL / 2;

        for (size_t first = 0; first < r->n_customers; first += per_call) {
                size_t n = r->n_customers - first < per_call ? r->n_customers - first : per_call;
                int rc = lookup_accounts(r, first, n);
                if (rc != KS_OK) {
                        return rc;
                }
        }
        return KS_OK;
}

static void receivable_mismatch(recon *r, const customer *c, const char *what, int64_t expected,
                                __int128 found, bool have, const char *said)
{
        listed *d =
            add(r, "receivable_mismatch", "customer", c->id, c->currency, expected, clamp64(found));

        if (d != NULL) {
                snprintf(d->detail, sizeof(d->detail), "%s: the ledger %s %lld, billing %s %lld%s",
                         what, what[0] == 'r' ? "holds a debit balance of" : "holds a credit of",
                         (long long)clamp64(found), said, (long long)expected,
                         have ? "" : " (the ledger has no such account)");
        }
}

static void check_receivables(recon *r)
{
        for (size_t i = 0; i < r->n_customers; i++) {
                const customer *c = &r->customers[i];
                if (c->receivable != (__int128)c->owed) {
                        receivable_mismatch(r, c, "receivable", c->owed, c->receivable,
                                            c->have_receivable, "says its open invoices owe");
                }
                if (c->credit != (__int128)c->credit_balance) {
                        receivable_mismatch(r, c, "customer credit", c->credit_balance, c->credit,
                                            c->have_credit, "says its credit balance is");
                }
        }
}

/* ---- the method ----------------------------------------------------------------------------- */

static int reply(recon *r)
{
        Keelson__Billing__V1__GetReconciliationResponse m =
            KEELSON__BILLING__V1__GET_RECONCILIATION_RESPONSE__INIT;
        discrepancy_pb *ptrs[LISTED_MAX];
        int64_t arrived = r->end.count - r->start.count;

        for (size_t i = 0; i < r->n_list; i++) {
                ptrs[i] = &r->list[i].m;
        }
        m.invoices = r->invoices;
        m.payments = r->payments;
        m.credit_notes = r->credit_notes;
        m.transfers_expected = r->expected;
        m.transfers_found = r->found;
        m.chains = r->chains;
        /* Queued at the start, and any that arrived while the ledger was read. */
        m.postings_pending = r->start.queued + (arrived > 0 ? arrived : 0);
        m.discrepancies = ptrs;
        m.n_discrepancies = r->n_list;
        m.discrepancies_total = r->total;
        m.checked_at_unix_ms = r->checked_ms;
        return ks_call_reply(r->call, &m.base);
}

/* Whether the ledger held every posting of the rows read (step 4). */
static bool settled(const recon *r)
{
        return r->start.queued == 0 && r->end.count == r->start.count &&
               r->end.max_id == r->start.max_id;
}

static int run(recon *r)
{
        int rc;

        if ((rc = bl_tx_run(r->call, read_tx, r)) != KS_OK) {
                return rc;
        }
        r->ids_lo = calloc(IDS_PER_CALL, sizeof(*r->ids_lo));
        r->ids_hi = calloc(IDS_PER_CALL, sizeof(*r->ids_hi));
        if (r->ids_lo == NULL || r->ids_hi == NULL) {
                return ks_call_oom(r->call);
        }
        if ((rc = check_transfers(r)) != KS_OK || (rc = check_balances(r)) != KS_OK) {
                return rc;
        }
        if (r->start.queued == 0 && (rc = read_accounts(r)) != KS_OK) {
                return rc;
        }
        if ((rc = bl_tx_run(r->call, count_tx, r)) != KS_OK) {
                return rc;
        }
        if (settled(r)) {
                check_receivables(r);
        }
        return reply(r);
}

int bl_get_reconciliation(ks_call *call)
{
        const Keelson__Billing__V1__GetReconciliationRequest *in = (const void *)call->in;
        recon *r;
        int rc;

        if (in->from_unix_ms < 0 || in->to_unix_ms < 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "from_unix_ms and to_unix_ms: 0 (no bound) or a time");
        }
        if (in->to_unix_ms > 0 && in->from_unix_ms >= in->to_unix_ms) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "from_unix_ms must be before to_unix_ms");
        }
        if ((r = calloc(1, sizeof(*r))) == NULL) {
                return ks_call_oom(call);
        }
        r->call = call;
        r->from_ms = in->from_unix_ms;
        r->to_ms = in->to_unix_ms;
        r->checked_ms = ks_now_ms();
        rc = run(r);
        free(r->facts);
        free(r->customers);
        free(r->list);
        free(r->ids_lo);
        free(r->ids_hi);
        free(r);
        return rc;
}
