/*
 * keelson-billing's state tables (model.h): the subscription and invoice
 * transitions, and the names the API and the database use for them.
 *
 * Each table is a static [state][event] array, the one place a transition
 * is decided (Redis's command table, not an if-chain). A cell holds the
 * next state plus one, so that 0, what a cell no initializer names holds,
 * reads "illegal": a (state, event) left out is refused, never a silent
 * move to state 0.
 *
 * Decisions model.h leaves open:
 *
 * - bl_sub_next and bl_inv_next assert that from and ev are in range: they
 *   come from the parse functions or from code, never raw from a client.
 * - Parsing is exact and case-sensitive ("Active" is refused); NULL is
 *   refused too.
 */
#include "model.h"

#include <string.h>

#include "ks_assert.h"

#define TO(state) ((unsigned char)((state) + 1))
#define ILLEGAL   0

static const unsigned char sub_table[BL_SUB_STATES][BL_SUB_EVENTS] = {
    [BL_SUB_TRIALING] =
        {
            [BL_SE_TRIAL_END] = TO(BL_SUB_ACTIVE),
            [BL_SE_CHANGE] = TO(BL_SUB_TRIALING),
            [BL_SE_CANCEL] = TO(BL_SUB_CANCELED),
        },
    [BL_SUB_ACTIVE] =
        {
            [BL_SE_RENEW] = TO(BL_SUB_ACTIVE),
            [BL_SE_CHANGE] = TO(BL_SUB_ACTIVE),
            [BL_SE_PAYMENT_FAILED] = TO(BL_SUB_PAST_DUE),
            [BL_SE_PAYMENT_SUCCEEDED] = TO(BL_SUB_ACTIVE),
            [BL_SE_PAUSE] = TO(BL_SUB_PAUSED),
            [BL_SE_CANCEL] = TO(BL_SUB_CANCELED),
        },
    [BL_SUB_PAST_DUE] =
        {
            [BL_SE_RENEW] = TO(BL_SUB_PAST_DUE),
            [BL_SE_CHANGE] = TO(BL_SUB_PAST_DUE),
            [BL_SE_PAYMENT_FAILED] = TO(BL_SUB_PAST_DUE),
            [BL_SE_PAYMENT_SUCCEEDED] = TO(BL_SUB_ACTIVE),
            [BL_SE_CANCEL] = TO(BL_SUB_CANCELED),
            [BL_SE_DUNNING_EXHAUSTED] = TO(BL_SUB_CANCELED),
            [BL_SE_DUES_CLEARED] = TO(BL_SUB_ACTIVE),
        },
    [BL_SUB_PAUSED] =
        {
            [BL_SE_RESUME] = TO(BL_SUB_ACTIVE),
            [BL_SE_CANCEL] = TO(BL_SUB_CANCELED),
        },
    [BL_SUB_CANCELED] = {ILLEGAL}, /* terminal */
};

/* Stripe's invoice states: paid and void are terminal. */
static const unsigned char inv_table[BL_INV_STATES][BL_INV_EVENTS] = {
    [BL_INV_DRAFT] =
        {
            [BL_IE_FINALIZE] = TO(BL_INV_OPEN),
        },
    [BL_INV_OPEN] =
        {
            [BL_IE_PAY] = TO(BL_INV_PAID),
            [BL_IE_VOID] = TO(BL_INV_VOID),
            [BL_IE_MARK_UNCOLLECTIBLE] = TO(BL_INV_UNCOLLECTIBLE),
        },
    [BL_INV_PAID] = {ILLEGAL},
    [BL_INV_VOID] = {ILLEGAL},
    [BL_INV_UNCOLLECTIBLE] =
        {
            [BL_IE_PAY] = TO(BL_INV_PAID),
            [BL_IE_VOID] = TO(BL_INV_VOID),
        },
};

static const char *const sub_state_names[BL_SUB_STATES] = {
    [BL_SUB_TRIALING] = "trialing", [BL_SUB_ACTIVE] = "active",     [BL_SUB_PAST_DUE] = "past_due",
    [BL_SUB_PAUSED] = "paused",     [BL_SUB_CANCELED] = "canceled",
};

