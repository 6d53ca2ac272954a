/*
 * The token-bucket script (ratelimit.lua beside this file), embedded at
 * build time by gateway.cmake: the gateway, its tests and its benchmarks run
 * the same bytes.
 */
#ifndef RATELIMIT_SCRIPT_H
#define RATELIMIT_SCRIPT_H

#include <stddef.h>

/* The script's text, NUL-terminated; gw_ratelimit_lua_len excludes the NUL. */
extern const char gw_ratelimit_lua[];
extern const size_t gw_ratelimit_lua_len;

#endif
