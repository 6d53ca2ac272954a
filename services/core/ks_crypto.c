/*
 * ks_crypto: scrypt, the password hash string, SHA-256, HMAC-SHA256, random
 * bytes, uuids, base64 and constant-time comparison over OpenSSL 3.
 *
 * Algorithm objects (the scrypt KDF, SHA-256, the HMAC template) are fetched
 * once per process: an OpenSSL 3 fetch per call costs more than hashing a
 * short message, and the gateway hashes every bearer token it sees.
 */
#include "ks_crypto.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

const ks_scrypt_params KS_SCRYPT_DEFAULT = {
    .n = 16384,
    .r = 8,
    .p = 1,
    .key_len = 64,
    .salt_len = 16,
};

/* Bounds on what a stored or requested password hash may ask for. */
#define PW_LN_MIN   1
#define PW_LN_MAX   20
#define PW_R_MAX    32
#define PW_P_MAX    16
#define PW_KEY_MIN  16
#define PW_KEY_MAX  128
#define PW_SALT_MIN 8
#define PW_SALT_MAX 64

/* Slack over scrypt's own buffers (B and V) so OpenSSL's maxmem check passes. */
#define SCRYPT_MEM_MARGIN (1u << 20)

/* ------------------------------------------------------------------------ */
/* Base64                                                                   */
/* ------------------------------------------------------------------------ */

static const char b64_std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char b64_url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static int b64_encode(const char *alphabet, bool pad, const void *in, size_t n, char *out,
                      size_t out_len)
{
        const uint8_t *p = in;
        size_t need = pad ? 4 * ((n + 2) / 3) : (n / 3) * 4 + (n % 3 ? n % 3 + 1 : 0);
        size_t i, o = 0;

        if (out == NULL || n > (size_t)INT_MAX / 4 * 3 - 3 || out_len < need + 1) {
                return -1;
        }
        for (i = 0; i + 3 <= n; i += 3) {
                uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
                out[o++] = alphabet[v >> 18 & 63];
                out[o++] = alphabet[v >> 12 & 63];
                out[o++] = alphabet[v >> 6 & 63];
                out[o++] = alphabet[v & 63];
        }
        if (n - i == 1) {
                uint32_t v = (uint32_t)p[i] << 16;
                out[o++] = alphabet[v >> 18 & 63];
                out[o++] = alphabet[v >> 12 & 63];
                if (pad) {
                        out[o++] = '=';
                        out[o++] = '=';
                }
        } else if (n - i == 2) {
                uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
                out[o++] = alphabet[v >> 18 & 63];
                out[o++] = alphabet[v >> 12 & 63];
                out[o++] = alphabet[v >> 6 & 63];
                if (pad) {
                        out[o++] = '=';
                }
        }
        out[o] = '\0';
        return (int)o;
}

int ks_base64_encode(const void *in, size_t n, char *out, size_t out_len)
{
        return b64_encode(b64_std, true, in, n, out, out_len);
}

int ks_base64url_encode(const void *in, size_t n, char *out, size_t out_len)
{
        return b64_encode(b64_url, false, in, n, out, out_len);
}

/* The 6-bit value of c in either alphabet, or -1. */
static int b64_value(char c)
{
        if (c >= 'A' && c <= 'Z') {
                return c - 'A';
        }
        if (c >= 'a' && c <= 'z') {
                return c - 'a' + 26;
        }
        if (c >= '0' && c <= '9') {
                return c - '0' + 52;
        }
        if (c == '+' || c == '-') {
                return 62;
        }
        if (c == '/' || c == '_') {
                return 63;
        }
        return -1;
}

/*
 * Strips the padding of a padded input: padding is all-or-nothing, so when
 * present the length must be a multiple of 4 and at most two '=' end it.
 * Returns the length of the data characters, or -1.
 */
static long b64_data_len(const char *in, size_t n)
{
        size_t pad = 0;

        while (pad < n && pad < 3 && in[n - 1 - pad] == '=') {
                pad++;
        }
        if (pad == 0) {
                return n % 4 == 1 ? -1 : (long)n;
        }
        if (pad > 2 || n % 4 != 0) {
                return -1;
        }
        return (long)(n - pad);
}

