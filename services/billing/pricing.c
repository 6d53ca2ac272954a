/*
 * keelson-billing's prices (model.h): whether a price is well formed, and
 * the amount of one period.
 *
 * Graduated tiers follow Lago's "graduated" model (and Stripe's graduated
 * tiers): each tier prices only the units that fall within its own range,
 * and its flat_amount is charged once when at least one unit falls there.
 * 250 units over [1..100] at 100, [101..200] at 50, [201..] at 10 cost
 * 100 × 100 + 100 × 50 + 50 × 10 = 15500.
 *
 * Decisions model.h leaves open:
 *
 * - Messages name the field as the API spells it (price.amount,
 *   price.tiers[2].up_to, the PRICE_MODEL_* names of the enum), and the
 *   checks run in a fixed order, so one bad price always gets the same
 *   message: the model, the amount, the tier count, then each tier in order
 *   (up_to, unit_amount, flat_amount).
 * - err may be NULL (or err_len 0): the answer alone is wanted.
 * - bl_price_amount asserts that the price is valid: prices reach it only
 *   from plans that bl_price_valid accepted. A negative quantity, which a
 *   client could send, gets false instead.
 * - FLAT costs its amount whatever the quantity, 0 included ("whatever the
 *   quantity", model.h); PER_UNIT and GRADUATED cost 0 for quantity 0.
 */
#include "model.h"

#include <stdarg.h>
#include <stdio.h>

#include "ks_assert.h"

/* Writes the message (printf-style) when the caller wants one; always false. */
static bool refuse(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool refuse(char *err, size_t err_len, const char *fmt, ...)
{
        va_list ap;

        if (err != NULL && err_len > 0) {
                va_start(ap, fmt);
                vsnprintf(err, err_len, fmt, ap);
                va_end(ap);
        }
        return false;
}

/* The tiers of a GRADUATED price: bounds rising, a last one without bound, nothing negative. */
static bool tiers_valid(const bl_price *p, char *err, size_t err_len)
{
        for (size_t i = 0; i < p->n_tiers; i++) {
                const bl_tier *t = &p->tiers[i];
                bool last = i + 1 == p->n_tiers;
                if (last && t->up_to != 0) {
                        return refuse(err, err_len,
                                      "price.tiers[%zu].up_to must be 0 on the last tier (no "
                                      "upper bound)",
                                      i);
                }
                if (!last && t->up_to <= 0) {
                        return refuse(err, err_len,
                                      "price.tiers[%zu].up_to must be positive (0 only on the "
                                      "last tier)",
                                      i);
                }
                if (!last && i > 0 && t->up_to <= p->tiers[i - 1].up_to) {
                        return refuse(err, err_len,
                                      "price.tiers[%zu].up_to must be above tiers[%zu].up_to", i,
                                      i - 1);
                }
                if (t->unit_amount < 0) {
                        return refuse(err, err_len,
                                      "price.tiers[%zu].unit_amount must not be negative", i);
                }
                if (t->flat_amount < 0) {
                        return refuse(err, err_len,
                                      "price.tiers[%zu].flat_amount must not be negative", i);
                }
        }
        return true;
}

bool bl_price_valid(const bl_price *p, char *err, size_t err_len)
{
        KS_ASSERT(p != NULL);
        if (p->model != BL_PRICE_FLAT && p->model != BL_PRICE_PER_UNIT &&
            p->model != BL_PRICE_GRADUATED) {
                return refuse(err, err_len,
                              "price.model must be PRICE_MODEL_FLAT, PRICE_MODEL_PER_UNIT or "
                              "PRICE_MODEL_GRADUATED");
        }
        if (p->amount < 0) {
                return refuse(err, err_len, "price.amount must not be negative");
        }
        if (p->model != BL_PRICE_GRADUATED) {
                if (p->n_tiers != 0) {
                        return refuse(err, err_len,
                                      "price.tiers must be empty unless price.model is "
                                      "PRICE_MODEL_GRADUATED");
                }
                return true;
        }
        if (p->amount != 0) {
                return refuse(err, err_len,
                              "price.amount must be 0 for PRICE_MODEL_GRADUATED (the tiers "
                              "hold the amounts)");
        }
        if (p->n_tiers < 1 || p->n_tiers > BL_TIERS_MAX) {
                return refuse(err, err_len, "price.tiers must hold 1 to %d tiers", BL_TIERS_MAX);
        }
        return tiers_valid(p, err, err_len);
}

/* The tiers over quantity units: each its own units at unit_amount, plus flat_amount if any. */
static bool graduated_amount(const bl_price *p, int64_t quantity, int64_t *out)
{
        int64_t total = 0, below = 0; /* below: the units the earlier tiers took */

        for (size_t i = 0; i < p->n_tiers && quantity > below; i++) {
                const bl_tier *t = &p->tiers[i];
                int64_t top = (t->up_to == 0 || quantity < t->up_to) ? quantity : t->up_to;
                int64_t cost;
                if (!bl_mul(top - below, t->unit_amount, &cost) ||
                    !bl_add(cost, t->flat_amount, &cost) || !bl_add(total, cost, &total)) {
                        return false;
                }
                below = top;
        }
        *out = total;
        return true;
}

bool bl_price_amount(const bl_price *p, int64_t quantity, int64_t *out)
{
        KS_ASSERT(p != NULL && out != NULL);
        KS_ASSERT(bl_price_valid(p, NULL, 0));
        if (quantity < 0) {
                return false;
        }
        switch (p->model) {
        case BL_PRICE_FLAT:
                *out = p->amount;
                return true;
        case BL_PRICE_PER_UNIT:
                return bl_mul(p->amount, quantity, out);
        case BL_PRICE_GRADUATED:
                return graduated_amount(p, quantity, out);
        }
        return false;
}
