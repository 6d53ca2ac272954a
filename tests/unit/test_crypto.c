/*
 * ks_crypto against the published test vectors (RFC 7914 section 12 for
 * scrypt, RFC 4231 for HMAC-SHA256, FIPS 180-2 for SHA-256), plus the
 * password hash string, base64 and uuids.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ks_crypto.h"

/* Parses lower-case hex into out; returns the byte count. */
static size_t unhex(const char *hex, uint8_t *out, size_t out_max)
{
        size_t n = strlen(hex) / 2, i;
        assert_true(n <= out_max);
        for (i = 0; i < n; i++) {
                unsigned v;
                assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
                out[i] = (uint8_t)v;
        }
        return n;
}

static void assert_bytes_hex(const uint8_t *got, size_t n, const char *want_hex)
{
        uint8_t want[256];
        assert_int_equal(unhex(want_hex, want, sizeof(want)), n);
        assert_memory_equal(got, want, n);
}

/* ---- scrypt: RFC 7914 section 12 ---------------------------------------- */

static void scrypt_vector(const char *pw, const char *salt, uint64_t n, uint32_t r, uint32_t p,
                          const char *want_hex)
{
        uint8_t out[64];
        assert_int_equal(ks_scrypt(pw, strlen(pw), salt, strlen(salt), n, r, p, out, sizeof(out)),
                         0);
        assert_bytes_hex(out, sizeof(out), want_hex);
}

static void test_scrypt_rfc7914_1(void **state)
{
        (void)state;
        scrypt_vector("", "", 16, 1, 1,
                      "77d6576238657b203b19ca42c18a0497f16b4844e3074ae8dfdffa3fede21442"
                      "fcd0069ded0948f8326a753a0fc81f17e8d3e0fb2e0d3628cf35e20c38d18906");
}

static void test_scrypt_rfc7914_2(void **state)
{
        (void)state;
        scrypt_vector("password", "NaCl", 1024, 8, 16,
                      "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b373162"
                      "2eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640");
}

static void test_scrypt_rfc7914_3(void **state)
{
        (void)state;
        scrypt_vector("pleaseletmein", "SodiumChloride", 16384, 8, 1,
                      "7023bdcb3afd7348461c06cd81fd38ebfda8fbba904f8e3ea9b543f6545da1f2"
                      "d5432955613f0fcf62d49705242a9af9e61e85dc0d651e40dfcf017b45575887");
}

/* N=2^20, r=8: about 1 GiB of memory, past OpenSSL's 32 MiB default maxmem. */
static void test_scrypt_rfc7914_4(void **state)
{
        (void)state;
        scrypt_vector("pleaseletmein", "SodiumChloride", 1048576, 8, 1,
                      "2101cb9b6a511aaeaddbbe09cf70f881ec568d574a2ffd4dabe5ee9820adaa47"
                      "8e56fd8f4ba5d09ffa1c6d927c40f4c337304049e8a952fbcbf45c6fa77a41a4");
}

static void test_scrypt_bad_params(void **state)
{
        uint8_t out[32];
        (void)state;
        assert_int_equal(ks_scrypt("pw", 2, "salt", 4, 1000, 8, 1, out, sizeof(out)), -1);
        assert_int_equal(ks_scrypt("pw", 2, "salt", 4, 1, 8, 1, out, sizeof(out)), -1);
        assert_int_equal(ks_scrypt("pw", 2, "salt", 4, 16, 0, 1, out, sizeof(out)), -1);
        assert_int_equal(ks_scrypt("pw", 2, "salt", 4, 16, 1, 0, out, sizeof(out)), -1);
        assert_int_equal(ks_scrypt("pw", 2, "salt", 4, 16, 1, 1, out, 0), -1);
}

/* ---- HMAC-SHA256: RFC 4231 ----------------------------------------------- */

