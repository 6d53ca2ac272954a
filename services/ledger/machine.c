/*
 * The ledger's state machine: TigerBeetle's create_accounts and
 * create_transfers over the rows a batch read from PostgreSQL, in memory.
 * No I/O here: the caller loads the rows (locked), runs the batch, and
 * writes back what changed.
 *
 * Checks run in the order of precedence of TigerBeetle's documentation
 * (docs/reference/requests/create_transfers.md and create_accounts.md): when
 * several results apply, the first listed is returned. Linked chains are
 * applied event by event and, when one fails, undone in reverse order
 * through an undo log (account images and pending states saved before each
 * change); the created rows of the chain are cut off the end of their
 * arrays, since a chain's rows are always the last ones added.
 */
#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"

enum { UNDO_ACCOUNT = 1, UNDO_STATUS = 2 };

struct lg_undo {
        int32_t index;
        uint8_t kind;
        uint8_t status;  /* UNDO_STATUS: the pending state before */
        lg_account acct; /* UNDO_ACCOUNT: the account before */
};

/* Where a chain started: everything after it is undone if the chain fails. */
typedef struct save_point {
        int n_accounts, n_xfers, n_hist, n_undo;
        uint64_t import_ts_max;
} save_point;

bool lg_transfer_result_transient(int r)
{
        return r == LG_TR(debit_account_not_found) || r == LG_TR(credit_account_not_found) ||
               r == LG_TR(pending_transfer_not_found) || r == LG_TR(exceeds_credits) ||
               r == LG_TR(exceeds_debits) || r == LG_TR(debit_account_already_closed) ||
               r == LG_TR(credit_account_already_closed);
}

/* ---- allocation ---------------------------------------------------------- */

void lg_batch_free(lg_batch *b)
{
        if (b == NULL) {
                return;
        }
        free(b->accounts);
        free(b->accounts_orig);
        free(b->xfers);
        free(b->failed_ids);
        free(b->failed_results);
        free(b->hist);
        free(b->undo);
        free(b->taken_ts);
        lg_map_fini(&b->account_ix);
        lg_map_fini(&b->xfer_ix);
        lg_map_fini(&b->failed_ix);
        free(b);
}

int lg_batch_new(lg_batch **out, int events_max)
{
        lg_batch *b = calloc(1, sizeof(*b));

        *out = NULL;
        if (b == NULL || events_max < 1 || events_max > LG_BATCH_MAX) {
                free(b);
                return -1;
        }
        b->events_max = events_max;
        /* CreateTransfers reads up to 4 accounts per event; CreateAccounts 2 (read + created). */
        b->accounts_max = LG_ACCOUNTS_PER_EVENT * events_max;
        b->xfers_max = 3 * events_max;  /* the batch's ids, their pending ids, created */
        b->failed_max = 2 * events_max; /* read, and new */
        b->hist_max = 2 * events_max;   /* an event changes two accounts */
        b->undo_max = 3 * events_max;   /* two accounts and one pending state per event */
        b->accounts = calloc((size_t)b->accounts_max, sizeof(*b->accounts));
        b->accounts_orig = calloc((size_t)b->accounts_max, sizeof(*b->accounts_orig));
        b->xfers = calloc((size_t)b->xfers_max, sizeof(*b->xfers));
        b->failed_ids = calloc((size_t)b->failed_max, sizeof(*b->failed_ids));
        b->failed_results = calloc((size_t)b->failed_max, sizeof(*b->failed_results));
        b->hist = calloc((size_t)b->hist_max, sizeof(*b->hist));
        b->undo = calloc((size_t)b->undo_max, sizeof(*b->undo));
        b->taken_ts = calloc((size_t)events_max, sizeof(*b->taken_ts));
        if (b->taken_ts == NULL || b->accounts == NULL || b->accounts_orig == NULL ||
            b->xfers == NULL || b->failed_ids == NULL || b->failed_results == NULL ||
            b->hist == NULL || b->undo == NULL ||
            lg_map_init(&b->account_ix, (uint32_t)b->accounts_max) != 0 ||
            lg_map_init(&b->xfer_ix, (uint32_t)b->xfers_max) != 0 ||
            lg_map_init(&b->failed_ix, (uint32_t)b->failed_max) != 0) {
                lg_batch_free(b);
                return -1;
        }
        *out = b;
        return 0;
}

void lg_batch_reset(lg_batch *b)
{
        b->n_accounts = b->n_accounts_loaded = 0;
        b->n_xfers = b->n_xfers_loaded = 0;
        b->n_failed = b->n_failed_loaded = 0;
        b->n_hist = 0;
        b->n_undo = 0;
        b->import_ts_max = 0;
        b->n_taken_ts = 0;
        lg_map_clear(&b->account_ix);
        lg_map_clear(&b->xfer_ix);
        lg_map_clear(&b->failed_ix);
}

/* ---- loading ------------------------------------------------------------- */

int lg_batch_load_account(lg_batch *b, const lg_account *a)
{
        int i = b->n_accounts;

        /* Loading ends before the first event: loaded rows precede created ones. */
        KS_ASSERT(b->n_accounts == b->n_accounts_loaded);
        if (i >= b->accounts_max || lg_map_put(&b->account_ix, a->id, i) != 0) {
                return -1;
        }
        b->accounts[i] = *a;
        b->accounts_orig[i] = *a;
        b->n_accounts = b->n_accounts_loaded = i + 1;
        return 0;
}

