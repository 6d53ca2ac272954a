/*
 * 128-bit values as PostgreSQL text: ids and user_data_128 as uuid (16
 * bytes, compared as unsigned big-endian, so ORDER BY id is numeric order),
 * amounts and balances as numeric(39,0) in decimal. The conversions are
 * core's (services/core/ks_u128.h), shared with billing; ledger.h names
 * them for the ledger. What is the ledger's own stays here.
 */
#include "ledger.h"

bool lg_tenant_valid(const char *s)
{
        u128 ignored;

        return ks_u128_from_uuid(s, &ignored) == 0;
}