int ks_base64_decode(const char *in, size_t n, uint8_t *out, size_t out_len)
{
        long data_len;
        size_t len, need, i, o = 0;
        uint32_t acc = 0;
        unsigned bits = 0;

        if ((in == NULL && n > 0) || n > (size_t)INT_MAX) {
                return -1;
        }
        if ((data_len = b64_data_len(in, n)) < 0) {
                return -1;
        }
        len = (size_t)data_len;
        need = len / 4 * 3 + (len % 4 ? len % 4 - 1 : 0);
        if (need > out_len || (need > 0 && out == NULL)) {
                return -1;
        }
        for (i = 0; i < len; i++) {
                int v = b64_value(in[i]);
                if (v < 0) {
                        return -1;
                }
                acc = (acc << 6 | (uint32_t)v) & 0xffffff;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out[o++] = (uint8_t)(acc >> bits);
                }
        }
        return (int)o;
}

/* ------------------------------------------------------------------------ */
/* Algorithm objects, fetched once                                          */
/* ------------------------------------------------------------------------ */

static pthread_once_t algs_once = PTHREAD_ONCE_INIT;
static EVP_KDF *alg_scrypt;
static EVP_MD *alg_sha256;
static EVP_MAC_CTX *alg_hmac_template; /* HMAC with SHA-256 set, no key */

static void algs_fetch(void)
{
        EVP_MAC *mac;
        OSSL_PARAM params[2];

        alg_scrypt = EVP_KDF_fetch(NULL, OSSL_KDF_NAME_SCRYPT, NULL);
        alg_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
        mac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
        if (mac != NULL) {
                alg_hmac_template = EVP_MAC_CTX_new(mac);
                /* The context holds its own reference to mac. */
                EVP_MAC_free(mac);
        }
        if (alg_hmac_template != NULL) {
                params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0);
                params[1] = OSSL_PARAM_construct_end();
                if (EVP_MAC_CTX_set_params(alg_hmac_template, params) != 1) {
                        EVP_MAC_CTX_free(alg_hmac_template);
                        alg_hmac_template = NULL;
                }
        }
}

static void algs_init(void)
{
        (void)pthread_once(&algs_once, algs_fetch);
}

/* ------------------------------------------------------------------------ */
/* scrypt                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * The memory scrypt needs (B: 128*r*p, V: 128*r*(N+2)) plus a margin, which
 * becomes OpenSSL's maxmem so that its 32 MiB default never refuses a cost we
 * were asked for. -1 on overflow.
 */
static int scrypt_maxmem(uint64_t n, uint32_t r, uint32_t p, uint64_t *out)
{
        uint64_t v, b;

        if (__builtin_mul_overflow((uint64_t)128 * r, n + 2, &v) ||
            __builtin_mul_overflow((uint64_t)128 * r, (uint64_t)p, &b) ||
            __builtin_add_overflow(v, b, out) ||
            __builtin_add_overflow(*out, (uint64_t)SCRYPT_MEM_MARGIN, out)) {
                return -1;
        }
        return 0;
}

int ks_scrypt(const void *password, size_t password_len, const void *salt, size_t salt_len,
              uint64_t n, uint32_t r, uint32_t p, uint8_t *out, size_t out_len)
{
        static const unsigned char empty[1];
        OSSL_PARAM params[7], *q = params;
        EVP_KDF_CTX *ctx;
        uint64_t maxmem;
        int rc;

        if (n < 2 || (n & (n - 1)) != 0 || r == 0 || p == 0 || out == NULL || out_len == 0 ||
            (password == NULL && password_len > 0) || (salt == NULL && salt_len > 0) ||
            scrypt_maxmem(n, r, p, &maxmem) != 0) {
                return -1;
        }
        algs_init();
        if (alg_scrypt == NULL || (ctx = EVP_KDF_CTX_new(alg_scrypt)) == NULL) {
                return -1;
        }
        /* OpenSSL wants a non-NULL pointer even for an empty octet string. */
        *q++ = OSSL_PARAM_construct_octet_string(
            OSSL_KDF_PARAM_PASSWORD, password_len ? (void *)password : (void *)empty, password_len);
        *q++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT,
                                                 salt_len ? (void *)salt : (void *)empty, salt_len);
        *q++ = OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_SCRYPT_N, &n);
        *q++ = OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_SCRYPT_R, &r);
        *q++ = OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_SCRYPT_P, &p);
        *q++ = OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_SCRYPT_MAXMEM, &maxmem);
        *q = OSSL_PARAM_construct_end();
        rc = EVP_KDF_derive(ctx, out, out_len, params) == 1 ? 0 : -1;
        EVP_KDF_CTX_free(ctx);
        return rc;
}

