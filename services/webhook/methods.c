/*
 * keelson-webhook's method table: methods.def with its handlers. main.c
 * serves it; it is in the library, not main.c, so that a test can link it
 * and hold it against the gateway's routes (services/gateway/tests).
 */
#include "ks_perms.h"
#include "webhook.h"

#define KS_METHOD KS_METHOD_ROW
static const ks_method_row rows[] = {
#include "methods.def"
};
#undef KS_METHOD

const ks_method_table wh_methods = {&keelson__webhook__v1__webhook_service__descriptor, rows,
                                    sizeof(rows) / sizeof(rows[0])};