int lg_batch_load_transfer(lg_batch *b, const lg_transfer *t, uint8_t status,
                           uint64_t expires_at_ns, u128 pending_amount)
{
        int i = b->n_xfers;

        KS_ASSERT(b->n_xfers == b->n_xfers_loaded);
        if (lg_map_get(&b->xfer_ix, t->id) >= 0) {
                return 0; /* asked for twice (an id that is also a pending id) */
        }
        if (i >= b->xfers_max || lg_map_put(&b->xfer_ix, t->id, i) != 0) {
                return -1;
        }
        b->xfers[i] = (lg_xfer){.t = *t,
                                .pending_amount = pending_amount,
                                .expires_at_ns = expires_at_ns,
                                .status = status,
                                .status_loaded = status};
        b->n_xfers = b->n_xfers_loaded = i + 1;
        return 0;
}

int lg_batch_load_failed(lg_batch *b, u128 id, int result)
{
        int i = b->n_failed;

        KS_ASSERT(b->n_failed == b->n_failed_loaded);
        if (i >= b->failed_max || lg_map_put(&b->failed_ix, id, i) != 0) {
                return -1;
        }
        b->failed_ids[i] = id;
        b->failed_results[i] = (uint8_t)result;
        b->n_failed = b->n_failed_loaded = i + 1;
        return 0;
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return (x > y) - (x < y);
}

int lg_batch_load_import(lg_batch *b, uint64_t ts_max, const uint64_t *taken, int n)
{
        if (n < 0 || n > b->events_max) {
                return -1;
        }
        b->import_ts_max = ts_max;
        memcpy(b->taken_ts, taken, (size_t)n * sizeof(*taken));
        qsort(b->taken_ts, (size_t)n, sizeof(*b->taken_ts), cmp_u64);
        b->n_taken_ts = n;
        return 0;
}

/* Whether an object other than the batch's kind already holds timestamp ts. */
static bool ts_taken(const lg_batch *b, uint64_t ts)
{
        return bsearch(&ts, b->taken_ts, (size_t)b->n_taken_ts, sizeof(ts), cmp_u64) != NULL;
}

/* TigerBeetle's rule for an imported event's timestamp: after its kind's latest, and free. */
static bool import_regresses(const lg_batch *b, uint64_t ts)
{
        return ts <= b->import_ts_max || ts_taken(b, ts);
}

bool lg_batch_account_changed(const lg_batch *b, int i)
{
        const lg_account *a = &b->accounts[i], *o = &b->accounts_orig[i];

        KS_ASSERT(i < b->n_accounts_loaded);
        return a->debits_pending != o->debits_pending || a->debits_posted != o->debits_posted ||
               a->credits_pending != o->credits_pending || a->credits_posted != o->credits_posted ||
               a->flags != o->flags;
}

/* ---- undo log and chains -------------------------------------------------- */

static lg_account *account_get(lg_batch *b, u128 id)
{
        int32_t i = lg_map_get(&b->account_ix, id);

        return i >= 0 ? &b->accounts[i] : NULL;
}

static lg_xfer *xfer_get(lg_batch *b, u128 id)
{
        int32_t i = lg_map_get(&b->xfer_ix, id);

        return i >= 0 ? &b->xfers[i] : NULL;
}

/* Saves an account's image before it changes. */
static void undo_account(lg_batch *b, const lg_account *a)
{
        KS_ASSERT(b->n_undo < b->undo_max);
        lg_undo *u = &b->undo[b->n_undo++];
        u->kind = UNDO_ACCOUNT;
        u->index = (int32_t)(a - b->accounts);
        u->acct = *a;
}

static void undo_status(lg_batch *b, const lg_xfer *x)
{
        KS_ASSERT(b->n_undo < b->undo_max);
        lg_undo *u = &b->undo[b->n_undo++];
        u->kind = UNDO_STATUS;
        u->index = (int32_t)(x - b->xfers);
        u->status = x->status;
}

static void save(const lg_batch *b, save_point *sp)
{
        sp->n_accounts = b->n_accounts;
        sp->n_xfers = b->n_xfers;
        sp->n_hist = b->n_hist;
        sp->n_undo = b->n_undo;
        sp->import_ts_max = b->import_ts_max;
}

/* Undoes everything since sp, newest first (TigerBeetle rolls back in LIFO order). */
static void rollback(lg_batch *b, const save_point *sp)
{
        while (b->n_undo > sp->n_undo) {
                const lg_undo *u = &b->undo[--b->n_undo];
                if (u->kind == UNDO_ACCOUNT) {
                        b->accounts[u->index] = u->acct;
                } else {
                        b->xfers[u->index].status = u->status;
                }
        }
        while (b->n_xfers > sp->n_xfers) {
                b->n_xfers--;
                (void)lg_map_put(&b->xfer_ix, b->xfers[b->n_xfers].t.id, -1);
        }
        while (b->n_accounts > sp->n_accounts) {
                b->n_accounts--;
                (void)lg_map_put(&b->account_ix, b->accounts[b->n_accounts].id, -1);
        }
        b->n_hist = sp->n_hist;
        b->import_ts_max = sp->import_ts_max;
}