static const char *const sub_event_names[BL_SUB_EVENTS] = {
    [BL_SE_TRIAL_END] = "trial_end",
    [BL_SE_RENEW] = "renew",
    [BL_SE_CHANGE] = "change",
    [BL_SE_PAYMENT_FAILED] = "payment_failed",
    [BL_SE_PAYMENT_SUCCEEDED] = "payment_succeeded",
    [BL_SE_PAUSE] = "pause",
    [BL_SE_RESUME] = "resume",
    [BL_SE_CANCEL] = "cancel",
    [BL_SE_DUNNING_EXHAUSTED] = "dunning_exhausted",
    [BL_SE_DUES_CLEARED] = "dues_cleared",
};

static const char *const inv_state_names[BL_INV_STATES] = {
    [BL_INV_DRAFT] = "draft",
    [BL_INV_OPEN] = "open",
    [BL_INV_PAID] = "paid",
    [BL_INV_VOID] = "void",
    [BL_INV_UNCOLLECTIBLE] = "uncollectible",
};

static const char *const inv_event_names[BL_INV_EVENTS] = {
    [BL_IE_FINALIZE] = "finalize",
    [BL_IE_PAY] = "pay",
    [BL_IE_VOID] = "void",
    [BL_IE_MARK_UNCOLLECTIBLE] = "mark_uncollectible",
};

/* The name at i of a table of n, or "" out of range (an enum read from bad memory or a newer peer).
 */
static const char *name_at(const char *const *names, int n, int i)
{
        return i >= 0 && i < n ? names[i] : "";
}

/* The index of name in a table of n, or -1. */
static int index_of(const char *const *names, int n, const char *name)
{
        if (name == NULL) {
                return -1;
        }
        for (int i = 0; i < n; i++) {
                if (strcmp(names[i], name) == 0) {
                        return i;
                }
        }
        return -1;
}

/* ---- subscriptions -------------------------------------------------------- */

bool bl_sub_next(bl_sub_state from, bl_sub_event ev, bl_sub_state *to)
{
        KS_ASSERT((int)from >= 0 && from < BL_SUB_STATES);
        KS_ASSERT((int)ev >= 0 && ev < BL_SUB_EVENTS);
        unsigned char cell = sub_table[from][ev];
        if (cell == ILLEGAL) {
                return false;
        }
        *to = (bl_sub_state)(cell - 1);
        return true;
}

const char *bl_sub_state_name(bl_sub_state s)
{
        return name_at(sub_state_names, BL_SUB_STATES, (int)s);
}

const char *bl_sub_event_name(bl_sub_event e)
{
        return name_at(sub_event_names, BL_SUB_EVENTS, (int)e);
}

bool bl_sub_state_parse(const char *name, bl_sub_state *out)
{
        int i = index_of(sub_state_names, BL_SUB_STATES, name);

        if (i < 0) {
                return false;
        }
        *out = (bl_sub_state)i;
        return true;
}

/* ---- invoices ------------------------------------------------------------- */

bool bl_inv_next(bl_inv_state from, bl_inv_event ev, bl_inv_state *to)
{
        KS_ASSERT((int)from >= 0 && from < BL_INV_STATES);
        KS_ASSERT((int)ev >= 0 && ev < BL_INV_EVENTS);
        unsigned char cell = inv_table[from][ev];
        if (cell == ILLEGAL) {
                return false;
        }
        *to = (bl_inv_state)(cell - 1);
        return true;
}

const char *bl_inv_state_name(bl_inv_state s)
{
        return name_at(inv_state_names, BL_INV_STATES, (int)s);
}

const char *bl_inv_event_name(bl_inv_event e)
{
        return name_at(inv_event_names, BL_INV_EVENTS, (int)e);
}

bool bl_inv_state_parse(const char *name, bl_inv_state *out)
{
        int i = index_of(inv_state_names, BL_INV_STATES, name);

        if (i < 0) {
                return false;
        }
        *out = (bl_inv_state)i;
        return true;
}
