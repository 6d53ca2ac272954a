/*
 * Rows written together: the form over arrays of a one-row INSERT, so that
 * the rows a transaction writes with one statement go in one execution of
 * it instead of one each. A statement's executor start, its checks and its
 * protocol messages are then paid once for all of them (ks_pg.h,
 * ks_pg_rows_sql, says the form).
 */
#include "ks_pg.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf {
        char *s;
        size_t len, cap;
        bool oom;
} buf;

static void put(buf *b, const char *s, size_t n)
{
        if (b->oom || n > SIZE_MAX / 4 - b->len) {
                b->oom = true;
                return;
        }
        if (b->len + n + 1 > b->cap) {
                size_t cap = b->cap == 0 ? 256 : b->cap;
                while (b->len + n + 1 > cap) {
                        cap *= 2;
                }
                char *p = realloc(b->s, cap);
                if (p == NULL) {
                        b->oom = true;
                        return;
                }
                b->s = p;
                b->cap = cap;
        }
        memcpy(b->s + b->len, s, n);
        b->len += n;
        b->s[b->len] = '\0';
}

static void puts_(buf *b, const char *s)
{
        put(b, s, strlen(s));
}

static void put_int(buf *b, const char *fmt, long v)
{
        char t[32];
        int n = snprintf(t, sizeof(t), fmt, v);
        put(b, t, (size_t)n);
}

static const char prefix[] = "INSERT INTO ";
static const char values[] = " VALUES (";

/*
 * The expressions of the tuple, each $i as r.ci; false when one names a
 * parameter outside 1..n_params, a quote is left open, or the tuple closes
 * before its end (more than one tuple).
 */
static bool rewrite_exprs(buf *b, const char *s, size_t len, int n_params)
{
        bool quoted = false;
        int depth = 0;

        for (size_t i = 0; i < len; i++) {
                if (s[i] == '\'') {
                        quoted = !quoted; /* '' inside a literal: out and in again */
                } else if (!quoted && (s[i] == '(' || s[i] == ')')) {
                        depth += s[i] == '(' ? 1 : -1;
                        if (depth < 0) {
                                return false;
                        }
                } else if (!quoted && s[i] == '$' && i + 1 < len &&
                           isdigit((unsigned char)s[i + 1])) {
                        long k = 0;
                        while (i + 1 < len && isdigit((unsigned char)s[i + 1]) && k <= n_params) {
                                k = k * 10 + (s[++i] - '0');
                        }
                        if (k < 1 || k > n_params) {
                                return false;
                        }
                        put_int(b, "r.c%ld", k);
                        continue;
                }
                put(b, &s[i], 1);
        }
        return !quoted && depth == 0;
}

char *ks_pg_rows_sql(const char *sql, int n_params)
{
        buf b = {0};
        size_t len = strlen(sql);
        const char *v = strstr(sql, values);

        if (n_params < 1 || strncmp(sql, prefix, sizeof(prefix) - 1) != 0 || v == NULL || len < 2 ||
            sql[len - 1] != ')' || strstr(v + 1, values) != NULL) {
                return NULL;
        }
        const char *exprs = v + sizeof(values) - 1;
        put(&b, sql, (size_t)(v - sql));
        puts_(&b, " SELECT ");
        if (!rewrite_exprs(&b, exprs, (size_t)(sql + len - 1 - exprs), n_params)) {
                free(b.s);
                return NULL;
        }
        puts_(&b, " FROM unnest(");
        for (int i = 1; i <= n_params; i++) {
                put_int(&b, i == 1 ? "$%ld::text[]" : ", $%ld::text[]", i);
        }
        puts_(&b, ") AS r(");
        for (int i = 1; i <= n_params; i++) {
                put_int(&b, i == 1 ? "c%ld" : ", c%ld", i);
        }
        puts_(&b, ")");
        if (b.oom) {
                free(b.s);
                return NULL;
        }
        return b.s;
}