typedef int (*event_fn)(lg_batch *b, const void *events, int i, uint64_t ts);

/* What a run needs that differs between accounts and transfers: codes and accessors. */
typedef struct run_kind {
        uint32_t linked, imported; /* the flags' bits */
        uint32_t (*flags)(const void *events, int i);
        uint64_t (*timestamp)(const void *events, int i);
        event_fn create;
        int chain_open, event_failed, exists;
        int imported_expected, imported_not_expected, ts_out_of_range, ts_must_not_advance;
        int ts_must_be_zero;
} run_kind;

/*
 * The checks of TigerBeetle's execute loop on an event's timestamp: the
 * first event decides whether the batch imports; an imported event brings a
 * timestamp in range and before now (the batch's last timestamp), any other
 * brings 0.
 */
static int check_timestamp(const run_kind *k, uint32_t flags, uint64_t ts, bool batch_imports,
                           uint64_t now)
{
        bool imported = (flags & k->imported) != 0;

        if (imported != batch_imports) {
                return imported ? k->imported_not_expected : k->imported_expected;
        }
        if (!imported) {
                return ts != 0 ? k->ts_must_be_zero : 0;
        }
        if (ts < LG_TIMESTAMP_MIN || ts > LG_TIMESTAMP_MAX) {
                return k->ts_out_of_range;
        }
        return ts >= now ? k->ts_must_not_advance : 0;
}

/*
 * TigerBeetle's execute loop: a chain starts at the first linked event and
 * ends at the first unlinked one. A linked last event leaves the chain open
 * (linked_event_chain_open). Once a chain fails, its earlier events are
 * undone and answer linked_event_failed, and so do its later ones.
 */
static void run_events(lg_batch *b, const void *events, int n, uint64_t base_ts, const run_kind *k,
                       uint8_t *results, uint64_t *timestamps)
{
        bool batch_imports = n > 0 && (k->flags(events, 0) & k->imported) != 0;
        uint64_t now = base_ts + (uint64_t)n - 1;
        save_point sp = {0};
        int chain = -1;
        bool broken = false;

        for (int i = 0; i < n; i++) {
                uint32_t flags = k->flags(events, i);
                bool is_linked = (flags & k->linked) != 0;
                uint64_t asked = k->timestamp(events, i);
                uint64_t ts = (flags & k->imported) ? asked : base_ts + (uint64_t)i;
                int r;

                if (is_linked && chain < 0) {
                        chain = i;
                        save(b, &sp);
                }
                b->exists_ts = 0;
                if (is_linked && i == n - 1) {
                        r = k->chain_open;
                } else if (broken) {
                        r = k->event_failed;
                } else if ((r = check_timestamp(k, flags, asked, batch_imports, now)) == 0) {
                        r = k->create(b, events, i, ts);
                }
                results[i] = (uint8_t)r;
                if (timestamps != NULL) { /* a chain's rollback keeps these */
                        timestamps[i] = r == k->exists && b->exists_ts != 0 ? b->exists_ts : ts;
                }
                if (r != 0 && chain >= 0 && !broken) {
                        broken = true;
                        rollback(b, &sp);
                        for (int j = chain; j < i; j++) {
                                results[j] = (uint8_t)k->event_failed;
                        }
                }
                if (!is_linked) {
                        chain = -1;
                        broken = false;
                }
        }
}

/* ---- accounts ------------------------------------------------------------ */

static int account_exists(const lg_account *a, const lg_account *e)
{
        /* closed is state that transfers change, not part of what was asked for. */
        if ((a->flags & ~(uint32_t)LG_AF_CLOSED) != (e->flags & ~(uint32_t)LG_AF_CLOSED)) {
                return LG_AR(exists_with_different_flags);
        }
        if (a->user_data_128 != e->user_data_128) {
                return LG_AR(exists_with_different_user_data_128);
        }
        if (a->user_data_64 != e->user_data_64) {
                return LG_AR(exists_with_different_user_data_64);
        }
        if (a->user_data_32 != e->user_data_32) {
                return LG_AR(exists_with_different_user_data_32);
        }
        if (a->ledger != e->ledger) {
                return LG_AR(exists_with_different_ledger);
        }
        if (a->code != e->code) {
                return LG_AR(exists_with_different_code);
        }
        return LG_AR(exists);
}

/* The checks before the existing-id check (TigerBeetle's order since 0.16.4). */
static int account_validate_id(const lg_account *a)
{
        if ((a->flags & ~(uint32_t)LG_AF_KNOWN) != 0) {
                return LG_AR(reserved_flag);
        }
        if (a->id == 0) {
                return LG_AR(id_must_not_be_zero);
        }
        if (a->id == U128_MAX) {
                return LG_AR(id_must_not_be_int_max);
        }
        return LG_AR(ok);
}

