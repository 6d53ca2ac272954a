/*
 * libFuzzer target: ks_base64_decode over untrusted text, and the encoders
 * over arbitrary bytes. Every output buffer is malloc'd at exactly the size
 * passed as out_len, so a write past it is an AddressSanitizer report.
 *
 * Checks, aborting on a violation:
 * - the decoder accepts exactly what ks_crypto.h promises (both alphabets,
 *   padded or not, nothing else), judged by an independent reference;
 * - an accepted input decodes to data_chars * 6 / 8 bytes, the same bytes
 *   whether the buffer is generous or exact, and a buffer one byte short is
 *   refused;
 * - decode(encode(x)) == x for the input taken as raw bytes, with both
 *   encoders, and the standard encoder refuses a buffer without room for NUL.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_crypto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

__attribute__((noreturn)) static void die(const char *what)
{
        fprintf(stderr, "fuzz_base64: %s\n", what);
        abort();
}

static uint8_t *alloc(size_t n)
{
        /* malloc(0) may return NULL; one byte keeps the pointer valid. */
        uint8_t *p = malloc(n > 0 ? n : 1);
        if (p == NULL)
                abort();
        return p;
}

static bool in_alphabets(uint8_t c)
{
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
               c == '+' || c == '/' || c == '-' || c == '_';
}

/*
 * The reference: data characters of either alphabet, then at most two '='
 * only when the whole length is a multiple of 4; a data length of 4k+1 can
 * not come from any byte string. Returns the number of data chars, or -1.
 */
static long ref_data_chars(const uint8_t *s, size_t n)
{
        size_t pad = 0;

        while (pad < n && s[n - 1 - pad] == '=')
                pad++;
        if (pad > 2 || (pad > 0 && n % 4 != 0))
                return -1;
        size_t len = n - pad;
        if (len % 4 == 1)
                return -1;
        for (size_t i = 0; i < len; i++) {
                if (!in_alphabets(s[i]))
                        return -1;
        }
        return (long)len;
}

static void check_decode(const uint8_t *s, size_t n)
{
        size_t cap = n / 4 * 3 + 3;
        uint8_t *out = alloc(cap);
        int got = ks_base64_decode((const char *)s, n, out, cap);
        long ref = ref_data_chars(s, n);

        if ((got >= 0) != (ref >= 0))
                die(got >= 0 ? "decoder accepts what the reference refuses"
                             : "decoder refuses what the reference accepts");
        if (got < 0) {
                free(out);
                return;
        }
        if ((size_t)got != (size_t)ref * 6 / 8)
                die("decoded length is not data_chars * 6 / 8");
        /* The exact size is enough, and gives the same bytes. */
        uint8_t *exact = alloc((size_t)got);
        if (ks_base64_decode((const char *)s, n, exact, (size_t)got) != got ||
            memcmp(exact, out, (size_t)got) != 0)
                die("an exact-size buffer decodes differently");
        free(exact);
        /* One byte short is refused (and ASan sees any write past it). */
        if (got > 0) {
                uint8_t *shorter = alloc((size_t)got - 1);
                if (ks_base64_decode((const char *)s, n, shorter, (size_t)got - 1) != -1)
                        die("a buffer one byte short is not refused");
                free(shorter);
        }
        free(out);
}

typedef int (*encode_fn)(const void *in, size_t n, char *out, size_t out_len);

static void check_round_trip(encode_fn enc, const char *name, const uint8_t *data, size_t size)
{
        size_t need = KS_BASE64_LEN(size);
        char *text = (char *)alloc(need);
        int len = enc(data, size, text, need);

        if (len < 0 || (size_t)len >= need || text[len] != '\0' || strlen(text) != (size_t)len) {
                fprintf(stderr, "fuzz_base64: %s\n", name);
                die("encoder failed with the documented buffer size");
        }
        uint8_t *back = alloc(size);
        int got = ks_base64_decode(text, (size_t)len, back, size);
        if (got < 0 || (size_t)got != size || memcmp(back, data, size) != 0) {
                fprintf(stderr, "fuzz_base64: %s\n", name);
                die("decode(encode(x)) != x");
        }
        free(back);
        free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        check_decode(data, size);
        check_round_trip(ks_base64_encode, "ks_base64_encode", data, size);
        check_round_trip(ks_base64url_encode, "ks_base64url_encode", data, size);
        /* Padded output needs all of 4*ceil(n/3)+1: one less is refused. */
        char *small = (char *)alloc(KS_BASE64_LEN(size) - 1);
        if (ks_base64_encode(data, size, small, KS_BASE64_LEN(size) - 1) != -1)
                die("ks_base64_encode accepts a buffer without room for the NUL");
        free(small);
        return 0;
}