/* ------------------------------------------------------------------------ */
/* Password hash strings                                                    */
/* ------------------------------------------------------------------------ */

#define PW_PREFIX "$scrypt$"

/* log2(n) when n is a power of two with log2 in the stored-hash bounds. */
static int pw_log2(uint64_t n)
{
        int ln;

        if (n < 2 || (n & (n - 1)) != 0) {
                return -1;
        }
        ln = __builtin_ctzll(n);
        return ln >= PW_LN_MIN && ln <= PW_LN_MAX ? ln : -1;
}

static bool pw_params_ok(const ks_scrypt_params *pp)
{
        return pw_log2(pp->n) > 0 && pp->r >= 1 && pp->r <= PW_R_MAX && pp->p >= 1 &&
               pp->p <= PW_P_MAX && pp->key_len >= PW_KEY_MIN && pp->key_len <= PW_KEY_MAX &&
               pp->salt_len >= PW_SALT_MIN && pp->salt_len <= PW_SALT_MAX;
}

int ks_password_hash(const char *password, const ks_scrypt_params *params,
                     char out[KS_PASSWORD_HASH_MAX])
{
        uint8_t salt[PW_SALT_MAX], key[PW_KEY_MAX];
        char salt_b64[KS_BASE64_LEN(PW_SALT_MAX)], key_b64[KS_BASE64_LEN(PW_KEY_MAX)];
        int rc = -1, len;

        if (params == NULL) {
                params = &KS_SCRYPT_DEFAULT;
        }
        if (password == NULL || out == NULL || !pw_params_ok(params)) {
                return -1;
        }
        out[0] = '\0';
        if (ks_random_bytes(salt, params->salt_len) != 0 ||
            ks_scrypt(password, strlen(password), salt, params->salt_len, params->n, params->r,
                      params->p, key, params->key_len) != 0) {
                goto done;
        }
        /* Unpadded standard base64: strip the '=' the encoder adds. */
        if (b64_encode(b64_std, false, salt, params->salt_len, salt_b64, sizeof(salt_b64)) < 0 ||
            b64_encode(b64_std, false, key, params->key_len, key_b64, sizeof(key_b64)) < 0) {
                goto done;
        }
        len = snprintf(out, KS_PASSWORD_HASH_MAX, PW_PREFIX "ln=%d,r=%u,p=%u$%s$%s",
                       pw_log2(params->n), params->r, params->p, salt_b64, key_b64);
        /* The largest salt with the largest key would not fit: refuse, never truncate. */
        if (len > 0 && len < KS_PASSWORD_HASH_MAX) {
                rc = 0;
        } else {
                out[0] = '\0';
        }
done:
        OPENSSL_cleanse(key, sizeof(key));
        return rc;
}

/*
 * Parses "<name>=<decimal>" at *s, then the separator sep. Strict: no sign,
 * no leading zero, at most 2 digits (every bound is below 100).
 */
static int pw_parse_field(const char **s, const char *name, char sep, unsigned *out)
{
        size_t nl = strlen(name);
        const char *p = *s;
        unsigned v = 0;
        int digits = 0;

        if (strncmp(p, name, nl) != 0 || p[nl] != '=') {
                return -1;
        }
        p += nl + 1;
        if (*p == '0') {
                return -1;
        }
        while (*p >= '0' && *p <= '9' && digits < 3) {
                v = v * 10 + (unsigned)(*p++ - '0');
                digits++;
        }
        if (digits == 0 || digits > 2 || *p != sep) {
                return -1;
        }
        *out = v;
        *s = p + 1;
        return 0;
}

/* Decodes an unpadded standard-base64 segment of exactly len characters. */
static int pw_decode_segment(const char *s, size_t len, uint8_t *out, size_t out_max)
{
        size_t i;

        for (i = 0; i < len; i++) {
                char c = s[i];
                if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '+' || c == '/')) {
                        return -1;
                }
        }
        return ks_base64_decode(s, len, out, out_max);
}

typedef struct pw_stored {
        ks_scrypt_params params;
        uint8_t salt[PW_SALT_MAX];
        uint8_t key[PW_KEY_MAX];
} pw_stored;

