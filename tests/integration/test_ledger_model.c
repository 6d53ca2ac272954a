/*
 * Model-based test of the ledger. A seeded generator makes batches of every
 * kind (valid transfers, duplicates, conflicting retries, retries of failed
 * ids, invalid fields, linked chains with a failure inside or left open,
 * balance-limit violations, balancing transfers, pending/post/void, closing
 * transfers, huge amounts that overflow, expiry, imported batches with
 * their own timestamps, good and bad), sends each batch through
 * the gateway to the service and applies it to a small reference model
 * written here from TigerBeetle's documentation, then compares every result
 * code and result timestamp and every account's balances and flags after
 * each batch, and every stored transfer at the end. The model learns the
 * timestamps the service assigns from its replies (they are the service's
 * to choose); an imported event's own it must predict.
 *
 * Each seed prints itself. CI runs the fixed seeds below and one fresh seed
 * per run; KEELSON_LEDGER_SEED=<n> runs only seed n, which replays the same
 * batches (the generator depends on nothing but the seed and the model).
 */
#include "ledger_it.h"

#include <inttypes.h>
#include <time.h>

#define ACCOUNTS_MAX   48
#define XFERS_MAX      4096
#define FAILED_MAX     4096
#define SENT_MAX       4096
#define BATCHES        60
#define EVENTS_MAX     12
#define EXPIRY_WAIT_MS 30000
#define LOOKUP_CHUNK   500

static const uint64_t fixed_seeds[] = {1, 2, 3, 20240601, 987654321};

/* ---- the request, as the generator builds it ------------------------------------ */

typedef struct req {
        u128 id, dr, cr, amount, pending_id, ud128;
        uint64_t ud64, timestamp;
        uint32_t ud32, timeout, ledger, code, flags;
} req;

/* ---- the reference model ----------------------------------------------------------- */

typedef struct m_acct {
        u128 id, dp, dpo, cp, cpo, ud128;
        uint64_t ud64, ts;
        uint32_t ud32, ledger, code, flags;
} m_acct;

typedef struct m_xfer {
        req t;          /* as stored: resolved amount and inherited fields */
        u128 p_amount;  /* a post: its pending transfer's amount */
        uint8_t status; /* a pending: 1 pending, 2 posted, 3 voided, 4 expired */
} m_xfer;

typedef struct model {
        m_acct a[ACCOUNTS_MAX];
        int na;
        m_xfer x[XFERS_MAX];
        int nx;
        u128 failed[FAILED_MAX];
        int nf;
        /* The latest timestamp of an account and of a transfer: an import must be later. */
        uint64_t acct_ts_max, xfer_ts_max;
} model;

/* The test's clock, read just before a batch is sent: an import may not reach it. */
static uint64_t g_now_ns;

static bool m_ts_taken_by_account(const model *m, uint64_t ts)
{
        for (int i = 0; i < m->na; i++) {
                if (m->a[i].ts == ts) {
                        return true;
                }
        }
        return false;
}

static bool m_ts_taken_by_transfer(const model *m, uint64_t ts)
{
        for (int i = 0; i < m->nx; i++) {
                if (m->x[i].t.timestamp == ts) {
                        return true;
                }
        }
        return false;
}

/*
 * TigerBeetle's execute loop on an event's timestamp: the batch's first
 * event decides whether it imports; then the range, and not after now.
 */
static int m_timestamp(bool imported, bool batch_imports, uint64_t ts, const int codes[5])
{
        if (imported != batch_imports)
                return imported ? codes[1] : codes[0];
        if (!imported)
                return ts != 0 ? codes[4] : 0;
        if (ts < 1 || ts > (uint64_t)INT64_MAX)
                return codes[2];
        return ts >= g_now_ns ? codes[3] : 0;
}

static const int m_account_ts_codes[5] = {
    AR(imported_event_expected), AR(imported_event_not_expected),
    AR(imported_event_timestamp_out_of_range), AR(imported_event_timestamp_must_not_advance),
    AR(timestamp_must_be_zero)};
static const int m_transfer_ts_codes[5] = {
    TR(imported_event_expected), TR(imported_event_not_expected),
    TR(imported_event_timestamp_out_of_range), TR(imported_event_timestamp_must_not_advance),
    TR(timestamp_must_be_zero)};

static m_acct *m_acct_get(model *m, u128 id)
{
        for (int i = 0; i < m->na; i++) {
                if (m->a[i].id == id) {
                        return &m->a[i];
                }
        }
        return NULL;
}

static m_xfer *m_xfer_get(model *m, u128 id)
{
        for (int i = 0; i < m->nx; i++) {
                if (m->x[i].t.id == id) {
                        return &m->x[i];
                }
        }
        return NULL;
}

static bool m_failed(const model *m, u128 id)
{
        for (int i = 0; i < m->nf; i++) {
                if (m->failed[i] == id) {
                        return true;
                }
        }
        return false;
}

static bool ovf(u128 a, u128 b)
{
        return a > U128_MAX - b;
}

static int m_account(model *m, const req *r, const lt_account_pb *in)
{
        m_acct n = {.id = r->id,
                    .ud128 = lt_u128(in->user_data_128_hi, in->user_data_128),
                    .ud64 = in->user_data_64,
                    .ud32 = in->user_data_32,
                    .ledger = in->ledger,
                    .code = in->code,
                    .flags = in->flags};
        bool imported = (in->flags & AF_IMPORTED) != 0;
        if (in->flags & ~(uint32_t)(1 | 2 | 4 | 8 | 16 | 32))
                return AR(reserved_flag);
        if (n.id == 0)
                return AR(id_must_not_be_zero);
        if (n.id == U128_MAX)
                return AR(id_must_not_be_int_max);
        /* TigerBeetle since 0.16.4: an existing id is judged before the fields, and
         * its balances are not compared. */
        m_acct *e = m_acct_get(m, n.id);
        if (e != NULL) {
                if ((e->flags & ~32u) != (n.flags & ~32u))
                        return AR(exists_with_different_flags);
                if (e->ud128 != n.ud128)
                        return AR(exists_with_different_user_data_128);
                if (e->ud64 != n.ud64)
                        return AR(exists_with_different_user_data_64);
                if (e->ud32 != n.ud32)
                        return AR(exists_with_different_user_data_32);
                if (e->ledger != n.ledger)
                        return AR(exists_with_different_ledger);
                if (e->code != n.code)
                        return AR(exists_with_different_code);
                return AR(exists);
        }
        if ((n.flags & 2) && (n.flags & 4))
                return AR(flags_are_mutually_exclusive);
        if (in->debits_pending || in->debits_pending_hi)
                return AR(debits_pending_must_be_zero);
        if (in->debits_posted || in->debits_posted_hi)
                return AR(debits_posted_must_be_zero);
        if (in->credits_pending || in->credits_pending_hi)
                return AR(credits_pending_must_be_zero);
        if (in->credits_posted || in->credits_posted_hi)
                return AR(credits_posted_must_be_zero);
        if (n.ledger == 0)
                return AR(ledger_must_not_be_zero);
        if (n.code == 0)
                return AR(code_must_not_be_zero);
        if (imported &&
            (in->timestamp <= m->acct_ts_max || m_ts_taken_by_transfer(m, in->timestamp)))
                return AR(imported_event_timestamp_must_not_regress);
        if (imported) {
                n.ts = in->timestamp; /* else the service's, learnt from its reply */
                m->acct_ts_max = n.ts;
        }
        assert_true(m->na < ACCOUNTS_MAX);
        m->a[m->na++] = n;
        return AR(ok);
}

