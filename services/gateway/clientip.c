/*
 * Who the client is, for the rate limits keyed by address: the socket peer,
 * or, when the peer is one of our trusted proxies, the right-most
 * X-Forwarded-For entry that is not a trusted proxy.
 *
 * Why right-most: every proxy appends the address it received the request
 * from, so the entries a client wrote itself sit on the left and can say
 * anything; walking from the right, the first address that is not ours is
 * the last one a trusted hop vouched for. An entry that is not an address at
 * all ends the walk at the hop that forwarded it, since nothing to its left
 * can be trusted either.
 *
 * Every address is held as 16 bytes, IPv4 mapped into IPv6, so one prefix
 * comparison serves both families.
 */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "clientip.h"

#define XFF_HOPS_MAX 32 /* X-Forwarded-For entries examined, right to left */
#define ENTRY_MAX    64 /* longest address text considered, with brackets and port */

static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static bool is_space(char c)
{
        return c == ' ' || c == '\t';
}

/* Trims s[0..*len) in place; returns the new start. */
static const char *trim(const char *s, size_t *len)
{
        while (*len > 0 && is_space(*s)) {
                s++;
                (*len)--;
        }
        while (*len > 0 && is_space(s[*len - 1])) {
                (*len)--;
        }
        return s;
}

/*
 * Parses an address, allowing what proxies write: "1.2.3.4", "1.2.3.4:80",
 * "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:443". Returns 0 or -1.
 */
static int parse_addr(const char *s, size_t len, uint8_t out[16])
{
        char buf[ENTRY_MAX];
        s = trim(s, &len);
        if (len == 0 || len >= sizeof(buf)) {
                return -1;
        }
        if (s[0] == '[') {
                const char *close = memchr(s, ']', len);
                if (close == NULL || (close + 1 < s + len && close[1] != ':')) {
                        return -1;
                }
                len = (size_t)(close - s) - 1;
                s++;
        } else {
                const char *colon = memchr(s, ':', len);
                if (colon != NULL &&
                    memchr(colon + 1, ':', len - (size_t)(colon - s) - 1) == NULL) {
                        len = (size_t)(colon - s); /* one colon: IPv4 with a port */
                }
        }
        memcpy(buf, s, len);
        buf[len] = '\0';
        struct in_addr a4;
        if (inet_pton(AF_INET, buf, &a4) == 1) {
                memcpy(out, v4_mapped, 12);
                memcpy(out + 12, &a4, 4);
                return 0;
        }
        return inet_pton(AF_INET6, buf, out) == 1 ? 0 : -1;
}

static void format_addr(const uint8_t a[16], char out[GW_IP_MAX])
{
        if (memcmp(a, v4_mapped, 12) == 0) {
                inet_ntop(AF_INET, a + 12, out, GW_IP_MAX);
        } else {
                inet_ntop(AF_INET6, a, out, GW_IP_MAX);
        }
}

static bool in_cidr(const gw_cidr *c, const uint8_t a[16])
{
        int full = c->bits / 8, rest = c->bits % 8;
        if (memcmp(c->addr, a, (size_t)full) != 0) {
                return false;
        }
        if (rest == 0) {
                return true;
        }
        uint8_t mask = (uint8_t)(0xff << (8 - rest));
        return (c->addr[full] & mask) == (a[full] & mask);
}

static bool trusted(const gw_proxies *p, const uint8_t a[16])
{
        for (int i = 0; i < p->n; i++) {
                if (in_cidr(&p->v[i], a)) {
                        return true;
                }
        }
        return false;
}

bool gw_proxy_trusted(const gw_proxies *p, const char *addr)
{
        uint8_t a[16];
        return p->n > 0 && parse_addr(addr, strlen(addr), a) == 0 && trusted(p, a);
}

/* One "addr" or "addr/bits" entry. */
static int parse_cidr(const char *s, size_t len, gw_cidr *out)
{
        const char *slash = memchr(s, '/', len);
        size_t addr_len = slash != NULL ? (size_t)(slash - s) : len;
        if (parse_addr(s, addr_len, out->addr) != 0) {
                return -1;
        }
        bool v4 = memcmp(out->addr, v4_mapped, 12) == 0;
        int max = v4 ? 32 : 128;
        int bits = max;
        if (slash != NULL) {
                size_t n = len - addr_len - 1;
                if (n < 1 || n > 3) {
                        return -1;
                }
                bits = 0;
                for (size_t i = 0; i < n; i++) {
                        if (slash[1 + i] < '0' || slash[1 + i] > '9') {
                                return -1;
                        }
                        bits = bits * 10 + (slash[1 + i] - '0');
                }
                if (bits > max) {
                        return -1;
                }
        }
        out->bits = v4 ? 96 + bits : bits;
        return 0;
}

int gw_proxies_parse(const char *list, gw_proxies *out, char *err, size_t err_len)
{
        memset(out, 0, sizeof(*out));
        const char *p = list;
        while (*p != '\0') {
                size_t len = strcspn(p, ",");
                size_t tlen = len;
                const char *t = trim(p, &tlen);
                if (tlen > 0) {
                        if (out->n == GW_PROXIES_MAX) {
                                snprintf(err, err_len, "more than %d entries", GW_PROXIES_MAX);
                                return -1;
                        }
                        if (parse_cidr(t, tlen, &out->v[out->n]) != 0) {
                                snprintf(err, err_len,
                                         "\"%.*s\" is not an address or CIDR block (10.0.0.0/8, "
                                         "fd00::/8)",
                                         (int)(tlen < 64 ? tlen : 64), t);
                                return -1;
                        }
                        out->n++;
                }
                p += len;
                if (*p == ',') {
                        p++;
                }
        }
        return 0;
}

/* The next entry from the right of value[0..*end); NULL when none is left. */
static const char *prev_entry(const char *value, size_t *end, size_t *len)
{
        if (*end == 0) {
                return NULL;
        }
        size_t stop = *end;
        size_t start = stop;
        while (start > 0 && value[start - 1] != ',') {
                start--;
        }
        *len = stop - start;
        *end = start > 0 ? start - 1 : 0;
        return value + start;
}

void gw_client_ip(const gw_proxies *p, const char *peer, const char *const *xff, int n_xff,
                  char out[GW_IP_MAX])
{
        uint8_t cur[16], a[16];
        if (parse_addr(peer, strlen(peer), cur) != 0) {
                snprintf(out, GW_IP_MAX, "%s", peer); /* not an address (a unix socket?) */
                return;
        }
        int hops = 0;
        for (int h = n_xff - 1; h >= 0 && trusted(p, cur); h--) {
                size_t end = strlen(xff[h]), len = 0;
                const char *e;
                while (trusted(p, cur) && (e = prev_entry(xff[h], &end, &len)) != NULL) {
                        size_t tlen = len;
                        e = trim(e, &tlen);
                        if (tlen == 0) {
                                continue; /* "a,,b" */
                        }
                        if (++hops > XFF_HOPS_MAX || parse_addr(e, tlen, a) != 0) {
                                format_addr(cur, out);
                                return;
                        }
                        memcpy(cur, a, 16);
                }
        }
        format_addr(cur, out);
}