static int pw_parse(const char *stored, pw_stored *ps)
{
        const char *p = stored, *dollar;
        unsigned ln, r, pp;
        int salt_len, key_len;

        if (strncmp(p, PW_PREFIX, strlen(PW_PREFIX)) != 0) {
                return -1;
        }
        p += strlen(PW_PREFIX);
        if (pw_parse_field(&p, "ln", ',', &ln) != 0 || pw_parse_field(&p, "r", ',', &r) != 0 ||
            pw_parse_field(&p, "p", '$', &pp) != 0) {
                return -1;
        }
        if ((dollar = strchr(p, '$')) == NULL) {
                return -1;
        }
        salt_len = pw_decode_segment(p, (size_t)(dollar - p), ps->salt, sizeof(ps->salt));
        p = dollar + 1;
        key_len = pw_decode_segment(p, strlen(p), ps->key, sizeof(ps->key));
        if (salt_len < 0 || key_len < 0 || ln < PW_LN_MIN || ln > PW_LN_MAX) {
                return -1;
        }
        ps->params.n = (uint64_t)1 << ln;
        ps->params.r = r;
        ps->params.p = pp;
        ps->params.key_len = (uint32_t)key_len;
        ps->params.salt_len = (uint32_t)salt_len;
        return pw_params_ok(&ps->params) ? 0 : -1;
}

int ks_password_verify(const char *password, const char *stored, const ks_scrypt_params *current,
                       bool *ok, bool *needs_rehash)
{
        pw_stored ps;
        uint8_t key[PW_KEY_MAX];
        int rc = -1;

        if (ok != NULL) {
                *ok = false;
        }
        if (needs_rehash != NULL) {
                *needs_rehash = false;
        }
        if (current == NULL) {
                current = &KS_SCRYPT_DEFAULT;
        }
        if (password == NULL || stored == NULL || ok == NULL || pw_parse(stored, &ps) != 0) {
                return -1;
        }
        if (ks_scrypt(password, strlen(password), ps.salt, ps.params.salt_len, ps.params.n,
                      ps.params.r, ps.params.p, key, ps.params.key_len) == 0) {
                *ok = CRYPTO_memcmp(key, ps.key, ps.params.key_len) == 0;
                rc = 0;
        }
        if (rc == 0 && needs_rehash != NULL) {
                *needs_rehash = ps.params.n != current->n || ps.params.r != current->r ||
                                ps.params.p != current->p ||
                                ps.params.key_len != current->key_len ||
                                ps.params.salt_len != current->salt_len;
        }
        OPENSSL_cleanse(key, sizeof(key));
        return rc;
}

/* ------------------------------------------------------------------------ */
/* Digests, MACs, randomness                                                */
/* ------------------------------------------------------------------------ */

void ks_sha256(const void *data, size_t len, uint8_t out[KS_SHA256_BYTES])
{
        unsigned int out_len = 0;

        algs_init();
        /* A failure here means OpenSSL itself is broken: there is no caller to tell. */
        if (alg_sha256 == NULL || EVP_Digest(data, len, out, &out_len, alg_sha256, NULL) != 1) {
                abort();
        }
}

void ks_sha256_hex(const void *data, size_t len, char out[2 * KS_SHA256_BYTES + 1])
{
        uint8_t d[KS_SHA256_BYTES];

        ks_sha256(data, len, d);
        ks_hex_encode(d, sizeof(d), out);
}

void ks_hex_encode(const void *data, size_t n, char *out)
{
        static const char hex[] = "0123456789abcdef";
        const uint8_t *b = data;

        for (size_t i = 0; i < n; i++) {
                out[2 * i] = hex[b[i] >> 4];
                out[2 * i + 1] = hex[b[i] & 15];
        }
        out[2 * n] = '\0';
}

int ks_hex_digit(char c)
{
        if (c >= '0' && c <= '9') {
                return c - '0';
        }
        if (c >= 'a' && c <= 'f') {
                return c - 'a' + 10;
        }
        if (c >= 'A' && c <= 'F') {
                return c - 'A' + 10;
        }
        return -1;
}

