/*
 * keelson-billing's method table: methods.def with its handlers. main.c
 * serves it; it is in the library, not main.c, so that a test can link it
 * and hold it against the gateway's routes (services/gateway/tests).
 */
#include "billing.h"
#include "ks_perms.h"

#define KS_METHOD KS_METHOD_ROW
static const ks_method_row rows[] = {
#include "methods.def"
};
#undef KS_METHOD

const ks_method_table bl_methods = {&keelson__billing__v1__billing_service__descriptor, rows,
                                    sizeof(rows) / sizeof(rows[0])};

/*
 * The group form of each KS_M_GROUPED method of methods.def: how the RPC
 * server's group of a tenant's calls of it runs (ks_rpc_server.c, "Groups").
 */
static const struct {
        ks_handler_fn one;
        bl_group_fn group;
} groups[] = {
    {bl_create_subscription, bl_create_subscriptions},
};

void bl_group_run(void *service, ks_call *const *calls, int *codes, int n)
{
        (void)service;
        for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
                if (calls[0]->method->handler == groups[g].one) {
                        groups[g].group(calls, codes, n);
                        return;
                }
        }
        for (int i = 0; i < n; i++) { /* a grouped row without a group form: each alone */
                codes[i] = calls[i]->method->handler(calls[i]);
        }
}
