/*
 * Billing in the ledger: billing's chart of accounts, the ids of its
 * accounts and transfers, and the linked chain of transfers each billing
 * fact posts. Pure (no I/O, no clock) but for bl_posting_queue, which
 * queues a chain in billing.postings in the transaction of its fact; the
 * relay (relay.c) sends it, reconcile.c checks it. docs/api.md copies
 * these rules ("Billing in the ledger").
 *
 * Accounts, per tenant and currency (the tenant's own ledger):
 *   ledger         the currency's ISO 4217 numeric code (USD 840)
 *   code           the kind: 1 receivable (per customer: what it owes),
 *                  2 revenue, 3 tax payable, 4 cash, 5 customer credit (per
 *                  customer: credit it holds), 6 bad debt
 *   user_data_128  the customer's uuid as a number (its 16 bytes,
 *                  big-endian) for the per-customer kinds 1 and 5; 0 else
 *   flags          0: no balance limit (a limit could refuse a chain, and a
 *                  refused transfer's id is spent for good)
 *   id             the first 16 bytes of SHA-256 of
 *                  "keelson.billing/account/<code>/<CUR>", followed by
 *                  "/<customer uuid>" for kinds 1 and 5, read big-endian
 *                  ("keelson.billing/account/1/USD/0b7e...": <code> in
 *                  decimal, <CUR> the alphabetic code, the uuid in lower case)
 *
 * Transfers: id = the same over "keelson.billing/transfer/<source type>/
 * <source uuid>/<index>", where the source types are 1 invoice finalized,
 * 2 payment, 3 credit note, 4 invoice voided, 5 invoice marked
 * uncollectible, the source is the invoice, payment or credit note, and
 * <index> is the transfer's place in its type's full chain below (its code
 * minus the first code of the type: 0 for 101, 3 for 104), so a transfer's
 * id never moves when another of its chain is skipped. An id that comes out
 * 0 or 2^128-1 (which SHA-256 never gives in practice) has its lowest bit
 * flipped. ledger = the currency's numeric code, code as below,
 * user_data_128 = the source's uuid as a number, user_data_64 = the source
 * type, flags = linked (1) on every transfer of a chain but its last,
 * timeout 0, pending_id 0.
 *
 * Chains, in this order; a transfer of amount 0 is left out, and one whose
 * amount is negative (lines can be credits) swaps its debit and credit
 * accounts and takes the absolute value:
 *   invoice finalized (subtotal S, tax T, total S + T, balance applied A >= 0)
 *     101 receivable -> revenue S (debit, then credit)
 *     102 receivable -> tax payable T
 *     103 customer credit -> receivable A
 *     104 receivable -> customer credit -total, when the total is below 0
 *   payment P: 111 cash -> receivable P (cash -> bad debt when the invoice
 *     was uncollectible)
 *   credit note (amount = subtotal + tax): 121 revenue -> X subtotal,
 *     122 tax payable -> X tax; X = customer credit for a paid invoice's
 *     note (to the customer's balance), else receivable; a refund (a paid
 *     invoice's note paid back, refunded R = its amount) adds 123 customer
 *     credit -> cash R
 *   invoice voided (its S, T, A): 131 revenue -> X S, 132 tax payable -> X T,
 *     133 X -> customer credit A; X = bad debt when it was uncollectible,
 *     else receivable
 *   invoice marked uncollectible (what remained R): 141 bad debt ->
 *     receivable R
 * A fact whose transfers are all 0 posts nothing. Each transfer debits and
 * credits one amount, so every chain balances; what each fact leaves on a
 * customer's receivable is what the invoice says it owes (amount_due -
 * amount_paid - amount_credited of its open invoices).
 */
#include "billing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_crypto.h"
#include "ks_log.h"
#include "ks_u128.h"

#define ID_TEXT_MAX 128 /* the longest hashed text is 88 bytes */

typedef Keelson__Ledger__V1__Transfer lg_transfer_pb;
typedef Keelson__Ledger__V1__Account lg_account_pb;