/* The checks of a new account, after the existing-id check. */
static int account_validate(const lg_account *a)
{
        if ((a->flags & LG_AF_DEBITS_MUST_NOT_EXCEED_CREDITS) &&
            (a->flags & LG_AF_CREDITS_MUST_NOT_EXCEED_DEBITS)) {
                return LG_AR(flags_are_mutually_exclusive);
        }
        if (a->debits_pending != 0) {
                return LG_AR(debits_pending_must_be_zero);
        }
        if (a->debits_posted != 0) {
                return LG_AR(debits_posted_must_be_zero);
        }
        if (a->credits_pending != 0) {
                return LG_AR(credits_pending_must_be_zero);
        }
        if (a->credits_posted != 0) {
                return LG_AR(credits_posted_must_be_zero);
        }
        if (a->ledger == 0) {
                return LG_AR(ledger_must_not_be_zero);
        }
        if (a->code == 0) {
                return LG_AR(code_must_not_be_zero);
        }
        return LG_AR(ok);
}

static int create_account(lg_batch *b, const void *events, int i, uint64_t ts)
{
        const lg_account *a = &((const lg_account *)events)[i];
        const lg_account *e;
        int r = account_validate_id(a);

        if (r != LG_AR(ok)) {
                return r;
        }
        if ((e = account_get(b, a->id)) != NULL) {
                b->exists_ts = e->timestamp;
                return account_exists(a, e); /* balances are not compared */
        }
        if ((r = account_validate(a)) != LG_AR(ok)) {
                return r;
        }
        /* After the existing-id check, so that a resent import still answers exists. */
        bool imported = (a->flags & LG_AF_IMPORTED) != 0;
        if (imported && import_regresses(b, ts)) {
                return LG_AR(imported_event_timestamp_must_not_regress);
        }
        if (imported) {
                b->import_ts_max = ts;
        }
        KS_ASSERT(b->n_accounts < b->accounts_max);
        int k = b->n_accounts++;
        b->accounts[k] = *a;
        b->accounts[k].timestamp = ts;
        if (lg_map_put(&b->account_ix, a->id, k) != 0) {
                ks_assert_fail("account map full", __FILE__, __LINE__);
        }
        return LG_AR(ok);
}

static uint32_t account_flags(const void *events, int i)
{
        return ((const lg_account *)events)[i].flags;
}

static uint64_t account_timestamp(const void *events, int i)
{
        return ((const lg_account *)events)[i].timestamp;
}

void lg_create_accounts(lg_batch *b, const lg_account *events, int n, uint64_t base_ts,
                        uint8_t *results, uint64_t *timestamps)
{
        static const run_kind kind = {
            .linked = LG_AF_LINKED,
            .imported = LG_AF_IMPORTED,
            .flags = account_flags,
            .timestamp = account_timestamp,
            .create = create_account,
            .chain_open = LG_AR(linked_event_chain_open),
            .event_failed = LG_AR(linked_event_failed),
            .exists = LG_AR(exists),
            .imported_expected = LG_AR(imported_event_expected),
            .imported_not_expected = LG_AR(imported_event_not_expected),
            .ts_out_of_range = LG_AR(imported_event_timestamp_out_of_range),
            .ts_must_not_advance = LG_AR(imported_event_timestamp_must_not_advance),
            .ts_must_be_zero = LG_AR(timestamp_must_be_zero),
        };
        KS_ASSERT(n >= 0 && n <= b->events_max);
        run_events(b, events, n, base_ts, &kind, results, timestamps);
}

/* ---- transfers: checks ---------------------------------------------------- */

/*
 * For a post or void, a field asked as 0 means the pending transfer's value
 * (pending, when known): it differs when that value is not the stored one.
 * A post of user_data_128 5 over a pending transfer's 0, resent without it,
 * asks for 0 and differs from the 5 stored (as in TigerBeetle).
 */
static bool differs(u128 asked, u128 stored, const lg_transfer *pending, u128 pending_value)
{
        if (pending != NULL && asked == 0) {
                asked = pending_value;
        }
        return asked != stored;
}

static int exists_amount(const lg_transfer *t, const lg_xfer *e)
{
        const lg_transfer *s = &e->t;

        if (s->flags & (LG_TF_BALANCING_DEBIT | LG_TF_BALANCING_CREDIT)) {
                /* The amount asked is a maximum: the stored one may be less. */
                return t->amount < s->amount;
        }
        if (s->flags & LG_TF_POST) {
                /* Exactly, as TigerBeetle's code does (its test T105): U128_MAX asks for
                 * the pending amount, and a full post resent with more differs. */
                return (t->amount == U128_MAX ? e->pending_amount : t->amount) != s->amount;
        }
        if (s->flags & LG_TF_VOID) { /* a void stores the pending amount; 0 asks for it */
                return t->amount != 0 && t->amount != s->amount;
        }
        return t->amount != s->amount;
}

