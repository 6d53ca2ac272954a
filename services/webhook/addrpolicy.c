/*
 * addrpolicy: the special-purpose address blocks a webhook may not reach.
 *
 * Sources, checked 2025:
 *   IANA IPv4 Special-Purpose Address Registry
 *     https://www.iana.org/assignments/iana-ipv4-special-registry/
 *   IANA IPv6 Special-Purpose Address Registry
 *     https://www.iana.org/assignments/iana-ipv6-special-registry/
 *   RFC 6890 (how those registries are kept), RFC 4291 section 2.4 (IPv6
 *   address types: only 2000::/3 is global unicast today).
 *
 * Every block is kept in IPv6 form, IPv4 ones IPv4-mapped (::ffff:a.b.c.d,
 * prefix + 96), so one comparison serves both families and an IPv4-mapped
 * IPv6 address meets the IPv4 rules without a second table. A few blocks of
 * the registries that are globally reachable (AS112, AMT, 192.0.0.9/32 ...)
 * are refused with their enclosing block all the same: no tenant's webhook
 * endpoint lives there, and a shorter table is easier to check.
 */
#include "addrpolicy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "ks_assert.h"

#define STR_(x) #x
#define STR(x)  STR_(x)

typedef struct block {
        uint8_t addr[16];
        uint8_t prefix_bits;
        wh_addr_verdict verdict;
} block;

#define V4(a, b, c, d, len, v)                                                                     \
        {                                                                                          \
                {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d}, 96 + (len), v              \
        }
#define V6(b0, b1, b2, b3, len, v)                                                                 \
        {                                                                                          \
                {b0, b1, b2, b3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, len, v                       \
        }

/* First match wins: a block sits before any block that encloses it. */
static const block BLOCKS[] = {
    /* IPv4 (RFC 6890 and the registry) */
    V4(0, 0, 0, 0, 8, WH_ADDR_REFUSED_UNSPECIFIED),         /* "this network", RFC 791 */
    V4(10, 0, 0, 0, 8, WH_ADDR_REFUSED_PRIVATE),            /* RFC 1918 */
    V4(100, 64, 0, 0, 10, WH_ADDR_REFUSED_SHARED),          /* CGNAT, RFC 6598 */
    V4(127, 0, 0, 0, 8, WH_ADDR_REFUSED_LOOPBACK),          /* RFC 1122 */
    V4(169, 254, 0, 0, 16, WH_ADDR_REFUSED_LINK_LOCAL),     /* RFC 3927; cloud metadata */
    V4(172, 16, 0, 0, 12, WH_ADDR_REFUSED_PRIVATE),         /* RFC 1918 */
    V4(192, 0, 0, 0, 24, WH_ADDR_REFUSED_RESERVED),         /* IETF protocols, RFC 6890 */
    V4(192, 0, 2, 0, 24, WH_ADDR_REFUSED_DOCUMENTATION),    /* TEST-NET-1, RFC 5737 */
    V4(192, 88, 99, 0, 24, WH_ADDR_REFUSED_RESERVED),       /* 6to4 relay anycast, RFC 7526 */
    V4(192, 168, 0, 0, 16, WH_ADDR_REFUSED_PRIVATE),        /* RFC 1918 */
    V4(198, 18, 0, 0, 15, WH_ADDR_REFUSED_RESERVED),        /* benchmarking, RFC 2544 */
    V4(198, 51, 100, 0, 24, WH_ADDR_REFUSED_DOCUMENTATION), /* TEST-NET-2, RFC 5737 */
    V4(203, 0, 113, 0, 24, WH_ADDR_REFUSED_DOCUMENTATION),  /* TEST-NET-3, RFC 5737 */
    V4(224, 0, 0, 0, 4, WH_ADDR_REFUSED_MULTICAST),         /* RFC 5771 */
    V4(255, 255, 255, 255, 32, WH_ADDR_REFUSED_BROADCAST),  /* RFC 919; before 240/4 */
    V4(240, 0, 0, 0, 4, WH_ADDR_REFUSED_RESERVED),          /* RFC 1112 */
    /* IPv6 */
    V6(0, 0, 0, 0, 128, WH_ADDR_REFUSED_UNSPECIFIED), /* ::/128, RFC 4291 */
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, WH_ADDR_REFUSED_LOOPBACK}, /* ::1 */
    V6(0, 0, 0, 0, 96, WH_ADDR_REFUSED_RESERVED),       /* IPv4-compatible, RFC 4291 */
    V6(0x01, 0x00, 0, 0, 64, WH_ADDR_REFUSED_RESERVED), /* discard-only 100::/64, RFC 6666 */
    V6(0x20, 0x01, 0x0d, 0xb8, 32, WH_ADDR_REFUSED_DOCUMENTATION), /* 2001:db8::/32, RFC 3849 */
    V6(0x20, 0x01, 0x00, 0x00, 23, WH_ADDR_REFUSED_RESERVED), /* IETF protocols, Teredo; RFC 2928 */
    V6(0x20, 0x02, 0, 0, 16, WH_ADDR_REFUSED_RESERVED),       /* 6to4, RFC 3056 / 7526 */
    V6(0x3f, 0xff, 0, 0, 20, WH_ADDR_REFUSED_DOCUMENTATION),  /* 3fff::/20, RFC 9637 */
    V6(0xfc, 0x00, 0, 0, 7, WH_ADDR_REFUSED_PRIVATE),         /* unique local, RFC 4193 */
    V6(0xfe, 0x80, 0, 0, 10, WH_ADDR_REFUSED_LINK_LOCAL),     /* RFC 4291 */
    V6(0xfe, 0xc0, 0, 0, 10, WH_ADDR_REFUSED_PRIVATE),        /* site-local, RFC 3879 */
    V6(0xff, 0x00, 0, 0, 8, WH_ADDR_REFUSED_MULTICAST),       /* RFC 4291 */
};

