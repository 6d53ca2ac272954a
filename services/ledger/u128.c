/*
 * 128-bit values as PostgreSQL text: ids and user_data_128 as uuid (16
 * bytes, compared as unsigned big-endian, so ORDER BY id is numeric order),
 * amounts and balances as numeric(39,0) in decimal.
 */
#include "ledger.h"

#include <string.h>

#include "ks_crypto.h"

static const char hex_digits[] = "0123456789abcdef";

int lg_u128_to_uuid(u128 v, char out[LG_UUID_LEN + 1])
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

int lg_u128_to_dec(u128 v, char out[LG_DEC128_LEN + 1])
{
        char tmp[LG_DEC128_LEN];
        int n = 0;

        do {
                tmp[n++] = (char)('0' + (int)(v % 10));
                v /= 10;
        } while (v != 0 && n < LG_DEC128_LEN);
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

int lg_uuid_to_u128(const char *s, u128 *out)
{
        u128 v = 0;
        size_t i;

        if (s == NULL || strlen(s) != LG_UUID_LEN) {
                return -1;
        }
        for (i = 0; i < LG_UUID_LEN; i++) {
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
                v = (v << 4) | (u128)(unsigned)d;
        }
        *out = v;
        return 0;
}

int lg_dec_to_u128(const char *s, u128 *out)
{
        u128 v = 0;
        size_t n = s != NULL ? strlen(s) : 0;

        if (n == 0 || n > LG_DEC128_LEN) {
                return -1;
        }
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9') {
                        return -1;
                }
                u128 d = (u128)(unsigned)(s[i] - '0');
                /* v * 10 + d must stay below 2^128. */
                if (v > (U128_MAX - d) / 10) {
                        return -1;
                }
                v = v * 10 + d;
        }
        *out = v;
        return 0;
}

bool lg_tenant_valid(const char *s)
{
        u128 ignored;

        return lg_uuid_to_u128(s, &ignored) == 0;
}