/*
 * Whether a field of a retried transfer differs. For a post or void, 0 asks
 * for the pending transfer's value (pv is its value then), which must equal
 * the stored one.
 */
static bool m_diff(u128 asked, u128 stored, bool is_pv, u128 pv)
{
        return (is_pv && asked == 0 ? pv : asked) != stored;
}

static int m_exists(const model *m, const m_xfer *e, const req *t)
{
        const req *s = &e->t;
        bool pv = (s->flags & (TF_POST | TF_VOID)) != 0;
        const m_xfer *px = pv ? m_xfer_get((model *)m, s->pending_id) : NULL;
        req p = px != NULL ? px->t : *s;
        bool amount_differs;

        if (s->flags & (TF_BALANCING_DEBIT | TF_BALANCING_CREDIT)) {
                amount_differs = t->amount < s->amount;
        } else if (s->flags & TF_POST) { /* exactly: U128_MAX is the pending amount */
                amount_differs = (t->amount == U128_MAX ? e->p_amount : t->amount) != s->amount;
        } else if (s->flags & TF_VOID) { /* exactly: 0 is the pending amount */
                amount_differs = (t->amount == 0 ? e->p_amount : t->amount) != s->amount;
        } else {
                amount_differs = t->amount != s->amount;
        }
        if (t->flags != s->flags)
                return TR(exists_with_different_flags);
        if (t->pending_id != s->pending_id)
                return TR(exists_with_different_pending_id);
        if (t->timeout != s->timeout)
                return TR(exists_with_different_timeout);
        if (m_diff(t->dr, s->dr, pv, p.dr))
                return TR(exists_with_different_debit_account_id);
        if (m_diff(t->cr, s->cr, pv, p.cr))
                return TR(exists_with_different_credit_account_id);
        if (amount_differs)
                return TR(exists_with_different_amount);
        if (m_diff(t->ud128, s->ud128, pv, p.ud128))
                return TR(exists_with_different_user_data_128);
        if (m_diff(t->ud64, s->ud64, pv, p.ud64))
                return TR(exists_with_different_user_data_64);
        if (m_diff(t->ud32, s->ud32, pv, p.ud32))
                return TR(exists_with_different_user_data_32);
        if (m_diff(t->ledger, s->ledger, pv, p.ledger))
                return TR(exists_with_different_ledger);
        if (m_diff(t->code, s->code, pv, p.code))
                return TR(exists_with_different_code);
        return TR(exists);
}

static int m_static_checks(const req *t)
{
        uint32_t f = t->flags;
        bool pv = (f & (TF_POST | TF_VOID)) != 0;
        bool excl = ((f & TF_PENDING) && pv) || ((f & TF_POST) && (f & TF_VOID)) ||
                    (pv && (f & (TF_BALANCING_DEBIT | TF_BALANCING_CREDIT | TF_CLOSING_DEBIT |
                                 TF_CLOSING_CREDIT)));
        if (excl)
                return TR(flags_are_mutually_exclusive);
        if (!pv && t->dr == 0)
                return TR(debit_account_id_must_not_be_zero);
        if (!pv && t->dr == U128_MAX)
                return TR(debit_account_id_must_not_be_int_max);
        if (!pv && t->cr == 0)
                return TR(credit_account_id_must_not_be_zero);
        if (!pv && t->cr == U128_MAX)
                return TR(credit_account_id_must_not_be_int_max);
        if (!pv && t->dr == t->cr)
                return TR(accounts_must_be_different);
        if (!pv && t->pending_id != 0)
                return TR(pending_id_must_be_zero);
        if (pv && t->pending_id == 0)
                return TR(pending_id_must_not_be_zero);
        if (pv && t->pending_id == U128_MAX)
                return TR(pending_id_must_not_be_int_max);
        if (pv && t->pending_id == t->id)
                return TR(pending_id_must_be_different);
        if (!(f & TF_PENDING) && t->timeout != 0)
                return TR(timeout_reserved_for_pending_transfer);
        if ((f & (TF_CLOSING_DEBIT | TF_CLOSING_CREDIT)) && !(f & TF_PENDING))
                return TR(closing_transfer_must_be_pending);
        if (!pv && t->ledger == 0)
                return TR(ledger_must_not_be_zero);
        if (!pv && t->code == 0)
                return TR(code_must_not_be_zero);
        return TR(ok);
}

static void m_store(model *m, const req *t, uint8_t status, u128 p_amount)
{
        assert_true(m->nx < XFERS_MAX);
        m->x[m->nx++] = (m_xfer){.t = *t, .p_amount = p_amount, .status = status};
}

static u128 room(u128 limit, u128 a, u128 b)
{
        u128 used = ovf(a, b) ? U128_MAX : a + b;
        return limit > used ? limit - used : 0;
}

static int m_single(model *m, req t)
{
        m_acct *dr = m_acct_get(m, t.dr), *cr = m_acct_get(m, t.cr);
        bool pending = (t.flags & TF_PENDING) != 0;
        u128 amt = t.amount;

        if (dr == NULL)
                return TR(debit_account_not_found);
        if (cr == NULL)
                return TR(credit_account_not_found);
        if (dr->ledger != cr->ledger)
                return TR(accounts_must_have_the_same_ledger);
        if (t.ledger != dr->ledger)
                return TR(transfer_must_have_the_same_ledger_as_accounts);
        if ((t.flags & TF_IMPORTED) &&
            (t.timestamp <= m->xfer_ts_max || m_ts_taken_by_account(m, t.timestamp)))
                return TR(imported_event_timestamp_must_not_regress);
        if ((t.flags & TF_IMPORTED) && t.timestamp <= dr->ts)
                return TR(imported_event_timestamp_must_postdate_debit_account);
        if ((t.flags & TF_IMPORTED) && t.timestamp <= cr->ts)
                return TR(imported_event_timestamp_must_postdate_credit_account);
        if ((t.flags & TF_IMPORTED) && t.timeout != 0)
                return TR(imported_event_timeout_must_be_zero);
        if (dr->flags & AF_CLOSED)
                return TR(debit_account_already_closed);
        if (cr->flags & AF_CLOSED)
                return TR(credit_account_already_closed);
        if ((t.flags & TF_BALANCING_DEBIT) && amt > room(dr->cpo, dr->dp, dr->dpo))
                amt = room(dr->cpo, dr->dp, dr->dpo);
        if ((t.flags & TF_BALANCING_CREDIT) && amt > room(cr->dpo, cr->cp, cr->cpo))
                amt = room(cr->dpo, cr->cp, cr->cpo);
        if (pending && ovf(dr->dp, amt))
                return TR(overflows_debits_pending);
        if (pending && ovf(cr->cp, amt))
                return TR(overflows_credits_pending);
        if (ovf(dr->dpo, amt))
                return TR(overflows_debits_posted);
        if (ovf(cr->cpo, amt))
                return TR(overflows_credits_posted);
        if (ovf(dr->dp, dr->dpo) || ovf(dr->dp + dr->dpo, amt))
                return TR(overflows_debits);
        if (ovf(cr->cp, cr->cpo) || ovf(cr->cp + cr->cpo, amt))
                return TR(overflows_credits);
        if ((dr->flags & AF_DEBITS_MUST_NOT_EXCEED_CREDITS) && dr->dp + dr->dpo + amt > dr->cpo)
                return TR(exceeds_credits);
        if ((cr->flags & AF_CREDITS_MUST_NOT_EXCEED_DEBITS) && cr->cp + cr->cpo + amt > cr->dpo)
                return TR(exceeds_debits);
        if (pending) {
                dr->dp += amt;
                cr->cp += amt;
                dr->flags |= (t.flags & TF_CLOSING_DEBIT) ? AF_CLOSED : 0;
                cr->flags |= (t.flags & TF_CLOSING_CREDIT) ? AF_CLOSED : 0;
        } else {
                dr->dpo += amt;
                cr->cpo += amt;
        }
        t.amount = amt;
        m_store(m, &t, pending ? 1 : 0, 0);
        return TR(ok);
}