#define BLOCKS_N (sizeof(BLOCKS) / sizeof(BLOCKS[0]))

static const uint8_t MAPPED_PREFIX[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
/* NAT64 well-known prefix, RFC 6052; its local-use sibling 64:ff9b:1::/48 (RFC 8215) is
 * outside 2000::/3 and refused as such. */
static const uint8_t NAT64_PREFIX[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};

static const char *const VERDICT_NAMES[WH_ADDR_VERDICT_COUNT] = {
    [WH_ADDR_ALLOWED] = "allowed",
    [WH_ADDR_REFUSED_FAMILY] = "not_ip",
    [WH_ADDR_REFUSED_UNSPECIFIED] = "unspecified",
    [WH_ADDR_REFUSED_LOOPBACK] = "loopback",
    [WH_ADDR_REFUSED_PRIVATE] = "private",
    [WH_ADDR_REFUSED_SHARED] = "shared",
    [WH_ADDR_REFUSED_LINK_LOCAL] = "link_local",
    [WH_ADDR_REFUSED_MULTICAST] = "multicast",
    [WH_ADDR_REFUSED_BROADCAST] = "broadcast",
    [WH_ADDR_REFUSED_DOCUMENTATION] = "documentation",
    [WH_ADDR_REFUSED_RESERVED] = "reserved",
};

const char *wh_addr_verdict_name(wh_addr_verdict v)
{
        if ((unsigned)v >= WH_ADDR_VERDICT_COUNT) {
                return "unknown";
        }
        return VERDICT_NAMES[v];
}

/* Whether the first bits of a and b are equal. */
static bool prefix_equal(const uint8_t *a, const uint8_t *b, unsigned bits)
{
        KS_ASSERT(bits <= 128);
        unsigned whole = bits / 8;
        unsigned rest = bits % 8;
        if (memcmp(a, b, whole) != 0) {
                return false;
        }
        if (rest == 0) {
                return true;
        }
        uint8_t mask = (uint8_t)(0xff << (8 - rest));
        return ((a[whole] ^ b[whole]) & mask) == 0;
}

static bool allow_listed(const wh_addr_policy *p, const uint8_t addr[16])
{
        if (p == NULL) {
                return false;
        }
        KS_ASSERT(p->n <= WH_ADDR_ALLOW_MAX);
        for (size_t i = 0; i < p->n; i++) {
                if (prefix_equal(addr, p->allow[i].addr, p->allow[i].prefix_bits)) {
                        return true;
                }
        }
        return false;
}

static wh_addr_verdict blocked(const uint8_t addr[16])
{
        for (size_t i = 0; i < BLOCKS_N; i++) {
                if (prefix_equal(addr, BLOCKS[i].addr, BLOCKS[i].prefix_bits)) {
                        return BLOCKS[i].verdict;
                }
        }
        if (memcmp(addr, MAPPED_PREFIX, sizeof MAPPED_PREFIX) == 0) {
                return WH_ADDR_ALLOWED; /* a public IPv4 address */
        }
        /* Only 2000::/3 is global unicast (RFC 4291 2.4); the rest is not on the Internet. */
        return (addr[0] & 0xe0) == 0x20 ? WH_ADDR_ALLOWED : WH_ADDR_REFUSED_RESERVED;
}

/* The verdict on a 16-byte address (IPv4 ones IPv4-mapped). */
static wh_addr_verdict check16(const wh_addr_policy *p, const uint8_t addr[16])
{
        if (allow_listed(p, addr)) {
                return WH_ADDR_ALLOWED;
        }
        if (memcmp(addr, NAT64_PREFIX, sizeof NAT64_PREFIX) == 0) {
                /* Judged as the IPv4 address the translator will reach. */
                uint8_t v4[16];
                memcpy(v4, MAPPED_PREFIX, sizeof MAPPED_PREFIX);
                memcpy(v4 + 12, addr + 12, 4);
                return allow_listed(p, v4) ? WH_ADDR_ALLOWED : blocked(v4);
        }
        return blocked(addr);
}

wh_addr_verdict wh_addr_check(const wh_addr_policy *p, const struct sockaddr *sa)
{
        KS_ASSERT(sa != NULL);
        uint8_t addr[16];
        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
                memcpy(addr, MAPPED_PREFIX, sizeof MAPPED_PREFIX);
                memcpy(addr + 12, &in->sin_addr, 4);
        } else if (sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
                memcpy(addr, &in6->sin6_addr, 16);
        } else {
                return WH_ADDR_REFUSED_FAMILY;
        }
        return check16(p, addr);
}