static int transfer_exists(lg_batch *b, const lg_transfer *t, const lg_xfer *e)
{
        const lg_transfer *s = &e->t;
        bool pv = (s->flags & (LG_TF_POST | LG_TF_VOID)) != 0;
        const lg_xfer *px = pv ? xfer_get(b, s->pending_id) : NULL;
        /* Without its pending transfer (not loaded), 0 stands for the stored value. */
        const lg_transfer *p = px != NULL ? &px->t : (pv ? s : NULL);

        if (t->flags != s->flags) {
                return LG_TR(exists_with_different_flags);
        }
        if (t->pending_id != s->pending_id) {
                return LG_TR(exists_with_different_pending_id);
        }
        if (t->timeout != s->timeout) {
                return LG_TR(exists_with_different_timeout);
        }
        if (differs(t->debit_account_id, s->debit_account_id, p,
                    p != NULL ? p->debit_account_id : 0)) {
                return LG_TR(exists_with_different_debit_account_id);
        }
        if (differs(t->credit_account_id, s->credit_account_id, p,
                    p != NULL ? p->credit_account_id : 0)) {
                return LG_TR(exists_with_different_credit_account_id);
        }
        if (exists_amount(t, e)) {
                return LG_TR(exists_with_different_amount);
        }
        if (differs(t->user_data_128, s->user_data_128, p, p != NULL ? p->user_data_128 : 0)) {
                return LG_TR(exists_with_different_user_data_128);
        }
        if (differs(t->user_data_64, s->user_data_64, p, p != NULL ? p->user_data_64 : 0)) {
                return LG_TR(exists_with_different_user_data_64);
        }
        if (differs(t->user_data_32, s->user_data_32, p, p != NULL ? p->user_data_32 : 0)) {
                return LG_TR(exists_with_different_user_data_32);
        }
        if (differs(t->ledger, s->ledger, p, p != NULL ? p->ledger : 0)) {
                return LG_TR(exists_with_different_ledger);
        }
        if (differs(t->code, s->code, p, p != NULL ? p->code : 0)) {
                return LG_TR(exists_with_different_code);
        }
        return LG_TR(exists);
}

static bool flags_exclusive(uint32_t f)
{
        uint32_t pv = f & (LG_TF_POST | LG_TF_VOID);

        return ((f & LG_TF_PENDING) && pv) || pv == (LG_TF_POST | LG_TF_VOID) ||
               (pv && (f & (LG_TF_BALANCING_DEBIT | LG_TF_BALANCING_CREDIT | LG_TF_CLOSING_DEBIT |
                            LG_TF_CLOSING_CREDIT)));
}

/* The checks that need no row, in the documented order after id_already_failed. */
static int transfer_validate(const lg_transfer *t)
{
        bool pv = (t->flags & (LG_TF_POST | LG_TF_VOID)) != 0;

        if (flags_exclusive(t->flags)) {
                return LG_TR(flags_are_mutually_exclusive);
        }
        if (!pv && t->debit_account_id == 0) {
                return LG_TR(debit_account_id_must_not_be_zero);
        }
        if (!pv && t->debit_account_id == U128_MAX) {
                return LG_TR(debit_account_id_must_not_be_int_max);
        }
        if (!pv && t->credit_account_id == 0) {
                return LG_TR(credit_account_id_must_not_be_zero);
        }
        if (!pv && t->credit_account_id == U128_MAX) {
                return LG_TR(credit_account_id_must_not_be_int_max);
        }
        /* A post or void names no accounts of its own: a mismatch with its pending
         * transfer is pending_transfer_has_different_* (check_pending). */
        if (!pv && t->debit_account_id == t->credit_account_id) {
                return LG_TR(accounts_must_be_different);
        }
        if (!pv && t->pending_id != 0) {
                return LG_TR(pending_id_must_be_zero);
        }
        if (pv && t->pending_id == 0) {
                return LG_TR(pending_id_must_not_be_zero);
        }
        if (pv && t->pending_id == U128_MAX) {
                return LG_TR(pending_id_must_not_be_int_max);
        }
        if (pv && t->pending_id == t->id) {
                return LG_TR(pending_id_must_be_different);
        }
        if (!(t->flags & LG_TF_PENDING) && t->timeout != 0) {
                return LG_TR(timeout_reserved_for_pending_transfer);
        }
        if ((t->flags & (LG_TF_CLOSING_DEBIT | LG_TF_CLOSING_CREDIT)) &&
            !(t->flags & LG_TF_PENDING)) {
                return LG_TR(closing_transfer_must_be_pending);
        }
        if (!pv && t->ledger == 0) {
                return LG_TR(ledger_must_not_be_zero);
        }
        if (!pv && t->code == 0) {
                return LG_TR(code_must_not_be_zero);
        }
        return LG_TR(ok);
}

static bool add_overflows(u128 a, u128 b)
{
        return a > U128_MAX - b;
}

static bool add3_overflows(u128 a, u128 b, u128 c)
{
        return add_overflows(a, b) || add_overflows(a + b, c);
}

/* a - b, or 0 when b >= a. */
static u128 sub_floor(u128 a, u128 b)
{
        return a > b ? a - b : 0;
}

/* b + c saturating at U128_MAX: the "used" side of a balance limit. */
static u128 add_sat(u128 b, u128 c)
{
        return add_overflows(b, c) ? U128_MAX : b + c;
}

/* ---- transfers: effects --------------------------------------------------- */

static void history(lg_batch *b, const lg_account *a, const lg_transfer *t, uint8_t side,
                    uint64_t ts)
{
        if (!(a->flags & LG_AF_HISTORY)) {
                return;
        }
        KS_ASSERT(b->n_hist < b->hist_max);
        b->hist[b->n_hist++] = (lg_hist){.account_id = a->id,
                                         .transfer_id = t->id,
                                         .side = side,
                                         .debits_pending = a->debits_pending,
                                         .debits_posted = a->debits_posted,
                                         .credits_pending = a->credits_pending,
                                         .credits_posted = a->credits_posted,
                                         .timestamp = ts};
}

