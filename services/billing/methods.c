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
