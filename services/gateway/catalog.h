/*
 * catalog.c: every routed service's method table, built from the same
 * methods.def the service serves, with the handler and permission dropped.
 */
#ifndef GW_CATALOG_H
#define GW_CATALOG_H

#include <stddef.h>

#include "ks_method.h"

extern const ks_method_table gw_catalog[];
extern const size_t gw_catalog_n;

#endif