static void m_release(m_acct *dr, m_acct *cr, const req *p, bool reopen)
{
        dr->dp -= p->amount;
        cr->cp -= p->amount;
        if (reopen && (p->flags & TF_CLOSING_DEBIT))
                dr->flags &= ~(uint32_t)AF_CLOSED;
        if (reopen && (p->flags & TF_CLOSING_CREDIT))
                cr->flags &= ~(uint32_t)AF_CLOSED;
}

static int m_post_void(model *m, req t)
{
        m_xfer *px = m_xfer_get(m, t.pending_id);
        bool post = (t.flags & TF_POST) != 0;

        if (px == NULL)
                return TR(pending_transfer_not_found);
        req p = px->t;
        if (!(p.flags & TF_PENDING))
                return TR(pending_transfer_not_pending);
        if (t.dr != 0 && t.dr != p.dr)
                return TR(pending_transfer_has_different_debit_account_id);
        if (t.cr != 0 && t.cr != p.cr)
                return TR(pending_transfer_has_different_credit_account_id);
        if (t.ledger != 0 && t.ledger != p.ledger)
                return TR(pending_transfer_has_different_ledger);
        if (t.code != 0 && t.code != p.code)
                return TR(pending_transfer_has_different_code);
        u128 amt = p.amount;
        if (post && t.amount != U128_MAX && t.amount > p.amount)
                return TR(exceeds_pending_transfer_amount);
        if (post && t.amount != U128_MAX)
                amt = t.amount;
        if (!post && t.amount != 0 && t.amount > p.amount)
                return TR(exceeds_pending_transfer_amount);
        if (!post && t.amount != 0 && t.amount < p.amount)
                return TR(pending_transfer_has_different_amount);
        if (px->status == 2)
                return TR(pending_transfer_already_posted);
        if (px->status == 3)
                return TR(pending_transfer_already_voided);
        if (px->status == 4)
                return TR(pending_transfer_expired);
        if ((t.flags & TF_IMPORTED) &&
            (t.timestamp <= m->xfer_ts_max || m_ts_taken_by_account(m, t.timestamp)))
                return TR(imported_event_timestamp_must_not_regress);
        m_acct *dr = m_acct_get(m, p.dr), *cr = m_acct_get(m, p.cr);
        /* Only a void may touch a closed account, even one its pending closed. */
        if (post && (dr->flags & AF_CLOSED))
                return TR(debit_account_already_closed);
        if (post && (cr->flags & AF_CLOSED))
                return TR(credit_account_already_closed);
        if (post && ovf(dr->dpo, amt))
                return TR(overflows_debits_posted);
        if (post && ovf(cr->cpo, amt))
                return TR(overflows_credits_posted);
        m_release(dr, cr, &p, !post);
        if (post) {
                dr->dpo += amt;
                cr->cpo += amt;
        }
        px->status = post ? 2 : 3;
        t.dr = p.dr;
        t.cr = p.cr;
        t.ledger = p.ledger;
        t.code = p.code;
        t.ud128 = t.ud128 ? t.ud128 : p.ud128;
        t.ud64 = t.ud64 ? t.ud64 : p.ud64;
        t.ud32 = t.ud32 ? t.ud32 : p.ud32;
        t.amount = amt;
        m_store(m, &t, 0, p.amount);
        return TR(ok);
}

static bool m_transient(int r)
{
        return r == TR(debit_account_not_found) || r == TR(credit_account_not_found) ||
               r == TR(pending_transfer_not_found) || r == TR(exceeds_credits) ||
               r == TR(exceeds_debits) || r == TR(debit_account_already_closed) ||
               r == TR(credit_account_already_closed);
}

static int m_transfer(model *m, const req *t)
{
        if (t->flags & ~(uint32_t)0x1ff)
                return TR(reserved_flag);
        if (t->id == 0)
                return TR(id_must_not_be_zero);
        if (t->id == U128_MAX)
                return TR(id_must_not_be_int_max);
        m_xfer *e = m_xfer_get(m, t->id);
        if (e != NULL)
                return m_exists(m, e, t);
        if (m_failed(m, t->id))
                return TR(id_already_failed);
        int r = m_static_checks(t);
        if (r != TR(ok))
                return r;
        r = (t->flags & (TF_POST | TF_VOID)) ? m_post_void(m, *t) : m_single(m, *t);
        if (r == TR(ok) && (t->flags & TF_IMPORTED))
                m->xfer_ts_max = t->timestamp; /* else the service's, learnt from its reply */
        return r;
}

/* TigerBeetle's chains over the model: the snapshot is the whole model. */
static model g_chain_snapshot;
static bool g_seen[128]; /* transfer results this seed reached */

static void m_transfers(model *m, const req *ts, int n, int *results)
{
        bool batch_imports = n > 0 && (ts[0].flags & TF_IMPORTED) != 0;
        int chain = -1;
        bool broken = false;

        for (int i = 0; i < n; i++) {
                bool linked = (ts[i].flags & TF_LINKED) != 0;
                int r;
                if (linked && chain < 0) {
                        chain = i;
                        g_chain_snapshot = *m;
                }
                if (linked && i == n - 1) {
                        r = TR(linked_event_chain_open);
                } else if (broken) {
                        r = TR(linked_event_failed);
                } else if ((r = m_timestamp((ts[i].flags & TF_IMPORTED) != 0, batch_imports,
                                            ts[i].timestamp, m_transfer_ts_codes)) == 0) {
                        r = m_transfer(m, &ts[i]);
                }
                if (r != TR(ok) && chain >= 0 && !broken) {
                        broken = true;
                        *m = g_chain_snapshot;
                        for (int j = chain; j < i; j++) {
                                results[j] = TR(linked_event_failed);
                        }
                }
                results[i] = r;
                g_seen[r & 127] = true;
                /* After the rollback: the failed id outlives its chain. */
                if (m_transient(r)) {
                        assert_true(m->nf < FAILED_MAX);
                        m->failed[m->nf++] = ts[i].id;
                }
                if (!linked) {
                        chain = -1;
                        broken = false;
                }
        }
}

