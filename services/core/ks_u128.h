/*
 * ks_u128: unsigned 128-bit integers (TigerBeetle's u128: ids, amounts,
 * balances, user_data_128) and their text forms.
 *
 *   uuid     36 characters, lower-case hex and dashes at 8-13-18-23: the
 *            16 bytes big-endian, so that PostgreSQL's uuid order is
 *            numeric order (how the ledger stores ids), and a uuid of
 *            billing's rows read as a number (user_data_128);
 *   decimal  1..39 digits, no sign, no leading "+": how a u128 reaches a
 *            client where proto3 has no type for it (a Discrepancy's
 *            transfer_id) and how PostgreSQL's numeric carries amounts.
 *
 * Writers NUL-terminate and return the length; parsers return 0, or -1 for
 * text that is not exactly that form (a parser never writes *out then).
 */
#ifndef KS_U128_H
#define KS_U128_H

#include <stdint.h>

/* GCC and Clang's unsigned 128-bit integer. */
typedef unsigned __int128 ks_u128;

#define KS_U128_MAX      (~(ks_u128)0)
#define KS_U128_UUID_LEN 36 /* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
#define KS_U128_DEC_LEN  39 /* decimal digits of 2^128 - 1 */

/* hi * 2^64 + lo: the two uint64 halves of the ledger's messages (`x`, `x_hi`). */
static inline ks_u128 ks_u128_of(uint64_t hi, uint64_t lo)
{
        return ((ks_u128)hi << 64) | lo;
}
static inline uint64_t ks_u128_hi(ks_u128 v)
{
        return (uint64_t)(v >> 64);
}
static inline uint64_t ks_u128_lo(ks_u128 v)
{
        return (uint64_t)v;
}

int ks_u128_to_uuid(ks_u128 v, char out[KS_U128_UUID_LEN + 1]);
int ks_u128_to_dec(ks_u128 v, char out[KS_U128_DEC_LEN + 1]);
/* Hex digits of either case. */
int ks_u128_from_uuid(const char *s, ks_u128 *out);
int ks_u128_from_dec(const char *s, ks_u128 *out);

#endif