/* Appends a created transfer; returns it. */
static lg_xfer *add_created(lg_batch *b, const lg_transfer *t)
{
        KS_ASSERT(b->n_xfers < b->xfers_max);
        int k = b->n_xfers++;
        lg_xfer *x = &b->xfers[k];

        *x = (lg_xfer){.t = *t};
        if (lg_map_put(&b->xfer_ix, t->id, k) != 0) {
                ks_assert_fail("map full", __FILE__, __LINE__);
        }
        return x;
}

static void record_failed(lg_batch *b, u128 id, int r)
{
        if (!lg_transfer_result_transient(r)) {
                return;
        }
        KS_ASSERT(b->n_failed < b->failed_max);
        int k = b->n_failed++;
        b->failed_ids[k] = id;
        b->failed_results[k] = (uint8_t)r;
        if (lg_map_put(&b->failed_ix, id, k) != 0) {
                ks_assert_fail("map full", __FILE__, __LINE__);
        }
}

/* The limits, overflows and timeout of a single-phase or pending transfer. */
static int check_amounts(const lg_transfer *t, const lg_account *dr, const lg_account *cr,
                         u128 amount)
{
        if (t->flags & LG_TF_PENDING) {
                if (add_overflows(dr->debits_pending, amount)) {
                        return LG_TR(overflows_debits_pending);
                }
                if (add_overflows(cr->credits_pending, amount)) {
                        return LG_TR(overflows_credits_pending);
                }
        }
        /* A pending amount may be posted later: it must fit the posted sums too. */
        if (add_overflows(dr->debits_posted, amount)) {
                return LG_TR(overflows_debits_posted);
        }
        if (add_overflows(cr->credits_posted, amount)) {
                return LG_TR(overflows_credits_posted);
        }
        if (add3_overflows(dr->debits_pending, dr->debits_posted, amount)) {
                return LG_TR(overflows_debits);
        }
        if (add3_overflows(cr->credits_pending, cr->credits_posted, amount)) {
                return LG_TR(overflows_credits);
        }
        if (t->timeout != 0 &&
            t->timestamp + (uint64_t)t->timeout * LG_TIMEOUT_NS_PER_S > (uint64_t)INT64_MAX) {
                return LG_TR(overflows_timeout);
        }
        if ((dr->flags & LG_AF_DEBITS_MUST_NOT_EXCEED_CREDITS) &&
            dr->debits_pending + dr->debits_posted + amount > dr->credits_posted) {
                return LG_TR(exceeds_credits);
        }
        if ((cr->flags & LG_AF_CREDITS_MUST_NOT_EXCEED_DEBITS) &&
            cr->credits_pending + cr->credits_posted + amount > cr->debits_posted) {
                return LG_TR(exceeds_debits);
        }
        return LG_TR(ok);
}

/* What a balancing transfer may move: at most amount, within the accounts' room. */
static u128 balanced_amount(const lg_transfer *t, const lg_account *dr, const lg_account *cr)
{
        u128 amount = t->amount;

        if (t->flags & LG_TF_BALANCING_DEBIT) {
                u128 room =
                    sub_floor(dr->credits_posted, add_sat(dr->debits_pending, dr->debits_posted));
                amount = amount < room ? amount : room;
        }
        if (t->flags & LG_TF_BALANCING_CREDIT) {
                u128 room =
                    sub_floor(cr->debits_posted, add_sat(cr->credits_pending, cr->credits_posted));
                amount = amount < room ? amount : room;
        }
        return amount;
}

/* An imported single-phase or pending transfer's timestamp and timeout. */
static int check_import(const lg_batch *b, const lg_transfer *t, const lg_account *dr,
                        const lg_account *cr)
{
        if (import_regresses(b, t->timestamp)) {
                return LG_TR(imported_event_timestamp_must_not_regress);
        }
        if (t->timestamp <= dr->timestamp) {
                return LG_TR(imported_event_timestamp_must_postdate_debit_account);
        }
        if (t->timestamp <= cr->timestamp) {
                return LG_TR(imported_event_timestamp_must_postdate_credit_account);
        }
        if (t->timeout != 0) { /* no clock drives an imported transfer's expiry */
                return LG_TR(imported_event_timeout_must_be_zero);
        }
        return LG_TR(ok);
}