static void m_accounts(model *m, const req *rs, const lt_account_pb *in, int n, int *results)
{
        bool batch_imports = n > 0 && (in[0].flags & AF_IMPORTED) != 0;
        int chain = -1;
        bool broken = false;

        for (int i = 0; i < n; i++) {
                bool linked = (in[i].flags & AF_LINKED) != 0;
                int r;
                if (linked && chain < 0) {
                        chain = i;
                        g_chain_snapshot = *m;
                }
                if (linked && i == n - 1) {
                        r = AR(linked_event_chain_open);
                } else if (broken) {
                        r = AR(linked_event_failed);
                } else if ((r = m_timestamp((in[i].flags & AF_IMPORTED) != 0, batch_imports,
                                            in[i].timestamp, m_account_ts_codes)) == 0) {
                        r = m_account(m, &rs[i], &in[i]);
                }
                if (r != AR(ok) && chain >= 0 && !broken) {
                        broken = true;
                        *m = g_chain_snapshot;
                        for (int j = chain; j < i; j++) {
                                results[j] = AR(linked_event_failed);
                        }
                }
                results[i] = r;
                if (!linked) {
                        chain = -1;
                        broken = false;
                }
        }
}

/* ---- the generator ------------------------------------------------------------------- */

typedef struct gen {
        uint64_t s;
        uint64_t id_hi; /* the high half of some ids: 128-bit ids are exercised too */
        u128 next_id;
        req sent[SENT_MAX];
        int n_sent;
        int expiries;
        int imports; /* imported batches sent */
        /* No import at or before this: an expiry may have written balance rows until then. */
        uint64_t floor_ts;
} gen;

