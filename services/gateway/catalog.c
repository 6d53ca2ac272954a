/*
 * The methods the gateway routes: every service's methods.def, the same
 * rows the services serve, with the handler and the permission dropped (the
 * gateway links no handler and checks no permission: the service does).
 *
 * Adding a service is its methods.def here and one line in gw_catalog[].
 */
#include "catalog.h"
#include "keelson/auth/v1/auth.pb-c.h"
#include "keelson/billing/v1/billing.pb-c.h"
#include "keelson/ledger/v1/ledger.pb-c.h"
#include "keelson/summary/v1/summary.pb-c.h"
#include "keelson/webhook/v1/webhook.pb-c.h"

#define KS_METHOD(name, fn, flags, bearer, perm, revokes)                                          \
        KS_METHOD_ROW(name, NULL, flags, bearer, 0, revokes)

static const ks_method_row auth_rows[] = {
#include "../auth/methods.def"
};
static const ks_method_row billing_rows[] = {
#include "../billing/methods.def"
};
static const ks_method_row ledger_rows[] = {
#include "../ledger/methods.def"
};
static const ks_method_row summary_rows[] = {
#include "../summary/methods.def"
};
static const ks_method_row webhook_rows[] = {
#include "../webhook/methods.def"
};
#undef KS_METHOD

#define TABLE(descriptor, rows)                                                                    \
        {                                                                                          \
                &(descriptor), (rows), sizeof(rows) / sizeof((rows)[0])                            \
        }

const ks_method_table gw_catalog[] = {
    TABLE(keelson__auth__v1__auth_service__descriptor, auth_rows),
    TABLE(keelson__billing__v1__billing_service__descriptor, billing_rows),
    TABLE(keelson__ledger__v1__ledger_service__descriptor, ledger_rows),
    TABLE(keelson__summary__v1__admin_summary_service__descriptor, summary_rows),
    TABLE(keelson__webhook__v1__webhook_service__descriptor, webhook_rows),
};
const size_t gw_catalog_n = sizeof(gw_catalog) / sizeof(gw_catalog[0]);
