/*
 * ks_u128: 128-bit values as uuid and decimal text (see ks_u128.h).
 */
#include "ks_u128.h"

#include <stdbool.h>
#include <string.h>

#include "ks_crypto.h"

static const char hex_digits[] = "0123456789abcdef";

int ks_u128_to_uuid(ks_u128 v, char out[KS_U128_UUID_LEN + 1])
{
        /* Nibbles from the most significant; dashes after 8, 12, 16 and 20 of them. */
        int o = 0;

        for (int i = 0; i < 32; i++) {
                if (i == 8 || i == 12 || i == 16 || i == 20) {
                        out[o++] = '-';
                }
                out[o++] = hex_digits[(unsigned)(v >> (124 - 4 * i)) & 0xfu];
        }
        out[o] = '\0';
        return o;
}

int ks_u128_to_dec(ks_u128 v, char out[KS_U128_DEC_LEN + 1])
{
        char tmp[KS_U128_DEC_LEN];
        int n = 0;

        do {
                tmp[n++] = (char)('0' + (int)(v % 10));
                v /= 10;
        } while (v != 0 && n < KS_U128_DEC_LEN);
        for (int i = 0; i < n; i++) {
                out[i] = tmp[n - 1 - i];
        }
        out[n] = '\0';
        return n;
}

static bool dash_at(size_t i)
{
        return i == 8 || i == 13 || i == 18 || i == 23;
}

int ks_u128_from_uuid(const char *s, ks_u128 *out)
{
        ks_u128 v = 0;

        if (s == NULL || strlen(s) != KS_U128_UUID_LEN) {
                return -1;
        }
        for (size_t i = 0; i < KS_U128_UUID_LEN; i++) {
                if (dash_at(i)) {
                        if (s[i] != '-') {
                                return -1;
                        }
                        continue;
                }
                int d = ks_hex_digit(s[i]);
                if (d < 0) {
                        return -1;
                }
                v = (v << 4) | (ks_u128)(unsigned)d;
        }
        *out = v;
        return 0;
}

int ks_u128_from_dec(const char *s, ks_u128 *out)
{
        ks_u128 v = 0;
        size_t n = s != NULL ? strlen(s) : 0;

        if (n == 0 || n > KS_U128_DEC_LEN) {
                return -1;
        }
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9') {
                        return -1;
                }
                ks_u128 d = (ks_u128)(unsigned)(s[i] - '0');
                /* v * 10 + d must stay below 2^128. */
                if (v > (KS_U128_MAX - d) / 10) {
                        return -1;
                }
                v = v * 10 + d;
        }
        *out = v;
        return 0;
}