int ks_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                   uint8_t out[KS_SHA256_BYTES])
{
        static const unsigned char empty[1];
        EVP_MAC_CTX *ctx;
        size_t out_len = 0;
        int rc = -1;

        if ((key == NULL && key_len > 0) || (msg == NULL && msg_len > 0) || out == NULL) {
                return -1;
        }
        algs_init();
        /* Duplicating the template skips the digest fetch a fresh context would do. */
        if (alg_hmac_template == NULL || (ctx = EVP_MAC_CTX_dup(alg_hmac_template)) == NULL) {
                return -1;
        }
        if (EVP_MAC_init(ctx, key_len ? key : empty, key_len, NULL) == 1 &&
            EVP_MAC_update(ctx, msg_len ? msg : empty, msg_len) == 1 &&
            EVP_MAC_final(ctx, out, &out_len, KS_SHA256_BYTES) == 1 && out_len == KS_SHA256_BYTES) {
                rc = 0;
        }
        EVP_MAC_CTX_free(ctx);
        return rc;
}

int ks_random_bytes(void *out, size_t len)
{
        uint8_t *p = out;

        if (out == NULL && len > 0) {
                return -1;
        }
        /* RAND_bytes takes an int: feed it in bounded chunks. */
        while (len > 0) {
                size_t chunk = len > (1u << 20) ? (1u << 20) : len;
                if (RAND_bytes(p, (int)chunk) != 1) {
                        return -1;
                }
                p += chunk;
                len -= chunk;
        }
        return 0;
}

/*
 * Identifiers are drawn from a per-thread store of random bytes, refilled
 * from RAND_bytes 32 identifiers at a time: a call to RAND_bytes for each
 * (its locks and its DRBG's set-up) was a tenth of the gateway's cost of a
 * request. A fork empties the forking thread's store in the child, so a
 * child never hands out the identifiers its parent will.
 */
#define UUID_STORE_BYTES (16 * 32)

static _Thread_local uint8_t uuid_store[UUID_STORE_BYTES];
static _Thread_local size_t uuid_store_left;
static pthread_once_t uuid_fork_once = PTHREAD_ONCE_INIT;

static void uuid_store_forget(void)
{
        uuid_store_left = 0;
}

static void uuid_fork_hook(void)
{
        (void)pthread_atfork(NULL, NULL, uuid_store_forget);
}

static int uuid_bytes(uint8_t b[16])
{
        if (uuid_store_left < 16) {
                (void)pthread_once(&uuid_fork_once, uuid_fork_hook);
                if (ks_random_bytes(uuid_store, sizeof(uuid_store)) != 0) {
                        return -1;
                }
                uuid_store_left = sizeof(uuid_store);
        }
        uuid_store_left -= 16;
        memcpy(b, uuid_store + uuid_store_left, 16);
        return 0;
}

static void uuid_text(const uint8_t b[16], char out[37])
{
        static const char hex[] = "0123456789abcdef";
        char *o = out;

        for (int i = 0; i < 16; i++) {
                if (i == 4 || i == 6 || i == 8 || i == 10) {
                        *o++ = '-';
                }
                *o++ = hex[b[i] >> 4];
                *o++ = hex[b[i] & 15];
        }
        *o = '\0';
}

int ks_uuid_v4(char out[37])
{
        uint8_t b[16];

        if (out == NULL || uuid_bytes(b) != 0) {
                return -1;
        }
        b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
        b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
        uuid_text(b, out);
        return 0;
}

int ks_uuid_v7(char out[37])
{
        struct timespec ts;
        uint8_t b[16];

        if (out == NULL || uuid_bytes(b) != 0 || clock_gettime(CLOCK_REALTIME, &ts) != 0 ||
            ts.tv_sec < 0) {
                return -1;
        }
        uint64_t ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
        /* The fraction of the millisecond in 1/4096ths: 0..4095. */
        uint32_t frac = (uint32_t)(((uint64_t)ts.tv_nsec % 1000000u) * 4096u / 1000000u);
        for (int i = 0; i < 6; i++) {
                b[i] = (uint8_t)(ms >> (40 - 8 * i));
        }
        b[6] = (uint8_t)(0x70 | (frac >> 8)); /* version 7, then the fraction's high 4 bits */
        b[7] = (uint8_t)(frac & 0xff);
        b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* RFC 9562 variant */
        uuid_text(b, out);
        return 0;
}

bool ks_uuid_valid(const char *s)
{
        if (s == NULL || strlen(s) != 36) {
                return false;
        }
        for (int i = 0; i < 36; i++) {
                bool dash = i == 8 || i == 13 || i == 18 || i == 23;
                if (dash ? s[i] != '-' : ks_hex_digit(s[i]) < 0) {
                        return false;
                }
        }
        return true;
}

bool ks_consttime_equal(const void *a, const void *b, size_t n)
{
        return CRYPTO_memcmp(a, b, n) == 0;
}