static void hmac_vector(const uint8_t *key, size_t key_len, const void *msg, size_t msg_len,
                        const char *want_hex)
{
        uint8_t out[KS_SHA256_BYTES];
        assert_int_equal(ks_hmac_sha256(key, key_len, msg, msg_len, out), 0);
        assert_bytes_hex(out, strlen(want_hex) / 2, want_hex);
}

static void test_hmac_rfc4231(void **state)
{
        uint8_t k[131], d[50];
        size_t i;
        const char *big_key = "Test Using Larger Than Block-Size Key - Hash Key First";
        const char *big_data = "This is a test using a larger than block-size key and a larger "
                               "than block-size data. The key needs to be hashed before being "
                               "used by the HMAC algorithm.";
        (void)state;

        memset(k, 0x0b, 20); /* case 1 */
        hmac_vector(k, 20, "Hi There", 8,
                    "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
        hmac_vector((const uint8_t *)"Jefe", 4, "what do ya want for nothing?", 28, /* case 2 */
                    "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        memset(k, 0xaa, 20); /* case 3 */
        memset(d, 0xdd, 50);
        hmac_vector(k, 20, d, 50,
                    "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
        for (i = 0; i < 25; i++) { /* case 4 */
                k[i] = (uint8_t)(i + 1);
        }
        memset(d, 0xcd, 50);
        hmac_vector(k, 25, d, 50,
                    "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
        memset(k, 0x0c, 20); /* case 5: truncated to 128 bits */
        hmac_vector(k, 20, "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b");
        memset(k, 0xaa, 131); /* cases 6 and 7: keys longer than a block */
        hmac_vector(k, 131, big_key, strlen(big_key),
                    "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
        hmac_vector(k, 131, big_data, strlen(big_data),
                    "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

/* ---- SHA-256 ------------------------------------------------------------- */

static void test_sha256_abc(void **state)
{
        uint8_t d[KS_SHA256_BYTES];
        char hex[2 * KS_SHA256_BYTES + 1];
        const char *want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        (void)state;
        ks_sha256("abc", 3, d);
        assert_bytes_hex(d, sizeof(d), want);
        ks_sha256_hex("abc", 3, hex);
        assert_string_equal(hex, want);
        ks_sha256_hex("", 0, hex);
        assert_string_equal(hex,
                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

/* ---- password hashes ----------------------------------------------------- */

static void test_password_roundtrip(void **state)
{
        char h[KS_PASSWORD_HASH_MAX];
        bool ok = false, rehash = true;
        (void)state;

        assert_int_equal(ks_password_hash("correct horse", &KS_SCRYPT_DEFAULT, h), 0);
        assert_int_equal(strncmp(h, "$scrypt$ln=14,r=8,p=1$", 22), 0);
        /* 16-byte salt and 64-byte key, unpadded: 22 and 86 characters. */
        assert_int_equal(strlen(h), 22 + 22 + 1 + 86);
        assert_null(strchr(h + 22, '=')); /* unpadded */

        assert_int_equal(ks_password_verify("correct horse", h, &KS_SCRYPT_DEFAULT, &ok, &rehash),
                         0);
        assert_true(ok);
        assert_false(rehash);
        assert_int_equal(ks_password_verify("correct horsf", h, &KS_SCRYPT_DEFAULT, &ok, &rehash),
                         0);
        assert_false(ok);
        assert_int_equal(ks_password_verify("", h, &KS_SCRYPT_DEFAULT, &ok, NULL), 0);
        assert_false(ok);
}

static void test_password_salted(void **state)
{
        char a[KS_PASSWORD_HASH_MAX], b[KS_PASSWORD_HASH_MAX];
        (void)state;
        assert_int_equal(ks_password_hash("same", &KS_SCRYPT_DEFAULT, a), 0);
        assert_int_equal(ks_password_hash("same", &KS_SCRYPT_DEFAULT, b), 0);
        assert_string_not_equal(a, b);
}

static void test_password_other_params(void **state)
{
        const ks_scrypt_params old = {.n = 1024, .r = 4, .p = 2, .key_len = 32, .salt_len = 8};
        const ks_scrypt_params longer_key = {
            .n = 16384, .r = 8, .p = 1, .key_len = 32, .salt_len = 16};
        const ks_scrypt_params cheaper = {.n = 1024, .r = 8, .p = 1, .key_len = 64, .salt_len = 16};
        char h[KS_PASSWORD_HASH_MAX];
        bool ok = false, rehash = false;
        (void)state;

        assert_int_equal(ks_password_hash("pw", &old, h), 0);
        assert_int_equal(strncmp(h, "$scrypt$ln=10,r=4,p=2$", 22), 0);
        assert_int_equal(ks_password_verify("pw", h, &KS_SCRYPT_DEFAULT, &ok, &rehash), 0);
        assert_true(ok);
        assert_true(rehash);
        /* Only the cost changed (the usual upgrade): a rehash. */
        assert_int_equal(ks_password_hash("pw", &cheaper, h), 0);
        assert_int_equal(strncmp(h, "$scrypt$ln=10,r=8,p=1$", 22), 0);
        assert_int_equal(ks_password_verify("pw", h, &KS_SCRYPT_DEFAULT, &ok, &rehash), 0);
        assert_true(ok);
        assert_true(rehash);
        /* Same cost, other key length: still a rehash. */
        assert_int_equal(ks_password_hash("pw", &longer_key, h), 0);
        assert_int_equal(ks_password_verify("pw", h, &KS_SCRYPT_DEFAULT, &ok, &rehash), 0);
        assert_true(ok);
        assert_true(rehash);
        assert_int_equal(ks_password_verify("pw", h, &longer_key, &ok, &rehash), 0);
        assert_true(ok);
        assert_false(rehash);
}

/* A known string, made once with the default parameters, keeps verifying. */
static void test_password_known_string(void **state)
{
        uint8_t salt[16], key[64];
        char s64[KS_BASE64_LEN(16)], k64[KS_BASE64_LEN(64)], h[KS_PASSWORD_HASH_MAX];
        bool ok = false;
        (void)state;
        memset(salt, 7, sizeof(salt));
        assert_int_equal(ks_scrypt("hunter2", 7, salt, 16, 16384, 8, 1, key, 64), 0);
        assert_int_equal(ks_base64_encode(salt, 16, s64, sizeof(s64)), 24);
        assert_int_equal(ks_base64_encode(key, 64, k64, sizeof(k64)), 88);
        s64[22] = '\0'; /* drop the padding */
        k64[86] = '\0';
        snprintf(h, sizeof(h), "$scrypt$ln=14,r=8,p=1$%s$%s", s64, k64);
        assert_int_equal(ks_password_verify("hunter2", h, NULL, &ok, NULL), 0);
        assert_true(ok);
}

static void test_password_malformed(void **state)
{
        char good[KS_PASSWORD_HASH_MAX], bad[KS_PASSWORD_HASH_MAX + 8];
        bool ok = true, rehash = true;
        char *dollar;
        size_t i;
        /* Each is a good hash with one piece replaced. */
        static const char *const broken[] = {
            "$scrypt$ln=14,r=8,p=1$",    /* no salt, no key */
            "$scrypt$ln=21,r=8,p=1$A$B", /* N above bounds */
            "$bcrypt$ln=14,r=8,p=1$AAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",
            "$scrypt$ln=0,r=8,p=1$AAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",
            "$scrypt$ln=14,r=33,p=1$AAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",
            "$scrypt$ln=14,r=8,p=17$AAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",
            "$scrypt$ln=14,r=8,p=01$AAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",
            "$scrypt$ln=14,r=8,p=-1$AAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",
            "$scrypt$ln=14,p=1,r=8$AAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",
            "$scrypt$ln=14,r=8,p=1$AAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",  /* 4k+1 characters */
            "$scrypt$ln=14,r=8,p=1$AAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA",   /* salt 6 bytes */
            "$scrypt$ln=14,r=8,p=1$AAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAA", /* key 15 bytes */
            "$scrypt$ln=14,r=8,p=1$AAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAA$",
            "$scrypt$ln=14,r=8,p=1$AAAAAAAAAAA=$AAAAAAAAAAAAAAAAAAAAAA",
            "$scrypt$ln=14,r=8,p=1$AAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAA-",
            "",
        };
        (void)state;

        /* The stem of the broken strings is itself well formed. */
        assert_int_equal(ks_password_verify("pw",
                                            "$scrypt$ln=4,r=8,p=1$AAAAAAAAAAAA$"
                                            "AAAAAAAAAAAAAAAAAAAAAA",
                                            NULL, &ok, NULL),
                         0);
        assert_false(ok);
        for (i = 0; i < sizeof(broken) / sizeof(broken[0]); i++) {
                ok = rehash = true;
                assert_int_equal(ks_password_verify("pw", broken[i], NULL, &ok, &rehash), -1);
                assert_false(ok);
                assert_false(rehash);
        }

        assert_int_equal(ks_password_hash("pw", &KS_SCRYPT_DEFAULT, good), 0);
        /* Truncated anywhere inside its parameters or salt: rejected. */
        dollar = strrchr(good, '$');
        for (i = 1; good + i < dollar; i++) {
                snprintf(bad, sizeof(bad), "%.*s", (int)i, good);
                assert_int_equal(ks_password_verify("pw", bad, NULL, &ok, NULL), -1);
                assert_false(ok);
        }
        /* A foreign character in the key: rejected, not skipped. */
        snprintf(bad, sizeof(bad), "%s", good);
        bad[strlen(bad) - 5] = '*';
        assert_int_equal(ks_password_verify("pw", bad, NULL, &ok, NULL), -1);
        /* A well-formed but altered key: parses, does not match. */
        snprintf(bad, sizeof(bad), "%s", good);
        bad[strlen(bad) - 5] = bad[strlen(bad) - 5] == 'A' ? 'B' : 'A';
        assert_int_equal(ks_password_verify("pw", bad, NULL, &ok, NULL), 0);
        assert_false(ok);
}

static void test_password_hash_bad_params(void **state)
{
        char h[KS_PASSWORD_HASH_MAX];
        ks_scrypt_params p = KS_SCRYPT_DEFAULT;
        (void)state;
        p.n = 1000;
        assert_int_equal(ks_password_hash("pw", &p, h), -1);
        p = KS_SCRYPT_DEFAULT;
        p.salt_len = 4;
        assert_int_equal(ks_password_hash("pw", &p, h), -1);
        p = KS_SCRYPT_DEFAULT;
        p.key_len = 129;
        assert_int_equal(ks_password_hash("pw", &p, h), -1);
        /* Largest key and salt together would not fit the string: refused. */
        p = (ks_scrypt_params){.n = 16, .r = 1, .p = 1, .key_len = 128, .salt_len = 64};
        assert_int_equal(ks_password_hash("pw", &p, h), -1);
        p.salt_len = 32;
        assert_int_equal(ks_password_hash("pw", &p, h), 0);
        assert_true(strlen(h) < KS_PASSWORD_HASH_MAX);
}

/* ---- base64 -------------------------------------------------------------- */

static void test_base64_encode(void **state)
{
        char out[64];
        const uint8_t bin[] = {0xfb, 0xff, 0xfe};
        uint8_t big[32] = {0};
        (void)state;
        /* RFC 4648 section 10. */
        assert_int_equal(ks_base64_encode("", 0, out, sizeof(out)), 0);
        assert_string_equal(out, "");
        assert_int_equal(ks_base64_encode("f", 1, out, sizeof(out)), 4);
        assert_string_equal(out, "Zg==");
        assert_int_equal(ks_base64_encode("fo", 2, out, sizeof(out)), 4);
        assert_string_equal(out, "Zm8=");
        assert_int_equal(ks_base64_encode("foo", 3, out, sizeof(out)), 4);
        assert_string_equal(out, "Zm9v");
        assert_int_equal(ks_base64_encode("foobar", 6, out, sizeof(out)), 8);
        assert_string_equal(out, "Zm9vYmFy");
        assert_int_equal(ks_base64_encode(bin, 3, out, sizeof(out)), 4);
        assert_string_equal(out, "+//+");
        assert_int_equal(ks_base64url_encode(bin, 3, out, sizeof(out)), 4);
        assert_string_equal(out, "-__-");
        assert_int_equal(ks_base64url_encode("fo", 2, out, sizeof(out)), 3);
        assert_string_equal(out, "Zm8");
        /* Exactly KS_BASE64_LEN is enough; one less is not. */
        assert_int_equal(ks_base64_encode("fooba", 5, out, KS_BASE64_LEN(5)), 8);
        assert_string_equal(out, "Zm9vYmE=");
        assert_int_equal(ks_base64_encode("fooba", 5, out, KS_BASE64_LEN(5) - 1), -1);
        /* Unpadded output needs only its own length: 32 bytes fit 43 characters + NUL. */
        assert_int_equal(ks_base64url_encode(big, 32, out, 44), 43);
        assert_int_equal(strlen(out), 43);
        assert_int_equal(ks_base64url_encode(big, 32, out, 43), -1);
}

static void assert_decodes(const char *in, const void *want, size_t want_len)
{
        uint8_t out[64];
        assert_int_equal(ks_base64_decode(in, strlen(in), out, sizeof(out)), (int)want_len);
        assert_memory_equal(out, want, want_len);
}

static void test_base64_decode(void **state)
{
        const uint8_t bin[] = {0xfb, 0xff, 0xfe};
        uint8_t out[8];
        (void)state;
        assert_int_equal(ks_base64_decode("", 0, out, sizeof(out)), 0);
        assert_decodes("Zg==", "f", 1);
        assert_decodes("Zg", "f", 1);
        assert_decodes("Zm8=", "fo", 2);
        assert_decodes("Zm8", "fo", 2);
        assert_decodes("Zm9vYmFy", "foobar", 6);
        assert_decodes("+//+", bin, 3);
        assert_decodes("-__-", bin, 3);
        assert_decodes("-__-Zg==",
                       "\xfb\xff\xfe"
                       "f",
                       4);
        /* n bounds the input: what follows is not read. */
        assert_int_equal(ks_base64_decode("Zm9v!!!", 4, out, sizeof(out)), 3);
        assert_memory_equal(out, "foo", 3);
        /* The output must fit. */
        assert_int_equal(ks_base64_decode("Zm9vYmFy", 8, out, 5), -1);
        assert_int_equal(ks_base64_decode("Zm9vYmFy", 8, out, 6), 6);
}

static void test_base64_reject(void **state)
{
        static const char *const bad[] = {
            "Z",        /* a lone 6 bits */
            "Zm9vY",    /* 4k+1 characters */
            "Zg=",      /* partial padding */
            "Zg===",    /* too much padding */
            "Z===",     /* three pads */
            "====",     /* only padding */
            "Zm8==",    /* padded, not a multiple of 4 */
            "Zg==Zg==", /* padding in the middle */
            "Zm 9v",    /* whitespace */
            "Zm9v\n",   /* newline */
            "Zm.v",     /* foreign character */
            "Zm9v=",    /* padding after a full group */
        };
        uint8_t out[64];
        size_t i;
        (void)state;
        for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                assert_int_equal(ks_base64_decode(bad[i], strlen(bad[i]), out, sizeof(out)), -1);
        }
        assert_int_equal(ks_base64_decode("Zm\0v", 4, out, sizeof(out)), -1);
}

static void test_base64_roundtrip(void **state)
{
        uint8_t in[100], back[100];
        char enc[KS_BASE64_LEN(100)];
        size_t n;
        int len;
        (void)state;
        assert_int_equal(ks_random_bytes(in, sizeof(in)), 0);
        for (n = 0; n <= sizeof(in); n++) {
                len = ks_base64_encode(in, n, enc, sizeof(enc));
                assert_int_equal(len, 4 * ((n + 2) / 3));
                assert_int_equal(ks_base64_decode(enc, (size_t)len, back, sizeof(back)), (int)n);
                assert_memory_equal(back, in, n);
                len = ks_base64url_encode(in, n, enc, sizeof(enc));
                assert_null(strpbrk(enc, "+/="));
                assert_int_equal(ks_base64_decode(enc, (size_t)len, back, sizeof(back)), (int)n);
                assert_memory_equal(back, in, n);
        }
}

/* ---- uuid, random, consttime -------------------------------------------- */

static void test_uuid_v4(void **state)
{
        char a[37], b[37];
        size_t i;
        (void)state;
        assert_int_equal(ks_uuid_v4(a), 0);
        assert_int_equal(ks_uuid_v4(b), 0);
        assert_string_not_equal(a, b);
        assert_int_equal(strlen(a), 36);
        for (i = 0; i < 36; i++) {
                if (i == 8 || i == 13 || i == 18 || i == 23) {
                        assert_int_equal(a[i], '-');
                } else {
                        assert_non_null(strchr("0123456789abcdef", a[i]));
                }
        }
        assert_int_equal(a[14], '4');
        assert_non_null(strchr("89ab", a[19]));
}

static int cmp_uuid(const void *a, const void *b)
{
        return memcmp(a, b, 37);
}

/* Many in a row (several refills of the per-thread store): all valid, none twice. */
static void test_uuid_v4_distinct(void **state)
{
        enum { N = 5000 };
        static char ids[N][37];
        (void)state;
        for (int i = 0; i < N; i++) {
                assert_int_equal(ks_uuid_v4(ids[i]), 0);
                assert_true(ks_uuid_valid(ids[i]));
                assert_int_equal(ids[i][14], '4');
        }
        qsort(ids, N, sizeof(ids[0]), cmp_uuid);
        for (int i = 1; i < N; i++) {
                assert_string_not_equal(ids[i - 1], ids[i]);
        }
}

/*
 * A child forked with part of the store left must not hand out the ids its
 * parent hands out next: the store is emptied in the child.
 */
static void test_uuid_v4_fork(void **state)
{
        char first[37], parent_ids[4][37], child_ids[4][37];
        int fds[2];
        (void)state;
        assert_int_equal(ks_uuid_v4(first), 0); /* the store is filled, 31 left */
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                for (int i = 0; i < 4; i++) {
                        if (ks_uuid_v4(child_ids[i]) != 0) {
                                _exit(2);
                        }
                }
                _exit(write(fds[1], child_ids, sizeof(child_ids)) == sizeof(child_ids) ? 0 : 3);
        }
        close(fds[1]);
        for (int i = 0; i < 4; i++) {
                assert_int_equal(ks_uuid_v4(parent_ids[i]), 0);
        }
        assert_int_equal(read(fds[0], child_ids, sizeof(child_ids)), (ssize_t)sizeof(child_ids));
        close(fds[0]);
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        for (int i = 0; i < 4; i++) {
                for (int j = 0; j < 4; j++) {
                        assert_string_not_equal(parent_ids[i], child_ids[j]);
                }
        }
}

/* The Unix milliseconds in a version 7 uuid's first 48 bits. */
static uint64_t uuid_v7_ms(const char *id)
{
        char hex[13];
        memcpy(hex, id, 8);
        memcpy(hex + 8, id + 9, 4);
        hex[12] = '\0';
        return strtoull(hex, NULL, 16);
}

/*
 * Version 7: the text form, version and variant; the wall clock's
 * milliseconds in front (read before and after); ids made one after the
 * other in order, to the fraction of a millisecond, with the same prefix
 * sorting by their random bits; none twice.
 */
static void test_uuid_v7(void **state)
{
        enum { N = 5000 };
        static char ids[N][37];
        struct timespec t0, t1;
        (void)state;
        assert_int_equal(clock_gettime(CLOCK_REALTIME, &t0), 0);
        for (int i = 0; i < N; i++) {
                assert_int_equal(ks_uuid_v7(ids[i]), 0);
        }
        assert_int_equal(clock_gettime(CLOCK_REALTIME, &t1), 0);
        uint64_t ms0 = (uint64_t)t0.tv_sec * 1000u + (uint64_t)t0.tv_nsec / 1000000u;
        uint64_t ms1 = (uint64_t)t1.tv_sec * 1000u + (uint64_t)t1.tv_nsec / 1000000u;
        int out_of_order = 0;
        for (int i = 0; i < N; i++) {
                assert_true(ks_uuid_valid(ids[i]));
                assert_int_equal(strlen(ids[i]), 36);
                assert_int_equal(ids[i][14], '7');
                assert_non_null(strchr("89ab", ids[i][19]));
                assert_true(uuid_v7_ms(ids[i]) >= ms0 && uuid_v7_ms(ids[i]) <= ms1);
                /*
                 * Their time (the first 18 characters: milliseconds, version,
                 * fraction) never falls; two made within one 1/4096 ms share
                 * it and are ordered by their random bits only.
                 */
                if (i > 0 && memcmp(ids[i - 1], ids[i], 18) > 0) {
                        out_of_order++;
                }
        }
        assert_int_equal(out_of_order, 0);
        qsort(ids, N, sizeof(ids[0]), cmp_uuid);
        for (int i = 1; i < N; i++) {
                assert_string_not_equal(ids[i - 1], ids[i]);
        }
}

static void test_random_and_consttime(void **state)
{
        uint8_t a[32] = {0}, b[32] = {0};
        (void)state;
        assert_true(ks_consttime_equal(a, b, sizeof(a)));
        assert_int_equal(ks_random_bytes(a, sizeof(a)), 0);
        assert_false(ks_consttime_equal(a, b, sizeof(a)));
        memcpy(b, a, sizeof(a));
        assert_true(ks_consttime_equal(a, b, sizeof(a)));
        b[31] ^= 1;
        assert_false(ks_consttime_equal(a, b, sizeof(a)));
        assert_true(ks_consttime_equal(a, b, 31));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_scrypt_rfc7914_1),
            cmocka_unit_test(test_scrypt_rfc7914_2),
            cmocka_unit_test(test_scrypt_rfc7914_3),
            cmocka_unit_test(test_scrypt_rfc7914_4),
            cmocka_unit_test(test_scrypt_bad_params),
            cmocka_unit_test(test_hmac_rfc4231),
            cmocka_unit_test(test_sha256_abc),
            cmocka_unit_test(test_password_roundtrip),
            cmocka_unit_test(test_password_salted),
            cmocka_unit_test(test_password_other_params),
            cmocka_unit_test(test_password_known_string),
            cmocka_unit_test(test_password_malformed),
            cmocka_unit_test(test_password_hash_bad_params),
            cmocka_unit_test(test_base64_encode),
            cmocka_unit_test(test_base64_decode),
            cmocka_unit_test(test_base64_reject),
            cmocka_unit_test(test_base64_roundtrip),
            cmocka_unit_test(test_uuid_v4),
            cmocka_unit_test(test_uuid_v4_distinct),
            cmocka_unit_test(test_uuid_v4_fork),
            cmocka_unit_test(test_uuid_v7),
            cmocka_unit_test(test_random_and_consttime),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