static uint64_t rnd(gen *g)
{
        uint64_t z = (g->s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

static uint64_t below(gen *g, uint64_t n)
{
        return n == 0 ? 0 : rnd(g) % n;
}

static bool chance(gen *g, int percent)
{
        return (int)below(g, 100) < percent;
}

static u128 new_id(gen *g)
{
        u128 id = g->next_id++;
        return chance(g, 20) ? lt_u128(g->id_hi, (uint64_t)id) : id;
}

static const m_acct *pick_acct(gen *g, const model *m)
{
        return &m->a[below(g, (uint64_t)m->na)];
}

static u128 gen_amount(gen *g)
{
        if (chance(g, 4)) {
                return 0;
        }
        if (chance(g, 2)) { /* huge: overflows somewhere sooner or later */
                return lt_u128(~0ull >> below(g, 3), rnd(g));
        }
        return 1 + below(g, 100);
}

/* A transfer between two accounts of one ledger (usually). */
static req gen_single(gen *g, const model *m, uint32_t flags)
{
        const m_acct *dr = pick_acct(g, m), *cr = pick_acct(g, m);
        req t = {.id = new_id(g), .dr = dr->id, .cr = cr->id, .amount = gen_amount(g)};

        for (int tries = 0; tries < 8 && (cr->id == dr->id || cr->ledger != dr->ledger); tries++) {
                cr = pick_acct(g, m);
                t.cr = cr->id;
        }
        t.ledger = dr->ledger;
        t.code = 1 + (uint32_t)below(g, 3);
        t.flags = flags;
        if (chance(g, 30)) {
                t.ud128 = lt_u128(rnd(g), rnd(g));
                t.ud64 = rnd(g);
                t.ud32 = (uint32_t)rnd(g);
        }
        if (flags & TF_PENDING) {
                t.timeout = chance(g, 50) ? 0 : 3600; /* never expire during the test */
        }
        return t;
}

/* A post or void of some pending transfer (of any state), or a pending if none. */
static req gen_resolve(gen *g, const model *m, bool post)
{
        const m_xfer *p = NULL;

        /* Mostly a transfer still pending: resolved ones answer already_* at once. */
        bool open_only = chance(g, 75);
        for (int tries = 0; tries < 32 && m->nx > 0; tries++) {
                const m_xfer *x = &m->x[below(g, (uint64_t)m->nx)];
                if ((x->t.flags & TF_PENDING) && (!open_only || x->status == 1)) {
                        p = x;
                        break;
                }
        }
        if (p == NULL) {
                return gen_single(g, m, TF_PENDING);
        }
        req t = {.id = new_id(g), .pending_id = p->t.id, .flags = post ? TF_POST : TF_VOID};
        int f = (int)below(g, 100);
        t.dr = f < 80 ? 0 : f < 95 ? p->t.dr : p->t.cr;
        t.cr = chance(g, 85) ? 0 : chance(g, 80) ? p->t.cr : p->t.dr;
        t.ledger = chance(g, 85) ? 0 : chance(g, 80) ? p->t.ledger : p->t.ledger + 1;
        t.code = chance(g, 85) ? 0 : chance(g, 80) ? p->t.code : p->t.code + 1;
        int a = (int)below(g, 100);
        if (post) {
                t.amount = a < 40   ? U128_MAX
                           : a < 80 ? (p->t.amount == 0 ? 0 : below(g, (uint64_t)p->t.amount + 1))
                           : a < 90 ? p->t.amount + 1
                                    : 0;
        } else {
                t.amount = a < 60   ? 0
                           : a < 80 ? p->t.amount
                           : a < 90 ? p->t.amount + 1
                                    : (p->t.amount > 1 ? p->t.amount - 1 : U128_MAX);
        }
        if (chance(g, 30)) { /* user data of its own, which a resend may leave out */
                t.ud128 = 1 + below(g, 5);
                t.ud64 = chance(g, 50) ? 1 + below(g, 5) : 0;
                t.ud32 = chance(g, 50) ? 1 + (uint32_t)below(g, 5) : 0;
        }
        int odd = (int)below(g, 100); /* what only ordinary transfers are checked for */
        if (odd < 3) {
                t.dr = t.cr = p->t.dr;
        } else if (odd < 5) {
                t.dr = U128_MAX;
        } else if (odd < 6) {
                t.cr = U128_MAX;
        }
        return t;
}

/* One field of a valid transfer made invalid. */
static req gen_invalid(gen *g, const model *m)
{
        req t = gen_single(g, m, 0);

        switch (below(g, 16)) {
        case 0:
                t.id = 0;
                break;
        case 1:
                t.id = U128_MAX;
                break;
        case 2:
                t.timestamp = 1;
                break;
        case 3:
                t.flags = 512;
                break;
        case 4:
                t.flags = TF_PENDING | TF_VOID;
                break;
        case 5:
                t.dr = 0;
                break;
        case 6:
                t.dr = U128_MAX;
                break;
        case 7:
                t.cr = 0;
                break;
        case 8:
                t.cr = U128_MAX;
                break;
        case 9:
                t.cr = t.dr;
                break;
        case 10:
                t.pending_id = 1;
                break;
        case 11:
                t.timeout = 5;
                break;
        case 12:
                t.flags = TF_CLOSING_CREDIT;
                break;
        case 13:
                t.ledger = 0;
                break;
        case 14:
                t.code = 0;
                break;
        default:
                t.dr = 1000000 + below(g, 5);
                break; /* no such account */
        }
        return t;
}

/* A request sent before, unchanged or with one field changed. */
static req gen_retry(gen *g, const model *m, bool change)
{
        if (g->n_sent == 0) {
                return gen_single(g, m, 0);
        }
        /* A stored post or void resent with user data left out: 0 asks for the pending's. */
        bool stored = change && m->nx > 0 && chance(g, 25);
        for (int tries = 0; stored && tries < 16; tries++) {
                req x = m->x[below(g, (uint64_t)m->nx)].t;
                if (x.flags & (TF_POST | TF_VOID)) {
                        x.timestamp = (x.flags & TF_IMPORTED) ? x.timestamp : 0;
                        x.ud128 = chance(g, 70) ? 0 : x.ud128;
                        x.ud64 = chance(g, 50) ? 0 : x.ud64;
                        x.ud32 = chance(g, 50) ? 0 : x.ud32;
                        return x;
                }
        }
        req t = g->sent[below(g, (uint64_t)g->n_sent)];
        if (!change) {
                return t;
        }
        /* posts and voids: mostly a resend that leaves fields out */
        bool pv = (t.flags & (TF_POST | TF_VOID)) != 0;
        switch (pv && chance(g, 60) ? 11 + below(g, 4) : below(g, 14)) {
        case 14: { /* a post resent with its pending amount spelt out, or one more */
                const m_xfer *px = m_xfer_get((model *)m, t.pending_id);
                if ((t.flags & TF_POST) && px != NULL && px->t.amount < U128_MAX) {
                        t.amount = px->t.amount + below(g, 2);
                }
                break;
        }
        case 11: /* a resend that leaves fields out: 0 means the pending's for a post */
                t.ud128 = 0;
                t.ud64 = 0;
                break;
        case 12:
                t.ud32 = 0;
                t.dr = 0;
                t.cr = 0;
                break;
        case 13:
                t.amount = (t.flags & TF_POST) ? U128_MAX : 0;
                break;
        case 0:
                t.flags ^= TF_LINKED;
                break;
        case 1:
                t.pending_id += 1;
                break;
        case 2:
                /* Different, and never one that could expire while the test runs: a
                 * retry whose first attempt failed creates a transfer with it, which
                 * only expiry_step may let expire. */
                t.timeout = t.timeout == 0 ? 3600 : t.timeout + 1;
                break;
        case 3:
                t.dr = pick_acct(g, m)->id;
                break;
        case 4:
                t.cr = pick_acct(g, m)->id;
                break;
        case 5:
                t.amount += 1;
                break;
        case 6:
                t.ud128 += 1;
                break;
        case 7:
                t.ud64 += 1;
                break;
        case 8:
                t.ud32 += 1;
                break;
        case 9:
                t.ledger += 1;
                break;
        default:
                t.code += 1;
                break;
        }
        return t;
}

static req gen_transfer(gen *g, const model *m)
{
        int k = (int)below(g, 100);

        if (k < 28)
                return gen_single(g, m, 0);
        if (k < 40) {
                uint32_t closing =
                    chance(g, 8) ? (chance(g, 50) ? TF_CLOSING_DEBIT : TF_CLOSING_CREDIT) : 0;
                return gen_single(g, m, TF_PENDING | closing);
        }
        if (k < 52)
                return gen_resolve(g, m, true);
        if (k < 60)
                return gen_resolve(g, m, false);
        if (k < 68)
                return gen_retry(g, m, false);
        if (k < 76)
                return gen_retry(g, m, true);
        if (k < 81 && m->nf > 0) {
                req t = gen_single(g, m, 0);
                t.id = m->failed[below(g, (uint64_t)m->nf)];
                return t;
        }
        if (k < 88)
                return gen_invalid(g, m);
        if (k < 94) {
                uint32_t f = chance(g, 50) ? TF_BALANCING_DEBIT : TF_BALANCING_CREDIT;
                return gen_single(g, m, f | (chance(g, 30) ? TF_PENDING : 0));
        }
        req t = gen_single(g, m, 0); /* across ledgers, or a ledger that differs */
        t.cr = m->a[below(g, (uint64_t)m->na)].id;
        t.ledger = chance(g, 50) ? t.ledger : t.ledger + 1;
        return t;
}

/* A batch of transfers, with linked chains (sometimes left open at the end). */
static int gen_transfer_batch(gen *g, const model *m, req *out)
{
        int n = 1 + (int)below(g, EVENTS_MAX);

        for (int i = 0; i < n; i++) {
                out[i] = gen_transfer(g, m);
                out[i].flags &= ~(uint32_t)TF_LINKED;
        }
        if (n >= 2 && chance(g, 60)) {
                int start = (int)below(g, (uint64_t)n - 1);
                int len = 2 + (int)below(g, 4);
                for (int i = start; i < start + len - 1 && i < n - 1; i++) {
                        out[i].flags |= TF_LINKED;
                }
        }
        if (chance(g, 5)) {
                out[n - 1].flags |= TF_LINKED;
        }
        if (n >= 2 && chance(g, 3)) { /* one imported in a batch that does not import */
                out[n - 1].flags |= TF_IMPORTED;
                out[n - 1].timestamp = 1 + below(g, 1000);
        }
        for (int i = 0; i < n && g->n_sent < SENT_MAX; i++) {
                g->sent[g->n_sent++] = out[i];
        }
        return n;
}

static void gen_account(gen *g, const model *m, lt_account_pb *a, req *r)
{
        static const uint32_t flag_sets[] = {0,
                                             0,
                                             0,
                                             AF_DEBITS_MUST_NOT_EXCEED_CREDITS,
                                             AF_CREDITS_MUST_NOT_EXCEED_DEBITS,
                                             AF_HISTORY,
                                             AF_DEBITS_MUST_NOT_EXCEED_CREDITS | AF_HISTORY};
        int k = (int)below(g, 100);

        if (k < 25 && m->na > 0) { /* a retry, maybe changed */
                const m_acct *e = pick_acct(g, m);
                lt_account_init(a, e->id, e->ledger, e->code, e->flags & ~(uint32_t)AF_CLOSED);
                a->user_data_32 = e->ud32;
                switch (below(g, 8)) {
                case 0:
                        a->code += 1;
                        break;
                case 1:
                        a->flags ^= AF_HISTORY;
                        break;
                case 2:
                        a->ledger += 1;
                        break;
                /* fields a new account could not have: the existing id wins */
                case 3:
                        a->ledger = 0;
                        break;
                case 4:
                        a->code = 0;
                        break;
                case 5:
                        a->credits_posted = 1;
                        break;
                case 6:
                        a->flags = 2 | 4;
                        break;
                default:
                        break;
                }
        } else {
                u128 id = new_id(g);
                lt_account_init(a, id, chance(g, 80) ? 1 : 2, 1 + (uint32_t)below(g, 4),
                                flag_sets[below(g, 7)]);
                a->user_data_32 = (uint32_t)below(g, 1000);
                if (k > 90) {
                        switch (below(g, 5)) {
                        case 0:
                                a->id = 0;
                                a->id_hi = 0;
                                break;
                        case 1:
                                a->ledger = 0;
                                break;
                        case 2:
                                a->flags = 2 | 4;
                                break;
                        case 3:
                                a->credits_posted = 1;
                                break;
                        default:
                                a->flags |= 64; /* a bit TigerBeetle does not define */
                                break;
                        }
                }
        }
        r->id = lt_u128(a->id_hi, a->id);
}

static int gen_account_batch(gen *g, const model *m, lt_account_pb *a, req *r, int n)
{
        for (int i = 0; i < n; i++) {
                gen_account(g, m, &a[i], &r[i]);
        }
        if (n >= 2 && chance(g, 30)) {
                a[0].flags |= AF_LINKED;
        }
        return n;
}

/*
 * Imported batches. The first free timestamp: after every object and every
 * expiry, in the past (the latest object is the service's, from an earlier
 * batch, and the service's clock has moved on by a round trip since).
 */
static uint64_t import_base(gen *g, const model *m)
{
        uint64_t b = m->acct_ts_max > m->xfer_ts_max ? m->acct_ts_max : m->xfer_ts_max;

        b = b > g->floor_ts ? b : g->floor_ts;
        return b + 1 + below(g, 1000);
}

static const m_acct *newest_account(const model *m)
{
        const m_acct *n = &m->a[0];

        for (int i = 1; i < m->na; i++) {
                n = m->a[i].ts > n->ts ? &m->a[i] : n;
        }
        return n;
}

/*
 * An imported timestamp for event i of a batch from base: mostly the next
 * free one, sometimes one the rules refuse (0, the future, an object's, one
 * that regresses, or just before one of the transfer's accounts).
 */
static uint64_t import_ts(gen *g, const model *m, uint64_t *next, const req *t)
{
        uint64_t ts = *next;

        *next += 1 + below(g, 10);
        switch (chance(g, 30) ? below(g, 6) : 9) {
        case 0:
                return 0;
        case 1:
                return ts + 3600ull * 1000000000ull; /* an hour ahead */
        case 2: /* the newest object of the other kind's: taken, though maybe not regressing */
                if (t != NULL) {
                        return m->na > 0 ? newest_account(m)->ts : ts;
                }
                return m->nx > 0 ? m->x[m->nx - 1].t.timestamp : ts;
        case 3:
                return m->nx > 0 ? m->x[below(g, (uint64_t)m->nx)].t.timestamp : ts;
        case 4:
                return ts > 2000 ? ts - 1 - below(g, 1000) : ts;
        case 5: {
                const m_acct *a = t != NULL ? m_acct_get((model *)m, t->dr) : NULL;
                return a != NULL && a->ts > 1 ? a->ts - 1 : ts;
        }
        default:
                return ts;
        }
}

/* A batch of imported transfers of any kind (retries included), mostly without timeouts. */
static int gen_import_transfer_batch(gen *g, const model *m, req *out)
{
        int n = gen_transfer_batch(g, m, out);
        uint64_t next = import_base(g, m);

        g->n_sent -= n < g->n_sent ? n : g->n_sent; /* sent again below, as imported */
        for (int i = 0; i < n; i++) {
                out[i].flags |= TF_IMPORTED;
                if (i > 0 && chance(g, 3)) {
                        out[i].flags &= ~(uint32_t)TF_IMPORTED; /* imported_event_expected */
                }
                if (out[i].timeout != 0 && chance(g, 80)) {
                        out[i].timeout = 0;
                }
                if (m->na > 1 && chance(g, 35)) { /* the newest account: maybe newer than it */
                        const m_acct *a = newest_account(m), *o = pick_acct(g, m);
                        for (int k = 0; k < 8 && (o == a || o->ledger != a->ledger); k++) {
                                o = pick_acct(g, m);
                        }
                        bool debit = chance(g, 50);
                        out[i] = gen_single(g, m, out[i].flags & (TF_LINKED | TF_IMPORTED));
                        out[i].dr = debit ? a->id : o->id;
                        out[i].cr = debit ? o->id : a->id;
                        out[i].ledger = a->ledger;
                        /* before it (mostly), on it, after it */
                        out[i].timestamp = a->ts + (chance(g, 50) ? 0 : below(g, 2)) - 1;
                        next = out[i].timestamp + 1 + below(g, 10);
                        if (g->n_sent < SENT_MAX) {
                                g->sent[g->n_sent++] = out[i];
                        }
                        continue;
                }
                out[i].timestamp = import_ts(g, m, &next, &out[i]);
                if (g->n_sent < SENT_MAX) {
                        g->sent[g->n_sent++] = out[i];
                }
        }
        g->imports++;
        return n;
}

static int gen_import_account_batch(gen *g, const model *m, lt_account_pb *a, req *r, int n)
{
        uint64_t next = import_base(g, m);

        gen_account_batch(g, m, a, r, n);
        for (int i = 0; i < n; i++) {
                a[i].flags |= AF_IMPORTED;
                if (i > 0 && chance(g, 3)) {
                        a[i].flags &= ~(uint32_t)AF_IMPORTED;
                }
                a[i].timestamp = import_ts(g, m, &next, NULL);
        }
        g->imports++;
        return n;
}

/* ---- the driver -------------------------------------------------------------------------- */

static it_stack g_stack;
static model g_model;
static gen g_gen;
static lt_tenant g_t;
static uint64_t g_seed;
static int g_batch;

static void to_pb(const req *r, lt_transfer_pb *o)
{
        lt_transfer_init(o, r->id, r->dr, r->cr, r->amount, r->ledger, r->code, r->flags);
        o->pending_id = lt_lo(r->pending_id);
        o->pending_id_hi = lt_hi(r->pending_id);
        o->user_data_128 = lt_lo(r->ud128);
        o->user_data_128_hi = lt_hi(r->ud128);
        o->user_data_64 = r->ud64;
        o->user_data_32 = r->ud32;
        o->timeout = r->timeout;
        o->timestamp = r->timestamp;
}

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * A result timestamp against the model: an imported event's own; for
 * exists, the existing object's (when the model knows it yet); for a
 * created one the service chose, learnt (*learn, the object's, and the
 * kind's latest *ts_max).
 */
static void check_result_ts(bool imported, int result, int ok, int exists, uint64_t asked,
                            uint64_t got, uint64_t existing, uint64_t *learn, uint64_t *ts_max,
                            const char *what, int i)
{
        bool bad = false;

        if (imported && result != exists) {
                bad = got != asked;
        } else if (result == exists) {
                bad = existing != 0 && got != existing;
        } else if (result == ok) {
                *learn = got;
                bad = got <= *ts_max; /* the service's clock moves forward */
                *ts_max = got;
        }
        if (bad) {
                fail_msg("seed %" PRIu64 " batch %d %s %d: result timestamp %" PRIu64
                         " (asked %" PRIu64 ", existing %" PRIu64 ")",
                         g_seed, g_batch, what, i, got, asked, existing);
        }
}

static void send_transfers(const req *rs, int n)
{
        Keelson__Ledger__V1__CreateTransfersRequest cr =
            KEELSON__LEDGER__V1__CREATE_TRANSFERS_REQUEST__INIT;
        lt_transfer_pb pb[EVENTS_MAX], *pp[EVENTS_MAX];
        uint64_t existing[EVENTS_MAX];
        int want[EVENTS_MAX];

        for (int i = 0; i < n; i++) {
                to_pb(&rs[i], &pb[i]);
                pp[i] = &pb[i];
                const m_xfer *e = m_xfer_get(&g_model, rs[i].id);
                existing[i] = e != NULL ? e->t.timestamp : 0;
        }
        cr.n_transfers = (size_t)n;
        cr.transfers = pp;
        g_now_ns = now_ns();
        Keelson__Ledger__V1__CreateTransfersResponse *r =
            lt_call(&g_t, "CreateTransfers", &cr.base,
                    &keelson__ledger__v1__create_transfers_response__descriptor);
        assert_int_equal(r->n_results, n);
        assert_int_equal(r->n_timestamps, n);
        m_transfers(&g_model, rs, n, want);
        for (int i = 0; i < n; i++) {
                int got = (int)r->results[i];
                if (got != want[i]) {
                        fail_msg("seed %" PRIu64 " batch %d transfer %d/%d (id %" PRIu64
                                 ", flags %u): expected %s, got %s",
                                 g_seed, g_batch, i, n, lt_lo(rs[i].id), rs[i].flags,
                                 lt_tr_name(want[i]), lt_tr_name(got));
                }
                m_xfer *x = got == TR(ok) ? m_xfer_get(&g_model, rs[i].id) : NULL;
                uint64_t unused = 0;
                check_result_ts((rs[i].flags & TF_IMPORTED) != 0, got, TR(ok), TR(exists),
                                rs[i].timestamp, r->timestamps[i], existing[i],
                                x != NULL ? &x->t.timestamp : &unused, &g_model.xfer_ts_max,
                                "transfer", i);
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void send_accounts(lt_account_pb *a, const req *rs, int n)
{
        Keelson__Ledger__V1__CreateAccountsRequest cr =
            KEELSON__LEDGER__V1__CREATE_ACCOUNTS_REQUEST__INIT;
        lt_account_pb *pp[EVENTS_MAX];
        uint64_t existing[EVENTS_MAX];
        int want[EVENTS_MAX];

        for (int i = 0; i < n; i++) {
                pp[i] = &a[i];
                const m_acct *e = m_acct_get(&g_model, rs[i].id);
                existing[i] = e != NULL ? e->ts : 0;
        }
        cr.n_accounts = (size_t)n;
        cr.accounts = pp;
        g_now_ns = now_ns();
        Keelson__Ledger__V1__CreateAccountsResponse *r =
            lt_call(&g_t, "CreateAccounts", &cr.base,
                    &keelson__ledger__v1__create_accounts_response__descriptor);
        assert_int_equal(r->n_results, n);
        assert_int_equal(r->n_timestamps, n);
        m_accounts(&g_model, rs, a, n, want);
        for (int i = 0; i < n; i++) {
                int got = (int)r->results[i];
                if (got != want[i]) {
                        fail_msg("seed %" PRIu64 " batch %d account %d/%d: expected %s, got %s",
                                 g_seed, g_batch, i, n, lt_ar_name(want[i]), lt_ar_name(got));
                }
                m_acct *e = got == AR(ok) ? m_acct_get(&g_model, rs[i].id) : NULL;
                uint64_t unused = 0;
                check_result_ts((a[i].flags & AF_IMPORTED) != 0, got, AR(ok), AR(exists),
                                a[i].timestamp, r->timestamps[i], existing[i],
                                e != NULL ? &e->ts : &unused, &g_model.acct_ts_max, "account", i);
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* Every account of the model against the service: balances and flags. */
static void compare_accounts(void)
{
        u128 ids[ACCOUNTS_MAX];

        for (int i = 0; i < g_model.na; i++) {
                ids[i] = g_model.a[i].id;
        }
        Keelson__Ledger__V1__LookupAccountsResponse *r =
            lt_lookup_accounts(&g_t, ids, (size_t)g_model.na);
        assert_int_equal(r->n_accounts, g_model.na);
        for (int i = 0; i < g_model.na; i++) {
                const lt_account_pb *a = r->accounts[i];
                const m_acct *e = &g_model.a[i];
                if (lt_u128(a->id_hi, a->id) != e->id ||
                    lt_u128(a->debits_pending_hi, a->debits_pending) != e->dp ||
                    lt_u128(a->debits_posted_hi, a->debits_posted) != e->dpo ||
                    lt_u128(a->credits_pending_hi, a->credits_pending) != e->cp ||
                    lt_u128(a->credits_posted_hi, a->credits_posted) != e->cpo ||
                    a->flags != e->flags) {
                        fail_msg("seed %" PRIu64 " after batch %d: account %" PRIu64
                                 " differs from the model (dp %" PRIu64 "/%" PRIu64 ", dpo %" PRIu64
                                 "/%" PRIu64 ", cp %" PRIu64 "/%" PRIu64 ", cpo %" PRIu64
                                 "/%" PRIu64 ", flags %u/%u)",
                                 g_seed, g_batch, lt_lo(e->id), a->debits_pending, lt_lo(e->dp),
                                 a->debits_posted, lt_lo(e->dpo), a->credits_pending, lt_lo(e->cp),
                                 a->credits_posted, lt_lo(e->cpo), a->flags, e->flags);
                }
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
}

typedef struct wait_arg {
        u128 id;
        u128 dp;
} wait_arg;

static int debits_pending_is(void *arg)
{
        wait_arg *w = arg;
        Keelson__Ledger__V1__LookupAccountsResponse *r = lt_lookup_accounts(&g_t, &w->id, 1);
        int done = r->n_accounts == 1 && lt_u128(r->accounts[0]->debits_pending_hi,
                                                 r->accounts[0]->debits_pending) == w->dp;

        protobuf_c_message_free_unpacked(&r->base, NULL);
        return done;
}

/*
 * A pending transfer with a one-second timeout, alone in its batch; then
 * nothing else until the sweeper has released it, after which the model
 * expires it too. Later batches may try to post or void it.
 */
static void expiry_step(void)
{
        for (int tries = 0; tries < 32; tries++) {
                req t = gen_single(&g_gen, &g_model, TF_PENDING);
                const m_acct *dr = m_acct_get(&g_model, t.dr);
                t.timeout = 1;
                t.amount = 1 + below(&g_gen, 50);
                model before = g_model;
                int want;
                m_transfers(&g_model, &t, 1, &want);
                g_model = before;
                if (want != TR(ok)) {
                        continue; /* limits or a closed account: pick others */
                }
                send_transfers(&t, 1);
                wait_arg w = {.id = t.dr, .dp = dr->dp - t.amount};
                if (!lt_wait_until(debits_pending_is, &w, EXPIRY_WAIT_MS)) {
                        fail_msg("seed %" PRIu64 ": the pending transfer %" PRIu64
                                 " was not expired within %d ms",
                                 g_seed, lt_lo(t.id), EXPIRY_WAIT_MS);
                }
                g_gen.floor_ts = now_ns(); /* the expiry wrote balance rows before now */
                m_xfer *x = m_xfer_get(&g_model, t.id);
                m_release(m_acct_get(&g_model, t.dr), m_acct_get(&g_model, t.cr), &x->t, true);
                x->status = 4;
                g_gen.expiries++;
                return;
        }
}

static void compare_transfer(const lt_transfer_pb *s, const m_xfer *x, uint64_t *last_ts)
{
        const req *e = &x->t;

        if (lt_u128(s->debit_account_id_hi, s->debit_account_id) != e->dr ||
            lt_u128(s->credit_account_id_hi, s->credit_account_id) != e->cr ||
            lt_u128(s->amount_hi, s->amount) != e->amount ||
            lt_u128(s->pending_id_hi, s->pending_id) != e->pending_id ||
            lt_u128(s->user_data_128_hi, s->user_data_128) != e->ud128 ||
            s->user_data_64 != e->ud64 || s->user_data_32 != e->ud32 || s->timeout != e->timeout ||
            s->ledger != e->ledger || s->code != e->code || s->flags != e->flags) {
                fail_msg("seed %" PRIu64 ": stored transfer %" PRIu64 " differs from the model",
                         g_seed, lt_lo(e->id));
        }
        /* Created one after another: timestamps strictly increase in that order. */
        if (s->timestamp <= *last_ts) {
                fail_msg("seed %" PRIu64 ": transfer %" PRIu64 " has timestamp %" PRIu64
                         ", not after %" PRIu64,
                         g_seed, lt_lo(e->id), s->timestamp, *last_ts);
        }
        *last_ts = s->timestamp;
}

static void compare_transfers(void)
{
        u128 ids[LOOKUP_CHUNK];
        uint64_t last_ts = 0;

        for (int base = 0; base < g_model.nx; base += LOOKUP_CHUNK) {
                int n = g_model.nx - base < LOOKUP_CHUNK ? g_model.nx - base : LOOKUP_CHUNK;
                for (int i = 0; i < n; i++) {
                        ids[i] = g_model.x[base + i].t.id;
                }
                Keelson__Ledger__V1__LookupTransfersResponse *r =
                    lt_lookup_transfers(&g_t, ids, (size_t)n);
                assert_int_equal(r->n_transfers, n);
                for (int i = 0; i < n; i++) {
                        compare_transfer(r->transfers[i], &g_model.x[base + i], &last_ts);
                }
                protobuf_c_message_free_unpacked(&r->base, NULL);
        }
}

/* Per ledger, the service's trial balance is balanced and matches the model's sums. */
static void compare_trial_balance(uint32_t ledger)
{
        Keelson__Ledger__V1__GetTrialBalanceRequest tb =
            KEELSON__LEDGER__V1__GET_TRIAL_BALANCE_REQUEST__INIT;
        u128 dpo = 0, cpo = 0;
        uint64_t n = 0;

        for (int i = 0; i < g_model.na; i++) {
                if (g_model.a[i].ledger == ledger) {
                        dpo += g_model.a[i].dpo;
                        cpo += g_model.a[i].cpo;
                        n++;
                }
        }
        tb.ledger = ledger;
        ProtobufCMessage *out = NULL;
        long status = lt_call_status(&g_t, "GetTrialBalance", &tb.base,
                                     &keelson__ledger__v1__get_trial_balance_response__descriptor,
                                     &out, NULL, 0);
        if (status == 400 || status == 500) {
                return; /* sums past 2^128 (out_of_range): huge amounts were posted */
        }
        assert_int_equal(status, 200);
        Keelson__Ledger__V1__GetTrialBalanceResponse *r = (void *)out;
        assert_int_equal(r->accounts_total, n);
        assert_true(r->balanced);
        if (r->totals != NULL) {
                assert_true(lt_u128(r->totals->debits_posted_hi, r->totals->debits_posted) == dpo);
                assert_true(lt_u128(r->totals->credits_posted_hi, r->totals->credits_posted) ==
                            cpo);
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void initial_accounts(void)
{
        lt_account_pb a[EVENTS_MAX];
        req r[EVENTS_MAX];
        static const uint32_t flags[10] = {0,
                                           0,
                                           0,
                                           0,
                                           AF_DEBITS_MUST_NOT_EXCEED_CREDITS,
                                           AF_CREDITS_MUST_NOT_EXCEED_DEBITS,
                                           AF_HISTORY,
                                           0,
                                           0,
                                           AF_DEBITS_MUST_NOT_EXCEED_CREDITS};

        for (int i = 0; i < 10; i++) {
                u128 id = new_id(&g_gen);
                lt_account_init(&a[i], id, i < 8 ? 1 : 2, 1, flags[i]);
                r[i].id = id;
        }
        send_accounts(a, r, 10);
}

static void run_seed(uint64_t seed)
{
        printf("ledger model: seed %" PRIu64 " (reproduce: KEELSON_LEDGER_SEED=%" PRIu64 ")\n",
               seed, seed);
        fflush(stdout);
        memset(&g_model, 0, sizeof(g_model));
        memset(&g_gen, 0, sizeof(g_gen));
        memset(g_seen, 0, sizeof(g_seen));
        g_seed = seed;
        g_gen.s = seed;
        g_gen.id_hi = 1 + (rnd(&g_gen) >> 1);
        g_gen.next_id = 1;
        lt_tenant_new(&g_stack, "it-ledger-model", &g_t);
        g_batch = 0;
        initial_accounts();
        /* Whether the last batch imported accounts: then transfers that predate them are likely. */
        bool accounts_last = false;
        for (g_batch = 1; g_batch <= BATCHES; g_batch++) {
                req rs[EVENTS_MAX];
                bool after_accounts = accounts_last;
                accounts_last = false;
                if (g_batch == BATCHES / 2 || (g_gen.expiries < 2 && chance(&g_gen, 3))) {
                        expiry_step();
                } else if (chance(&g_gen, 6)) {
                        lt_account_pb a[EVENTS_MAX];
                        int n = gen_import_account_batch(&g_gen, &g_model, a, rs,
                                                         1 + (int)below(&g_gen, 4));
                        send_accounts(a, rs, n);
                        accounts_last = true;
                } else if (chance(&g_gen, after_accounts ? 60 : 12)) {
                        send_transfers(rs, gen_import_transfer_batch(&g_gen, &g_model, rs));
                } else if (chance(&g_gen, 12)) {
                        lt_account_pb a[EVENTS_MAX];
                        int n =
                            gen_account_batch(&g_gen, &g_model, a, rs, 1 + (int)below(&g_gen, 4));
                        send_accounts(a, rs, n);
                } else {
                        send_transfers(rs, gen_transfer_batch(&g_gen, &g_model, rs));
                }
                compare_accounts();
        }
        compare_transfers();
        compare_trial_balance(1);
        compare_trial_balance(2);
        int distinct = 0;
        for (int i = 0; i < 128; i++) {
                distinct += g_seen[i];
        }
        printf("ledger model: seed %" PRIu64 " passed: %d transfers, %d accounts, %d failed ids,"
               " %d expiries, %d imported batches, %d distinct transfer results\n",
               seed, g_model.nx, g_model.na, g_model.nf, g_gen.expiries, g_gen.imports, distinct);
}

static void test_seed(void **state)
{
        run_seed(*(uint64_t *)*state);
}

static int group_setup(void **state)
{
        (void)state;
        return it_stack_load(&g_stack);
}

int main(void)
{
        static uint64_t seeds[8];
        struct CMUnitTest tests[8];
        size_t n = 0;
        const char *env = getenv("KEELSON_LEDGER_SEED");

        if (env != NULL && env[0] != '\0') {
                seeds[n++] = strtoull(env, NULL, 10);
        } else {
                for (size_t i = 0; i < sizeof(fixed_seeds) / sizeof(fixed_seeds[0]); i++) {
                        seeds[n++] = fixed_seeds[i];
                }
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                seeds[n++] = ((uint64_t)ts.tv_sec * 1000003u) ^ (uint64_t)ts.tv_nsec; /* fresh */
        }
        for (size_t i = 0; i < n; i++) {
                tests[i] = (struct CMUnitTest)cmocka_unit_test_prestate(test_seed, &seeds[i]);
        }
        return _cmocka_run_group_tests("ledger_model", tests, n, group_setup, NULL);
}
