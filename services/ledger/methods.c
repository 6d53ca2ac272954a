/*
 * keelson-ledger's method table: methods.def with its handlers. main.c serves
 * it; it is in the library, not main.c, so that a test can link it and hold
 * it against the gateway's routes (services/gateway/tests).
 */
#include "ledger.h"

#define KS_METHOD KS_METHOD_ROW
static const ks_method_row rows[] = {
#include "methods.def"
};
#undef KS_METHOD

const ks_method_table lg_methods = {&keelson__ledger__v1__ledger_service__descriptor, rows,
                                    sizeof(rows) / sizeof(rows[0])};
