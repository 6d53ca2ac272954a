/*
 * libFuzzer target: ks_password_verify with a fixed password and the input
 * as the stored "$scrypt$ln=..,r=..,p=..$<salt>$<key>" string (up to its
 * first NUL, as a C string from the database would be).
 *
 * scrypt is slow on purpose: an input that asks for more than a small cost
 * (ln > 12, or N*r*p above COST_MAX) is not verified, so every run stays in
 * the millisecond range. Inputs out of the parser's bounds still are: they
 * are refused before any scrypt.
 *
 * Checks, aborting on a violation, against an independent reference of the
 * format in ks_crypto.h (bounds as ks_crypto.c sets them) and OpenSSL's own
 * EVP_PBE_scrypt:
 * - verify returns 0 exactly when the reference parses the string;
 * - *ok is true exactly when scrypt of the password with the stored salt and
 *   parameters gives the stored key; on -1, *ok is false;
 * - with the default current parameters (ln=14) every small hash needs a
 *   rehash.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "ks_crypto.h"

#define PASSWORD "correct horse battery staple"
#define LN_MAX   12
#define COST_MAX (1ul << 14) /* N * r * p */

/* Bounds of a stored hash, as ks_crypto.c defines them. */
#define REF_LN_MIN   1
#define REF_LN_MAX   20
#define REF_R_MAX    32
#define REF_P_MAX    16
#define REF_KEY_MIN  16
#define REF_KEY_MAX  128
#define REF_SALT_MIN 8
#define REF_SALT_MAX 64
#define STORED_MAX   1024

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct ref_hash {
        unsigned ln, r, p;
        uint8_t salt[REF_SALT_MAX];
        size_t salt_len;
        uint8_t key[REF_KEY_MAX];
        size_t key_len;
} ref_hash;

__attribute__((noreturn)) static void die(const char *what, const char *stored)
{
        fprintf(stderr, "fuzz_password_parse: %s (stored \"%s\")\n", what, stored);
        abort();
}

/* "<name>=<1 or 2 digits, no leading zero><sep>". */
static const char *ref_field(const char *s, const char *name, char sep, unsigned *out)
{
        size_t nl = strlen(name);

        if (strncmp(s, name, nl) != 0 || s[nl] != '=')
                return NULL;
        s += nl + 1;
        if (s[0] < '1' || s[0] > '9')
                return NULL;
        *out = (unsigned)(s[0] - '0');
        s++;
        if (s[0] >= '0' && s[0] <= '9') {
                *out = *out * 10 + (unsigned)(s[0] - '0');
                s++;
        }
        return *s == sep ? s + 1 : NULL;
}

static int ref_b64(char c)
{
        const char *abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const char *hit = c != '\0' ? strchr(abc, c) : NULL;
        return hit != NULL ? (int)(hit - abc) : -1;
}

/* Unpadded standard base64 of exactly n chars; trailing bits are ignored. */
static bool ref_segment(const char *s, size_t n, uint8_t *out, size_t max, size_t *len)
{
        uint32_t acc = 0;
        unsigned bits = 0;

        *len = 0;
        if (n % 4 == 1 || n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0) > max)
                return false;
        for (size_t i = 0; i < n; i++) {
                int v = ref_b64(s[i]);
                if (v < 0)
                        return false;
                acc = acc << 6 | (uint32_t)v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out[(*len)++] = (uint8_t)(acc >> bits);
                }
        }
        return true;
}

static bool ref_parse(const char *s, ref_hash *h)
{
        if (strncmp(s, "$scrypt$", 8) != 0)
                return false;
        s += 8;
        if ((s = ref_field(s, "ln", ',', &h->ln)) == NULL ||
            (s = ref_field(s, "r", ',', &h->r)) == NULL ||
            (s = ref_field(s, "p", '$', &h->p)) == NULL)
                return false;
        const char *dollar = strchr(s, '$');
        if (dollar == NULL ||
            !ref_segment(s, (size_t)(dollar - s), h->salt, sizeof(h->salt), &h->salt_len) ||
            !ref_segment(dollar + 1, strlen(dollar + 1), h->key, sizeof(h->key), &h->key_len))
                return false;
        return h->ln >= REF_LN_MIN && h->ln <= REF_LN_MAX && h->r >= 1 && h->r <= REF_R_MAX &&
               h->p >= 1 && h->p <= REF_P_MAX && h->key_len >= REF_KEY_MIN &&
               h->key_len <= REF_KEY_MAX && h->salt_len >= REF_SALT_MIN &&
               h->salt_len <= REF_SALT_MAX;
}

/*
 * Whether verify might run an expensive scrypt. The parser only gets to
 * scrypt for "$scrypt$ln=<d>,r=<d>,p=<d>$", so reading the numbers more
 * leniently here can only skip more inputs, never fewer.
 */
static bool too_costly(const char *s)
{
        unsigned long ln, r, p;
        char *end;

        if (strncmp(s, "$scrypt$ln=", 11) != 0)
                return false;
        ln = strtoul(s + 11, &end, 10);
        if (strncmp(end, ",r=", 3) != 0)
                return false;
        r = strtoul(end + 3, &end, 10);
        if (strncmp(end, ",p=", 3) != 0)
                return false;
        p = strtoul(end + 3, &end, 10);
        if (ln < REF_LN_MIN || ln > REF_LN_MAX || r < 1 || r > REF_R_MAX || p < 1 || p > REF_P_MAX)
                return false; /* out of bounds: refused before scrypt */
        return ln > LN_MAX || (1ul << ln) * r * p > COST_MAX;
}

static void check(const char *stored)
{
        ref_hash h;
        bool ok = true, rehash = false;
        uint8_t key[REF_KEY_MAX];

        int rc = ks_password_verify(PASSWORD, stored, NULL, &ok, &rehash);
        bool parsed = ref_parse(stored, &h);
        if (rc != 0 && rc != -1)
                die("verify returned neither 0 nor -1", stored);
        if ((rc == 0) != parsed)
                die(parsed ? "verify refuses a well-formed hash"
                           : "verify accepts a malformed hash",
                    stored);
        if (rc != 0) {
                if (ok || rehash)
                        die("verify failed but set ok or needs_rehash", stored);
                return;
        }
        if (EVP_PBE_scrypt(PASSWORD, strlen(PASSWORD), h.salt, h.salt_len, (uint64_t)1 << h.ln, h.r,
                           h.p, 64ul << 20, key, h.key_len) != 1)
                die("EVP_PBE_scrypt failed on parameters verify accepted", stored);
        if (ok != (CRYPTO_memcmp(key, h.key, h.key_len) == 0))
                die("verify's answer differs from OpenSSL's scrypt", stored);
        if (!rehash)
                die("a hash with ln <= 12 does not need a rehash to the defaults", stored);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char stored[STORED_MAX + 1];

        if (size > STORED_MAX)
                return 0;
        memcpy(stored, data, size);
        stored[size] = '\0';
        if (!too_costly(stored))
                check(stored);
        return 0;
}
