/*
 * What "now" is for a customer. A customer made on a test clock lives on
 * the clock's frozen time for good, and so do its subscriptions and
 * invoices: every method that acts at "now" for them reads the clock. The
 * read takes the clock's row FOR SHARE, so such a call waits for an
 * AdvanceTestClock in progress (which holds the row FOR UPDATE) and then
 * acts at the time it reached, never at a time the clock has left.
 */
#include "billing.h"

static const char sql_frozen[] = "SELECT frozen_ms FROM billing.test_clocks"
                                 " WHERE tenant_id = billing.ctx_tenant() AND id = $1::uuid"
                                 " FOR SHARE";

int bl_now_for(bl_tx *tx, const char *test_clock_id, int64_t *now_ms)
{
        const char *params[1] = {test_clock_id};
        PGresult *res = NULL;
        int rc;

        if (test_clock_id == NULL || test_clock_id[0] == '\0') {
                *now_ms = ks_now_ms();
                return KS_OK;
        }
        if ((rc = bl_exec(tx, sql_frozen, 1, params, &res)) != KS_OK) {
                return rc;
        }
        if (PQntuples(res) != 1) { /* a foreign key keeps it: only a bug gets here */
                PQclear(res);
                return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
        }
        *now_ms = ks_pg_int(res, 0, 0);
        PQclear(res);
        return KS_OK;
}