/* A transaction's postings, in the order they were queued (the identity follows it). */
static const char sql_insert[] =
    "INSERT INTO billing.postings (tenant_id, source_type, source_id, currency, n_transfers,"
    " transfers, accounts) SELECT billing.ctx_tenant(), t, s, c, n, x, a FROM unnest($1::int2[],"
    " $2::uuid[], $3::text[], $4::int4[], $5::bytea[], $6::bytea[]) WITH ORDINALITY"
    " AS p(t, s, c, n, x, a, o) ORDER BY o";

/* ---- ids ------------------------------------------------------------------------- */

static bl_u128 id_of_text(const char *text, int len)
{
        uint8_t h[KS_SHA256_BYTES];
        bl_u128 v = 0;

        KS_ASSERT(len > 0 && len < ID_TEXT_MAX);
        ks_sha256(text, (size_t)len, h);
        for (int i = 0; i < 16; i++) {
                v = (v << 8) | h[i];
        }
        if (v == 0 || v == KS_U128_MAX) {
                v ^= 1; /* the ledger's reserved ids */
        }
        return v;
}

static bool per_customer(bl_account_kind kind)
{
        return kind == BL_ACCT_RECEIVABLE || kind == BL_ACCT_CUSTOMER_CREDIT;
}

static bool kind_valid(bl_account_kind kind)
{
        return kind >= BL_ACCT_RECEIVABLE && kind <= BL_ACCT_BAD_DEBT;
}

/* A uuid in its canonical text (lower case): the same id whatever case it came in. */
static bool uuid_canonical(const char *s, char out[BL_UUID_LEN + 1], bl_u128 *v)
{
        ks_u128 u;

        if (ks_u128_from_uuid(s, &u) != 0) {
                return false;
        }
        ks_u128_to_uuid(u, out);
        if (v != NULL) {
                *v = u;
        }
        return true;
}

bl_u128 bl_account_id(bl_account_kind kind, const bl_currency *cur, const char *customer_id)
{
        char text[ID_TEXT_MAX], cust[BL_UUID_LEN + 1];
        int len;

        KS_ASSERT(kind_valid(kind) && cur != NULL);
        if (per_customer(kind)) {
                /* Callers pass a checked uuid (bl_chain_of refuses any other). */
                bool ok = uuid_canonical(customer_id, cust, NULL);
                KS_ASSERT(ok);
                len = snprintf(text, sizeof(text), "keelson.billing/account/%d/%s/%s", (int)kind,
                               cur->code, cust);
        } else {
                len = snprintf(text, sizeof(text), "keelson.billing/account/%d/%s", (int)kind,
                               cur->code);
        }
        return id_of_text(text, len);
}

/*
 * The hash of the source and the transfer's place; for a source with a
 * time-ordered id (version 7: every source billing has made since it
 * made such ids), the source's first 48 bits (its Unix milliseconds) in
 * place of the hash's, so that a tenant's transfers enter the ledger's key
 * in the order they were made, not at random places. Either way the id is
 * the source's and the place's alone: a resend and the reconciliation make
 * it again.
 */
static bl_u128 transfer_id(bl_source_type type, const char *source_id, int index)
{
        char text[ID_TEXT_MAX];
        int len = snprintf(text, sizeof(text), "keelson.billing/transfer/%d/%s/%d", (int)type,
                           source_id, index);
        bl_u128 id = id_of_text(text, len), src;

        if (source_id[14] == '7' && ks_u128_from_uuid(source_id, &src) == 0) {
                const bl_u128 time_bits = ~(bl_u128)0 << 80;
                id = (src & time_bits) | (id & ~time_bits);
                if (id == KS_U128_MAX) {
                        id ^= 1; /* the ledger's reserved id; 0 cannot be: the time is not */
                }
        }
        return id;
}

/* ---- chains ------------------------------------------------------------------------- */

/* The first code of each source type's chain: 101, 111, ... */
static uint16_t first_code(bl_source_type type)
{
        return (uint16_t)(101 + 10 * ((int)type - 1));
}

/*
 * Appends the transfer `code` of debit -> credit for amount: nothing for 0,
 * the accounts swapped for a negative amount. False when the amount has no
 * absolute value in int64 or the chain is full.
 */
