/*
 * The retry schedule of deliveries (pure): its text, and the wait after a
 * failed try. The default is Svix's (5 s, 5 min, 30 min, 2 h, 5 h, 10 h,
 * 10 h: eight attempts over 27.6 hours); jitter spreads a burst of
 * failures (an endpoint down) so that its retries do not come back as one.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "webhook.h"

#define WAIT_MIN_MS 1000LL
#define WAIT_MAX_MS (7LL * 86400 * 1000)

int wh_retry_parse(const char *text, int64_t *ms, size_t cap, size_t *n, char *err, size_t err_len)
{
        const char *p = text;

        *n = 0;
        if (text == NULL || *text == '\0') {
                snprintf(err, err_len, "empty: give waits like \"5s,5m,2h\"");
                return -1;
        }
        for (;;) {
                while (*p == ' ') {
                        p++;
                }
                if (!isdigit((unsigned char)*p)) {
                        snprintf(err, err_len, "wait %zu: a whole number and a unit (s, m, h, d)",
                                 *n + 1);
                        return -1;
                }
                errno = 0;
                char *end;
                long long v = strtoll(p, &end, 10);
                int64_t unit;
                switch (*end) {
                case 's':
                        unit = 1000;
                        break;
                case 'm':
                        unit = 60000;
                        break;
                case 'h':
                        unit = 3600000;
                        break;
                case 'd':
                        unit = 86400000;
                        break;
                default:
                        snprintf(err, err_len, "wait %zu: a unit (s, m, h, d) after the number",
                                 *n + 1);
                        return -1;
                }
                if (errno != 0 || v < 1 || v > WAIT_MAX_MS / unit || v * unit < WAIT_MIN_MS) {
                        snprintf(err, err_len, "wait %zu: 1s to 7d", *n + 1);
                        return -1;
                }
                if (*n == cap) {
                        snprintf(err, err_len, "at most %zu waits", cap);
                        return -1;
                }
                ms[(*n)++] = (int64_t)v * unit;
                p = end + 1;
                while (*p == ' ') {
                        p++;
                }
                if (*p == '\0') {
                        return 0;
                }
                if (*p != ',') {
                        snprintf(err, err_len, "wait %zu: a comma after it", *n);
                        return -1;
                }
                p++;
        }
}

int64_t wh_retry_delay_ms(const int64_t *ms, size_t n, int64_t tries, uint32_t r)
{
        if (tries < 1 || (uint64_t)tries > n) {
                return -1;
        }
        int64_t base = ms[tries - 1];
        /* [0.8, 1.2] in steps of 1/1000 of the wait. */
        int64_t permille = 800 + (int64_t)(r % 401u);
        return base / 1000 * permille + base % 1000 * permille / 1000;
}