char *wh_addr_format(const struct sockaddr *sa, char *out, size_t out_len)
{
        KS_ASSERT(sa != NULL && out != NULL && out_len > 0);
        const void *src = NULL;
        if (sa->sa_family == AF_INET) {
                src = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
        } else if (sa->sa_family == AF_INET6) {
                src = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        }
        if (src == NULL || inet_ntop(sa->sa_family, src, out, (socklen_t)out_len) == NULL) {
                snprintf(out, out_len, "?");
        }
        return out;
}

/* ---- the allow-list's text ---------------------------------------------- */

/* "0".."max" in decimal, no sign, no leading zero; -1 otherwise. */
static int parse_prefix(const char *s, int max)
{
        size_t len = strlen(s);
        if (len == 0 || len > 3 || (len > 1 && s[0] == '0')) {
                return -1;
        }
        int v = 0;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9') {
                        return -1;
                }
                v = v * 10 + (s[i] - '0');
        }
        return v <= max ? v : -1;
}

/* One entry (NUL-terminated, no separators) into *c; NULL, or what is wrong with it. */
static const char *parse_entry(char *text, wh_addr_cidr *c)
{
        char *slash = strchr(text, '/');
        if (slash != NULL) {
                *slash = '\0';
        }
        bool v4 = strchr(text, ':') == NULL;
        memset(c, 0, sizeof *c);
        if (v4) {
                memcpy(c->addr, MAPPED_PREFIX, sizeof MAPPED_PREFIX);
                if (inet_pton(AF_INET, text, c->addr + 12) != 1) {
                        return "not an IPv4 address (a.b.c.d)";
                }
        } else if (inet_pton(AF_INET6, text, c->addr) != 1) {
                return "not an IPv6 address";
        }
        int max = v4 ? 32 : 128;
        int bits = max;
        if (slash != NULL && (bits = parse_prefix(slash + 1, max)) < 0) {
                return v4 ? "prefix length is not 0..32" : "prefix length is not 0..128";
        }
        c->prefix_bits = (uint8_t)(bits + (v4 ? 96 : 0));
        for (int i = c->prefix_bits; i < 128; i++) {
                if (c->addr[i / 8] & (0x80 >> (i % 8))) {
                        return "address has bits set past the prefix length";
                }
        }
        return NULL;
}

static bool is_separator(char ch)
{
        return ch == ',' || ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

int wh_addr_policy_parse(wh_addr_policy *p, const char *list, char *err, size_t err_len)
{
        KS_ASSERT(p != NULL && err != NULL && err_len > 0);
        memset(p, 0, sizeof *p);
        err[0] = '\0';
        if (list == NULL) {
                return 0;
        }
        if (strlen(list) > WH_ADDR_ALLOW_TEXT_MAX) {
                snprintf(err, err_len, "allow-list: longer than %d bytes", WH_ADDR_ALLOW_TEXT_MAX);
                return -1;
        }
        const char *s = list;
        for (;;) {
                while (is_separator(*s)) {
                        s++;
                }
                if (*s == '\0') {
                        return 0;
                }
                size_t len = 0;
                while (s[len] != '\0' && !is_separator(s[len])) {
                        len++;
                }
                char entry[WH_ADDR_ENTRY_TEXT_MAX];
                const char *why = NULL;
                if (p->n == WH_ADDR_ALLOW_MAX) {
                        why = "more than " STR(WH_ADDR_ALLOW_MAX) " entries";
                } else if (len >= sizeof entry) {
                        why = "too long to be an address";
                } else {
                        memcpy(entry, s, len);
                        entry[len] = '\0';
                        why = parse_entry(entry, &p->allow[p->n]);
                }
                if (why != NULL) {
                        snprintf(err, err_len, "allow-list entry %zu \"%.*s\": %s", p->n + 1,
                                 (int)(len < 50 ? len : 50), s, why);
                        memset(p, 0, sizeof *p);
                        return -1;
                }
                p->n++;
                s += len;
        }
}
