/*
 * ks_assert: the failure path of KS_ASSERT (see ks_assert.h).
 *
 * It writes the line itself instead of going through ks_log: a failed
 * assertion may come from inside ks_log, or from a process out of memory,
 * and jansson allocates. One fprintf of fixed fields to an unbuffered
 * stderr, then abort() for a core dump.
 */
#include "ks_assert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPR_SHOWN_MAX 200 /* an expression past this is cut: the line number finds it */

/* The expression as a JSON string body: quotes and backslashes escaped, controls dropped. */
static void json_text(char *out, size_t out_len, const char *s)
{
        size_t n = 0;
        for (; *s != '\0' && n + 3 < out_len && n < EXPR_SHOWN_MAX; s++) {
                if (*s == '"' || *s == '\\') {
                        out[n++] = '\\';
                        out[n++] = *s;
                } else if ((unsigned char)*s >= 0x20) {
                        out[n++] = *s;
                }
        }
        out[n] = '\0';
}

void ks_assert_fail(const char *expr, const char *file, int line)
{
        char e[2 * EXPR_SHOWN_MAX + 4], f[2 * EXPR_SHOWN_MAX + 4];

        json_text(e, sizeof(e), expr != NULL ? expr : "");
        json_text(f, sizeof(f), file != NULL ? file : "");
        fprintf(stderr,
                "{\"level\":\"fatal\",\"msg\":\"assertion failed\",\"expr\":\"%s\","
                "\"file\":\"%s\",\"line\":%d}\n",
                e, f, line);
        fflush(stderr);
        abort();
}