static bool add(bl_chain *c, uint16_t code, bl_account_kind debit, bl_account_kind credit,
                int64_t amount)
{
        if (amount == 0) {
                return true;
        }
        if (amount == INT64_MIN || c->n >= BL_CHAIN_MAX) {
                return false;
        }
        if (amount < 0) {
                bl_account_kind k = debit;
                debit = credit;
                credit = k;
                amount = -amount;
        }
        bl_transfer *t = &c->t[c->n++];
        t->id = transfer_id(c->type, c->source_id, code - first_code(c->type));
        t->debit = debit;
        t->credit = credit;
        t->amount = amount;
        t->code = code;
        return true;
}

static bool invoice_chain(const bl_fact *f, bl_chain *c)
{
        int64_t total;

        if (!bl_add(f->subtotal, f->tax, &total) || total != f->total || total == INT64_MIN ||
            f->balance_applied < 0) {
                return false;
        }
        return add(c, 101, BL_ACCT_RECEIVABLE, BL_ACCT_REVENUE, f->subtotal) &&
               add(c, 102, BL_ACCT_RECEIVABLE, BL_ACCT_TAX_PAYABLE, f->tax) &&
               add(c, 103, BL_ACCT_CUSTOMER_CREDIT, BL_ACCT_RECEIVABLE, f->balance_applied) &&
               (total >= 0 || add(c, 104, BL_ACCT_RECEIVABLE, BL_ACCT_CUSTOMER_CREDIT, -total));
}

static bool payment_chain(const bl_fact *f, bl_chain *c)
{
        bl_account_kind from = f->from_uncollectible ? BL_ACCT_BAD_DEBT : BL_ACCT_RECEIVABLE;

        return add(c, 111, BL_ACCT_CASH, from, f->amount);
}

static bool credit_note_chain(const bl_fact *f, bl_chain *c)
{
        bl_account_kind to = f->to_credit ? BL_ACCT_CUSTOMER_CREDIT : BL_ACCT_RECEIVABLE;
        int64_t amount;

        if (!bl_add(f->subtotal, f->tax, &amount) || amount != f->amount ||
            (f->refunded != 0 && (f->refunded < 0 || f->refunded > f->amount || !f->to_credit))) {
                return false;
        }
        return add(c, 121, BL_ACCT_REVENUE, to, f->subtotal) &&
               add(c, 122, BL_ACCT_TAX_PAYABLE, to, f->tax) &&
               add(c, 123, BL_ACCT_CUSTOMER_CREDIT, BL_ACCT_CASH, f->refunded);
}

static bool void_chain(const bl_fact *f, bl_chain *c)
{
        bl_account_kind x = f->from_uncollectible ? BL_ACCT_BAD_DEBT : BL_ACCT_RECEIVABLE;

        if (f->balance_applied < 0) {
                return false;
        }
        return add(c, 131, BL_ACCT_REVENUE, x, f->subtotal) &&
               add(c, 132, BL_ACCT_TAX_PAYABLE, x, f->tax) &&
               add(c, 133, x, BL_ACCT_CUSTOMER_CREDIT, f->balance_applied);
}

static bool uncollectible_chain(const bl_fact *f, bl_chain *c)
{
        return add(c, 141, BL_ACCT_BAD_DEBT, BL_ACCT_RECEIVABLE, f->amount);
}

/* What every chain made here holds. */
static void chain_check(const bl_chain *c)
{
        KS_ASSERT(c->n <= BL_CHAIN_MAX && c->currency != NULL);
        for (size_t i = 0; i < c->n; i++) {
                const bl_transfer *t = &c->t[i];
                KS_ASSERT(t->amount > 0 && t->debit != t->credit);
                KS_ASSERT(kind_valid(t->debit) && kind_valid(t->credit));
                KS_ASSERT(t->id != 0 && t->id != KS_U128_MAX);
                KS_ASSERT(t->code >= first_code(c->type) && t->code < first_code(c->type) + 10);
                KS_ASSERT(i == 0 || t->code > c->t[i - 1].code); /* in order, each once */
        }
}