static int single_or_pending(lg_batch *b, lg_transfer *t)
{
        lg_account *dr = account_get(b, t->debit_account_id);
        lg_account *cr = account_get(b, t->credit_account_id);
        int r;

        if (dr == NULL) {
                return LG_TR(debit_account_not_found);
        }
        if (cr == NULL) {
                return LG_TR(credit_account_not_found);
        }
        if (dr->ledger != cr->ledger) {
                return LG_TR(accounts_must_have_the_same_ledger);
        }
        if (t->ledger != dr->ledger) {
                return LG_TR(transfer_must_have_the_same_ledger_as_accounts);
        }
        if ((t->flags & LG_TF_IMPORTED) && (r = check_import(b, t, dr, cr)) != LG_TR(ok)) {
                return r;
        }
        if (dr->flags & LG_AF_CLOSED) {
                return LG_TR(debit_account_already_closed);
        }
        if (cr->flags & LG_AF_CLOSED) {
                return LG_TR(credit_account_already_closed);
        }
        u128 amount = balanced_amount(t, dr, cr);
        if ((r = check_amounts(t, dr, cr, amount)) != LG_TR(ok)) {
                return r;
        }
        undo_account(b, dr);
        undo_account(b, cr);
        t->amount = amount;
        lg_xfer *x = add_created(b, t);
        if (t->flags & LG_TF_PENDING) {
                dr->debits_pending += amount;
                cr->credits_pending += amount;
                dr->flags |= (t->flags & LG_TF_CLOSING_DEBIT) ? LG_AF_CLOSED : 0u;
                cr->flags |= (t->flags & LG_TF_CLOSING_CREDIT) ? LG_AF_CLOSED : 0u;
                x->status = LG_PENDING_PENDING;
                x->expires_at_ns =
                    t->timeout != 0 ? t->timestamp + (uint64_t)t->timeout * LG_TIMEOUT_NS_PER_S : 0;
        } else {
                dr->debits_posted += amount;
                cr->credits_posted += amount;
        }
        history(b, dr, t, 1, t->timestamp);
        history(b, cr, t, 2, t->timestamp);
        return LG_TR(ok);
}

/* The checks of a post or void against its pending transfer p; *amount is what it moves. */
static int check_pending(const lg_transfer *t, const lg_xfer *p, u128 *amount)
{
        const lg_transfer *pt = &p->t;

        if (!(pt->flags & LG_TF_PENDING)) {
                return LG_TR(pending_transfer_not_pending);
        }
        if (t->debit_account_id != 0 && t->debit_account_id != pt->debit_account_id) {
                return LG_TR(pending_transfer_has_different_debit_account_id);
        }
        if (t->credit_account_id != 0 && t->credit_account_id != pt->credit_account_id) {
                return LG_TR(pending_transfer_has_different_credit_account_id);
        }
        if (t->ledger != 0 && t->ledger != pt->ledger) {
                return LG_TR(pending_transfer_has_different_ledger);
        }
        if (t->code != 0 && t->code != pt->code) {
                return LG_TR(pending_transfer_has_different_code);
        }
        *amount = pt->amount;
        if (t->flags & LG_TF_POST) {
                if (t->amount != U128_MAX && t->amount > pt->amount) {
                        return LG_TR(exceeds_pending_transfer_amount);
                }
                *amount = t->amount == U128_MAX ? pt->amount : t->amount;
        } else if (t->amount != 0 && t->amount > pt->amount) {
                return LG_TR(exceeds_pending_transfer_amount);
        } else if (t->amount != 0 && t->amount < pt->amount) {
                return LG_TR(pending_transfer_has_different_amount);
        }
        if (p->status == LG_PENDING_POSTED) {
                return LG_TR(pending_transfer_already_posted);
        }
        if (p->status == LG_PENDING_VOIDED) {
                return LG_TR(pending_transfer_already_voided);
        }
        /* Expired at its expiry time exactly, whether or not the sweeper got to it. */
        if (p->status == LG_PENDING_EXPIRED ||
            (p->expires_at_ns != 0 && p->expires_at_ns <= t->timestamp)) {
                return LG_TR(pending_transfer_expired);
        }
        return LG_TR(ok);
}

/*
 * A post may not touch a closed account, not even one its own pending
 * transfer closed: only a void reopens it (TigerBeetle's rule, and why a
 * closing transfer must be pending).
 */
static int check_post(const lg_account *dr, const lg_account *cr, u128 a)
{
        if (dr->flags & LG_AF_CLOSED) {
                return LG_TR(debit_account_already_closed);
        }
        if (cr->flags & LG_AF_CLOSED) {
                return LG_TR(credit_account_already_closed);
        }
        if (add_overflows(dr->debits_posted, a)) {
                return LG_TR(overflows_debits_posted);
        }
        if (add_overflows(cr->credits_posted, a)) {
                return LG_TR(overflows_credits_posted);
        }
        return LG_TR(ok);
}

/* Releases a pending transfer's reservation; reopens what it closed. */
static void release_pending(const lg_transfer *pt, lg_account *dr, lg_account *cr, bool reopen)
{
        dr->debits_pending -= pt->amount;
        cr->credits_pending -= pt->amount;
        if (reopen && (pt->flags & LG_TF_CLOSING_DEBIT)) {
                dr->flags &= ~(uint32_t)LG_AF_CLOSED;
        }
        if (reopen && (pt->flags & LG_TF_CLOSING_CREDIT)) {
                cr->flags &= ~(uint32_t)LG_AF_CLOSED;
        }
}

/* The stored post or void: what it left at 0 comes from the pending transfer. */
static void inherit(lg_transfer *t, const lg_transfer *pt, u128 amount)
{
        t->debit_account_id = pt->debit_account_id;
        t->credit_account_id = pt->credit_account_id;
        t->ledger = pt->ledger;
        t->code = pt->code;
        t->user_data_128 = t->user_data_128 != 0 ? t->user_data_128 : pt->user_data_128;
        t->user_data_64 = t->user_data_64 != 0 ? t->user_data_64 : pt->user_data_64;
        t->user_data_32 = t->user_data_32 != 0 ? t->user_data_32 : pt->user_data_32;
        t->amount = amount;
}

