/*
 * compress.c: Accept-Encoding and gzip for large JSON replies.
 */
#ifndef GW_COMPRESS_H
#define GW_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when an Accept-Encoding value lets us answer with gzip. */
bool gw_accepts_gzip(const char *accept_encoding);
/* gzip of in[0..len) into a malloc'd *out. Returns 0, or -1 (out of memory). */
int gw_gzip(const void *in, size_t len, int level, uint8_t **out, size_t *out_len);

#endif