bool bl_chain_of(const bl_fact *f, bl_chain *out)
{
        bool ok;

        KS_ASSERT(f != NULL && out != NULL);
        memset(out, 0, sizeof(*out));
        out->type = f->type;
        out->currency = f->currency;
        if (f->currency == NULL || f->type < BL_SRC_INVOICE || f->type > BL_SRC_UNCOLLECTIBLE ||
            !uuid_canonical(f->source_id, out->source_id, NULL) ||
            !uuid_canonical(f->customer_id, out->customer_id, NULL)) {
                out->n = 0;
                return false;
        }
        switch (f->type) {
        case BL_SRC_INVOICE:
                ok = invoice_chain(f, out);
                break;
        case BL_SRC_PAYMENT:
                ok = payment_chain(f, out);
                break;
        case BL_SRC_CREDIT_NOTE:
                ok = credit_note_chain(f, out);
                break;
        case BL_SRC_VOID:
                ok = void_chain(f, out);
                break;
        default:
                ok = uncollectible_chain(f, out);
                break;
        }
        if (!ok) {
                out->n = 0;
                return false;
        }
        chain_check(out);
        return true;
}

/* ---- ledger messages -------------------------------------------------------------- */

void bl_account_of(bl_account_kind kind, const bl_currency *cur, const char *customer_id,
                   Keelson__Ledger__V1__Account *out)
{
        bl_u128 id = bl_account_id(kind, cur, customer_id), cust = 0;

        keelson__ledger__v1__account__init(out);
        if (per_customer(kind)) {
                int parsed = ks_u128_from_uuid(customer_id, &cust);
                KS_ASSERT(parsed == 0); /* bl_account_id checked it */
        }
        KS_ASSERT(cur->numeric > 0 && cur->numeric <= 999);
        out->id = ks_u128_lo(id);
        out->id_hi = ks_u128_hi(id);
        out->user_data_128 = ks_u128_lo(cust);
        out->user_data_128_hi = ks_u128_hi(cust);
        out->ledger = (uint32_t)cur->numeric;
        out->code = (uint32_t)kind;
        out->flags = 0;
}

void bl_transfer_of(const bl_chain *c, size_t i, Keelson__Ledger__V1__Transfer *out)
{
        bl_u128 src = 0;

        KS_ASSERT(c != NULL && i < c->n && c->currency != NULL);
        int parsed = ks_u128_from_uuid(c->source_id, &src);
        KS_ASSERT(parsed == 0); /* bl_chain_of made it canonical */
        const bl_transfer *t = &c->t[i];
        bl_u128 debit = bl_account_id(t->debit, c->currency, c->customer_id);
        bl_u128 credit = bl_account_id(t->credit, c->currency, c->customer_id);

        keelson__ledger__v1__transfer__init(out);
        out->id = ks_u128_lo(t->id);
        out->id_hi = ks_u128_hi(t->id);
        out->debit_account_id = ks_u128_lo(debit);
        out->debit_account_id_hi = ks_u128_hi(debit);
        out->credit_account_id = ks_u128_lo(credit);
        out->credit_account_id_hi = ks_u128_hi(credit);
        out->amount = (uint64_t)t->amount;
        out->amount_hi = 0;
        out->user_data_128 = ks_u128_lo(src);
        out->user_data_128_hi = ks_u128_hi(src);
        out->user_data_64 = (uint64_t)c->type;
        out->ledger = (uint32_t)c->currency->numeric;
        out->code = t->code;
        out->flags = i + 1 < c->n ? KEELSON__LEDGER__V1__TRANSFER_FLAG__TRANSFER_FLAG_LINKED : 0;
        out->timeout = 0;
        out->pending_id = 0;
        out->pending_id_hi = 0;
}

/* ---- the queue ----------------------------------------------------------------------- */

/* A message packed, as bytea text (malloc'ed); NULL when out of memory. */
static char *packed_text(const ProtobufCMessage *m)
{
        size_t len = protobuf_c_message_get_packed_size(m);
        uint8_t *buf = malloc(len > 0 ? len : 1);
        char *text;

        if (buf == NULL) {
                return NULL;
        }
        size_t packed = protobuf_c_message_pack(m, buf);
        KS_ASSERT(packed == len);
        text = ks_pg_bytea_text(buf, len);
        free(buf);
        return text;
}

