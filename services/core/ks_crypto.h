/*
 * ks_crypto: the few primitives keelson needs, over OpenSSL 3: scrypt and the
 * self-describing password hash string, SHA-256, HMAC-SHA256, random bytes,
 * base64, base64url and hex, constant-time comparison.
 */
#ifndef KS_CRYPTO_H
#define KS_CRYPTO_H

#include "ks_code.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KS_SHA256_BYTES 32

typedef struct ks_scrypt_params {
        uint64_t n;       /* CPU/memory cost, a power of two > 1 */
        uint32_t r;       /* block size */
        uint32_t p;       /* parallelism */
        uint32_t key_len; /* derived key bytes */
        uint32_t salt_len;
} ks_scrypt_params;

/* N=16384, r=8, p=1, 64-byte key, 16-byte salt. */
extern const ks_scrypt_params KS_SCRYPT_DEFAULT;

/* Raw scrypt (RFC 7914). Returns 0, or -1 on bad parameters or failure. */
int ks_scrypt(const void *password, size_t password_len, const void *salt, size_t salt_len,
              uint64_t n, uint32_t r, uint32_t p, uint8_t *out, size_t out_len) KS_MUST_CHECK;

/* Longest string ks_password_hash produces, with its NUL. */
#define KS_PASSWORD_HASH_MAX 256

/*
 * Hashes a password with a fresh random salt into a string that carries its
 * parameters: "$scrypt$ln=14,r=8,p=1$<salt base64>$<key base64>" (ln = log2
 * N; unpadded standard base64). Returns 0 or -1.
 */
int ks_password_hash(const char *password, const ks_scrypt_params *params,
                     char out[KS_PASSWORD_HASH_MAX]) KS_MUST_CHECK;

/*
 * Verifies password against a stored string in constant time with respect to
 * the key. *ok is set; *needs_rehash is set when the stored parameters differ
 * from current (may be NULL). Returns 0, or -1 if stored is malformed or its
 * parameters are outside sane bounds (then *ok is false).
 */
int ks_password_verify(const char *password, const char *stored, const ks_scrypt_params *current,
                       bool *ok, bool *needs_rehash) KS_MUST_CHECK;

void ks_sha256(const void *data, size_t len, uint8_t out[KS_SHA256_BYTES]);
/* Lower-case hex of SHA-256; out holds 65 bytes. */
void ks_sha256_hex(const void *data, size_t len, char out[2 * KS_SHA256_BYTES + 1]);

int ks_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                   uint8_t out[KS_SHA256_BYTES]) KS_MUST_CHECK;

/* Cryptographically secure random bytes. Returns 0 or -1. */
int ks_random_bytes(void *out, size_t len) KS_MUST_CHECK;

/* A random RFC 4122 version 4 uuid in its 36-character text form (+ NUL). */
int ks_uuid_v4(char out[37]) KS_MUST_CHECK;

/*
 * An RFC 9562 version 7 uuid, the same text form: the wall clock's Unix
 * milliseconds in the first 48 bits, the fraction of the millisecond in
 * the 12 after the version (the RFC's method 3), then 62 random bits. Ids
 * made later sort later (to 1/4096 ms, while the clock does not step
 * back), so a row's key lands beside the last one made and not at a random
 * place in every index it is in: the id for rows a service creates by the
 * thousand (an invoice, a subscription, an event). It tells when it was
 * made, to the millisecond.
 */
int ks_uuid_v7(char out[37]) KS_MUST_CHECK;

/* Lower-case hex of n bytes into out (2 * n + 1 bytes, NUL-terminated). */
void ks_hex_encode(const void *data, size_t n, char *out);

/* The value of one hex digit, either case; -1 for any other character. */
int ks_hex_digit(char c);

/* True for the 36-character text form of a uuid: hex digits (either case), dashes at 8-13-18-23. */
bool ks_uuid_valid(const char *s);

/* True when a and b (n bytes each) are equal, in time independent of content. */
bool ks_consttime_equal(const void *a, const void *b, size_t n);

/*
 * Base64: standard alphabet with padding, or URL-safe without padding.
 * Encoders write a NUL-terminated string and return its length, or -1 when
 * out_len is too small (need 4*ceil(n/3)+1). Decoders accept both alphabets,
 * padded or not, reject anything else, and return the decoded length or -1.
 */
#define KS_BASE64_LEN(n) (4 * (((n) + 2) / 3) + 1)
int ks_base64_encode(const void *in, size_t n, char *out, size_t out_len) KS_MUST_CHECK;
int ks_base64url_encode(const void *in, size_t n, char *out, size_t out_len) KS_MUST_CHECK;
int ks_base64_decode(const char *in, size_t n, uint8_t *out, size_t out_len) KS_MUST_CHECK;

#endif