static int post_or_void(lg_batch *b, lg_transfer *t)
{
        lg_xfer *p = xfer_get(b, t->pending_id);
        u128 amount = 0;
        int r;

        if (p == NULL) {
                return LG_TR(pending_transfer_not_found);
        }
        if ((r = check_pending(t, p, &amount)) != LG_TR(ok)) {
                return r;
        }
        lg_transfer pt = p->t; /* p may move: add_created appends to the same array */
        lg_account *dr = account_get(b, pt.debit_account_id);
        lg_account *cr = account_get(b, pt.credit_account_id);
        KS_ASSERT(dr != NULL && cr != NULL); /* accounts are never deleted, and were locked */
        bool post = (t->flags & LG_TF_POST) != 0;
        if ((t->flags & LG_TF_IMPORTED) && import_regresses(b, t->timestamp)) {
                return LG_TR(imported_event_timestamp_must_not_regress);
        }
        if (post && (r = check_post(dr, cr, amount)) != LG_TR(ok)) {
                return r;
        }
        undo_account(b, dr);
        undo_account(b, cr);
        undo_status(b, p);
        release_pending(&pt, dr, cr, !post);
        if (post) {
                dr->debits_posted += amount;
                cr->credits_posted += amount;
        }
        p->status = post ? LG_PENDING_POSTED : LG_PENDING_VOIDED;
        inherit(t, &pt, amount);
        add_created(b, t)->pending_amount = pt.amount;
        history(b, dr, t, 1, t->timestamp);
        history(b, cr, t, 2, t->timestamp);
        return LG_TR(ok);
}

static int create_transfer(lg_batch *b, const void *events, int i, uint64_t ts)
{
        lg_transfer t = ((const lg_transfer *)events)[i];
        const lg_xfer *e;
        int r;

        if ((t.flags & ~(uint32_t)LG_TF_KNOWN) != 0) {
                return LG_TR(reserved_flag);
        }
        if (t.id == 0) {
                return LG_TR(id_must_not_be_zero);
        }
        if (t.id == U128_MAX) {
                return LG_TR(id_must_not_be_int_max);
        }
        if ((e = xfer_get(b, t.id)) != NULL) {
                b->exists_ts = e->t.timestamp;
                return transfer_exists(b, &t, e);
        }
        if (lg_map_get(&b->failed_ix, t.id) >= 0) {
                return LG_TR(id_already_failed);
        }
        if ((r = transfer_validate(&t)) != LG_TR(ok)) {
                return r;
        }
        t.timestamp = ts;
        r = (t.flags & (LG_TF_POST | LG_TF_VOID)) ? post_or_void(b, &t) : single_or_pending(b, &t);
        record_failed(b, t.id, r);
        if (r == LG_TR(ok) && (t.flags & LG_TF_IMPORTED)) {
                b->import_ts_max = ts;
        }
        return r;
}

static uint32_t transfer_flags(const void *events, int i)
{
        return ((const lg_transfer *)events)[i].flags;
}

static uint64_t transfer_timestamp(const void *events, int i)
{
        return ((const lg_transfer *)events)[i].timestamp;
}

void lg_create_transfers(lg_batch *b, const lg_transfer *events, int n, uint64_t base_ts,
                         uint8_t *results, uint64_t *timestamps)
{
        static const run_kind kind = {
            .linked = LG_TF_LINKED,
            .imported = LG_TF_IMPORTED,
            .flags = transfer_flags,
            .timestamp = transfer_timestamp,
            .create = create_transfer,
            .chain_open = LG_TR(linked_event_chain_open),
            .event_failed = LG_TR(linked_event_failed),
            .exists = LG_TR(exists),
            .imported_expected = LG_TR(imported_event_expected),
            .imported_not_expected = LG_TR(imported_event_not_expected),
            .ts_out_of_range = LG_TR(imported_event_timestamp_out_of_range),
            .ts_must_not_advance = LG_TR(imported_event_timestamp_must_not_advance),
            .ts_must_be_zero = LG_TR(timestamp_must_be_zero),
        };
        KS_ASSERT(n >= 0 && n <= b->events_max);
        run_events(b, events, n, base_ts, &kind, results, timestamps);
}

/* ---- expiry --------------------------------------------------------------- */

int lg_expire(lg_batch *b, const u128 *ids, int n, uint64_t base_ts)
{
        int expired = 0;

        for (int i = 0; i < n; i++) {
                lg_xfer *p = xfer_get(b, ids[i]);
                if (p == NULL || p->status != LG_PENDING_PENDING) {
                        continue; /* resolved since it was picked */
                }
                lg_account *dr = account_get(b, p->t.debit_account_id);
                lg_account *cr = account_get(b, p->t.credit_account_id);
                KS_ASSERT(dr != NULL && cr != NULL);
                release_pending(&p->t, dr, cr, true);
                p->status = LG_PENDING_EXPIRED;
                history(b, dr, &p->t, 1, base_ts + (uint64_t)i);
                history(b, cr, &p->t, 2, base_ts + (uint64_t)i);
                expired++;
        }
        return expired;
}