/* The chain's transfers and the distinct accounts they touch, packed. */
static int pack_chain(const bl_chain *c, char **transfers, char **accounts)
{
        lg_transfer_pb t[BL_CHAIN_MAX], *tp[BL_CHAIN_MAX];
        lg_account_pb a[2 * BL_CHAIN_MAX], *ap[2 * BL_CHAIN_MAX];
        bool seen[BL_ACCT_BAD_DEBT + 1] = {false};
        Keelson__Ledger__V1__CreateTransfersRequest treq =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;
        Keelson__Ledger__V1__CreateAccountsRequest areq =
            KEELSON__LEDGER__V1__CREATE_ACCOUNTS_REQUEST__INIT;
        size_t na = 0;

        for (size_t i = 0; i < c->n; i++) {
                bl_account_kind kinds[2] = {c->t[i].debit, c->t[i].credit};
                bl_transfer_of(c, i, &t[i]);
                tp[i] = &t[i];
                for (int k = 0; k < 2; k++) {
                        if (!seen[kinds[k]]) {
                                seen[kinds[k]] = true;
                                bl_account_of(kinds[k], c->currency, c->customer_id, &a[na]);
                                ap[na] = &a[na];
                                na++;
                        }
                }
        }
        treq.transfers = tp;
        treq.n_transfers = c->n;
        areq.accounts = ap;
        areq.n_accounts = na;
        *transfers = packed_text(&treq.base);
        *accounts = packed_text(&areq.base);
        return *transfers != NULL && *accounts != NULL ? KS_OK : KS_RESOURCE_EXHAUSTED;
}

int bl_posting_queue(bl_tx *tx, const bl_fact *f)
{
        char *transfers = NULL, *accounts = NULL;
        bl_chain c;

        /* tx is a billing transaction (tx.c): the posting commits with its fact, or not at all. */
        KS_ASSERT(tx != NULL && tx->conn != NULL && f != NULL);
        if (!bl_chain_of(f, &c)) {
                ks_log_error(tx->request_id, "billing fact makes no ledger chain (a bug)",
                             "{s:s, s:i, s:s}", "tenant_id", tx->tenant_id, "source_type",
                             (int)f->type, "source_id", f->source_id ? f->source_id : "");
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        if (c.n == 0) {
                return KS_OK; /* moves no money */
        }
        if (pack_chain(&c, &transfers, &accounts) != KS_OK) {
                free(transfers);
                free(accounts);
                return tx->call != NULL ? ks_call_oom(tx->call) : KS_RESOURCE_EXHAUSTED;
        }
        /* The unique key on the source refuses a second queue of one fact (a bug: the call fails).
         */
        bl_arr_int(&tx->postings[0], c.type);
        bl_arr_text(&tx->postings[1], c.source_id);
        bl_arr_text(&tx->postings[2], c.currency->code);
        bl_arr_int(&tx->postings[3], (int64_t)c.n);
        bl_arr_text(&tx->postings[4], transfers);
        bl_arr_text(&tx->postings[5], accounts);
        tx->n_postings++;
        free(transfers);
        free(accounts);
        return KS_OK;
}

int bl_postings_flush(bl_tx *tx)
{
        const char *p[6];
        int rc = KS_OK;

        if (tx->n_postings == 0) {
                return KS_OK;
        }
        for (int i = 0; i < 6 && rc == KS_OK; i++) {
                if ((p[i] = bl_arr_done(&tx->postings[i])) == NULL) {
                        rc = tx->call != NULL ? ks_call_oom(tx->call) : KS_RESOURCE_EXHAUSTED;
                }
        }
        if (rc == KS_OK) {
                rc = bl_defer(tx, sql_insert, 6, p);
        }
        bl_postings_clear(tx);
        return rc;
}

void bl_postings_clear(bl_tx *tx)
{
        for (int i = 0; i < 6; i++) {
                bl_arr_free(&tx->postings[i]);
        }
        tx->n_postings = 0;
}
