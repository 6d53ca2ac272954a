/*
 * Unit tests of the webhook address policy (services/webhook/addrpolicy.c):
 * every special-purpose block at both ends and one address past each end;
 * IPv4 checked three ways (as itself, IPv4-mapped, NAT64) against a
 * reference written here from the IANA list, over every /16 and a stream of
 * pseudo-random addresses; the IPv6 blocks; the allow-list's effect; and the
 * allow-list's parser, its errors above all.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "addrpolicy.h"

#define RANDOM_CASES 2000000
#define PRNG_SEED    0x2545f4914f6cdd1dULL

/* ---- helpers ----------------------------------------------------------------- */

static struct sockaddr_storage sockaddr_of(const char *text)
{
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
                in->sin_family = AF_INET;
                in->sin_port = htons(443);
        } else {
                assert_int_equal(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons(443);
        }
        return ss;
}

static wh_addr_verdict check_text(const wh_addr_policy *p, const char *text)
{
        struct sockaddr_storage ss = sockaddr_of(text);
        return wh_addr_check(p, (const struct sockaddr *)&ss);
}

static wh_addr_verdict check_v4(const wh_addr_policy *p, uint32_t a)
{
        struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(a)};
        return wh_addr_check(p, (const struct sockaddr *)&in);
}

/* a as ::ffff:a (mapped) or 64:ff9b::a (NAT64). */
static wh_addr_verdict check_v4_in_v6(const wh_addr_policy *p, uint32_t a, bool nat64)
{
        struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
        uint8_t *b = in6.sin6_addr.s6_addr;
        if (nat64) {
                b[1] = 0x64, b[2] = 0xff, b[3] = 0x9b;
        } else {
                b[10] = b[11] = 0xff;
        }
        uint32_t n = htonl(a);
        memcpy(b + 12, &n, 4);
        return wh_addr_check(p, (const struct sockaddr *)&in6);
}

static void expect_verdict(const wh_addr_policy *p, const char *text, wh_addr_verdict want)
{
        wh_addr_verdict got = check_text(p, text);
        if (got != want) {
                fail_msg("%s: %s, expected %s", text, wh_addr_verdict_name(got),
                         wh_addr_verdict_name(want));
        }
}

static wh_addr_policy policy_of(const char *list)
{
        wh_addr_policy p;
        char err[WH_ADDR_ERR_MAX];
        if (wh_addr_policy_parse(&p, list, err, sizeof err) != 0) {
                fail_msg("%s: %s", list != NULL ? list : "(none)", err);
        }
        return p;
}

/* ---- the IPv4 reference: the blocks as the IANA registry lists them ----------- */

typedef struct ref_block {
        const char *net;
        int bits;
        wh_addr_verdict verdict;
} ref_block;

static const ref_block REF_V4[] = {
    {"0.0.0.0", 8, WH_ADDR_REFUSED_UNSPECIFIED},
    {"10.0.0.0", 8, WH_ADDR_REFUSED_PRIVATE},
    {"100.64.0.0", 10, WH_ADDR_REFUSED_SHARED},
    {"127.0.0.0", 8, WH_ADDR_REFUSED_LOOPBACK},
    {"169.254.0.0", 16, WH_ADDR_REFUSED_LINK_LOCAL},
    {"172.16.0.0", 12, WH_ADDR_REFUSED_PRIVATE},
    {"192.0.0.0", 24, WH_ADDR_REFUSED_RESERVED},
    {"192.0.2.0", 24, WH_ADDR_REFUSED_DOCUMENTATION},
    {"192.88.99.0", 24, WH_ADDR_REFUSED_RESERVED},
    {"192.168.0.0", 16, WH_ADDR_REFUSED_PRIVATE},
    {"198.18.0.0", 15, WH_ADDR_REFUSED_RESERVED},
    {"198.51.100.0", 24, WH_ADDR_REFUSED_DOCUMENTATION},
    {"203.0.113.0", 24, WH_ADDR_REFUSED_DOCUMENTATION},
    {"224.0.0.0", 4, WH_ADDR_REFUSED_MULTICAST},
    {"255.255.255.255", 32, WH_ADDR_REFUSED_BROADCAST},
    {"240.0.0.0", 4, WH_ADDR_REFUSED_RESERVED},
};

#define REF_V4_N (sizeof REF_V4 / sizeof REF_V4[0])

static uint32_t v4_of(const char *text)
{
        struct in_addr in;
        assert_int_equal(inet_pton(AF_INET, text, &in), 1);
        return ntohl(in.s_addr);
}

static uint32_t mask_of(int bits)
{
        return bits == 0 ? 0 : 0xffffffffu << (32 - bits);
}

static wh_addr_verdict ref_check_v4(uint32_t a)
{
        static uint32_t nets[REF_V4_N];
        static bool read;
        for (size_t i = 0; !read && i < REF_V4_N; i++) {
                nets[i] = v4_of(REF_V4[i].net);
        }
        read = true;
        for (size_t i = 0; i < REF_V4_N; i++) {
                if ((a & mask_of(REF_V4[i].bits)) == nets[i]) {
                        return REF_V4[i].verdict;
                }
        }
        return WH_ADDR_ALLOWED;
}

/* a, as itself, IPv4-mapped and through NAT64, against the reference. */
static void expect_v4_everywhere(const wh_addr_policy *p, uint32_t a)
{
        wh_addr_verdict want = ref_check_v4(a);
        wh_addr_verdict got[3] = {check_v4(p, a), check_v4_in_v6(p, a, false),
                                  check_v4_in_v6(p, a, true)};
        for (int i = 0; i < 3; i++) {
                if (got[i] != want) {
                        fail_msg("%u.%u.%u.%u (form %d): %s, expected %s", a >> 24, (a >> 16) & 255,
                                 (a >> 8) & 255, a & 255, i, wh_addr_verdict_name(got[i]),
                                 wh_addr_verdict_name(want));
                }
        }
}

static void test_v4_block_edges(void **state)
{
        (void)state;
        for (size_t i = 0; i < REF_V4_N; i++) {
                uint32_t first = v4_of(REF_V4[i].net);
                uint32_t last = first | ~mask_of(REF_V4[i].bits);
                assert_int_equal(ref_check_v4(first) != WH_ADDR_ALLOWED, 1);
                expect_v4_everywhere(NULL, first);
                expect_v4_everywhere(NULL, last);
                expect_v4_everywhere(NULL, first - 1); /* wraps at 0.0.0.0: fine */
                expect_v4_everywhere(NULL, last + 1);
        }
}

static void test_v4_named(void **state)
{
        (void)state;
        expect_verdict(NULL, "169.254.169.254", WH_ADDR_REFUSED_LINK_LOCAL); /* metadata */
        expect_verdict(NULL, "127.0.0.1", WH_ADDR_REFUSED_LOOPBACK);
        expect_verdict(NULL, "127.255.255.254", WH_ADDR_REFUSED_LOOPBACK);
        expect_verdict(NULL, "0.0.0.0", WH_ADDR_REFUSED_UNSPECIFIED);
        expect_verdict(NULL, "10.0.0.1", WH_ADDR_REFUSED_PRIVATE);
        expect_verdict(NULL, "172.31.255.255", WH_ADDR_REFUSED_PRIVATE);
        expect_verdict(NULL, "172.32.0.0", WH_ADDR_ALLOWED);
        expect_verdict(NULL, "100.100.100.200", WH_ADDR_REFUSED_SHARED); /* Alibaba metadata */
        expect_verdict(NULL, "192.0.0.170", WH_ADDR_REFUSED_RESERVED);
        expect_verdict(NULL, "198.19.255.255", WH_ADDR_REFUSED_RESERVED);
        expect_verdict(NULL, "239.255.255.250", WH_ADDR_REFUSED_MULTICAST);
        expect_verdict(NULL, "255.255.255.255", WH_ADDR_REFUSED_BROADCAST);
        expect_verdict(NULL, "255.255.255.254", WH_ADDR_REFUSED_RESERVED);
        expect_verdict(NULL, "8.8.8.8", WH_ADDR_ALLOWED);
        expect_verdict(NULL, "1.1.1.1", WH_ADDR_ALLOWED);
        expect_verdict(NULL, "223.255.255.255", WH_ADDR_ALLOWED);
}

/* Every /16's first, last and one pseudo-random address; then random ones. */
static void test_v4_against_reference(void **state)
{
        (void)state;
        for (uint32_t hi = 0; hi <= 0xffff; hi++) {
                uint32_t base = hi << 16;
                expect_v4_everywhere(NULL, base);
                expect_v4_everywhere(NULL, base | 0xffff);
                expect_v4_everywhere(NULL, base | ((hi * 2654435761u) & 0xffff));
        }
        uint64_t x = PRNG_SEED;
        for (int i = 0; i < RANDOM_CASES; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
                uint32_t a = (uint32_t)(x >> 32);
                wh_addr_verdict want = ref_check_v4(a);
                if (check_v4(NULL, a) != want) {
                        fail_msg("%08x: expected %s", a, wh_addr_verdict_name(want));
                }
        }
}

/* ---- IPv6 ----------------------------------------------------------------------- */

typedef struct case6 {
        const char *addr;
        wh_addr_verdict verdict;
} case6;

static const case6 V6_CASES[] = {
    {"::", WH_ADDR_REFUSED_UNSPECIFIED},
    {"::1", WH_ADDR_REFUSED_LOOPBACK},
    {"::2", WH_ADDR_REFUSED_RESERVED},       /* IPv4-compatible */
    {"::7f00:1", WH_ADDR_REFUSED_RESERVED},  /* ::127.0.0.1, IPv4-compatible */
    {"::808:808", WH_ADDR_REFUSED_RESERVED}, /* ::8.8.8.8 too: deprecated, never routed */
    {"::ffff:127.0.0.1", WH_ADDR_REFUSED_LOOPBACK},
    {"::ffff:7f00:1", WH_ADDR_REFUSED_LOOPBACK},
    {"::ffff:169.254.169.254", WH_ADDR_REFUSED_LINK_LOCAL},
    {"::ffff:0.0.0.0", WH_ADDR_REFUSED_UNSPECIFIED},
    {"::ffff:8.8.8.8", WH_ADDR_ALLOWED},
    {"64:ff9b::8.8.8.8", WH_ADDR_ALLOWED},
    {"64:ff9b::10.0.0.1", WH_ADDR_REFUSED_PRIVATE},
    {"64:ff9b::169.254.169.254", WH_ADDR_REFUSED_LINK_LOCAL},
    {"64:ff9b::127.0.0.1", WH_ADDR_REFUSED_LOOPBACK},
    {"64:ff9b:1::1", WH_ADDR_REFUSED_RESERVED},           /* local-use NAT64, RFC 8215 */
    {"64:ff9b::1:0:0:8.8.8.8", WH_ADDR_REFUSED_RESERVED}, /* not the /96 */
    {"100::", WH_ADDR_REFUSED_RESERVED},
    {"100::ffff:ffff:ffff:ffff", WH_ADDR_REFUSED_RESERVED},
    {"2001::1", WH_ADDR_REFUSED_RESERVED},   /* Teredo */
    {"2001:2::1", WH_ADDR_REFUSED_RESERVED}, /* benchmarking */
    {"2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", WH_ADDR_REFUSED_RESERVED},
    {"2001:200::1", WH_ADDR_ALLOWED}, /* just past 2001::/23 */
    {"2001:db8::1", WH_ADDR_REFUSED_DOCUMENTATION},
    {"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", WH_ADDR_REFUSED_DOCUMENTATION},
    {"2001:db9::1", WH_ADDR_ALLOWED},
    {"2002::1", WH_ADDR_REFUSED_RESERVED}, /* 6to4 */
    {"2002:7f00:1::1", WH_ADDR_REFUSED_RESERVED},
    {"2003::1", WH_ADDR_ALLOWED},
    {"3fff::1", WH_ADDR_REFUSED_DOCUMENTATION},
    {"3fff:fff:ffff::1", WH_ADDR_REFUSED_DOCUMENTATION},
    {"3fff:1000::1", WH_ADDR_ALLOWED},
    {"fc00::1", WH_ADDR_REFUSED_PRIVATE},
    {"fd00::2", WH_ADDR_REFUSED_PRIVATE},
    {"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", WH_ADDR_REFUSED_PRIVATE},
    {"fe80::1", WH_ADDR_REFUSED_LINK_LOCAL},
    {"febf:ffff::1", WH_ADDR_REFUSED_LINK_LOCAL},
    {"fec0::1", WH_ADDR_REFUSED_PRIVATE},
    {"ff02::1", WH_ADDR_REFUSED_MULTICAST},
    {"ff0e::1", WH_ADDR_REFUSED_MULTICAST},
    {"1000::1", WH_ADDR_REFUSED_RESERVED}, /* outside 2000::/3 */
    {"4000::1", WH_ADDR_REFUSED_RESERVED},
    {"5f00::1", WH_ADDR_REFUSED_RESERVED}, /* SRv6 SIDs */
    {"1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", WH_ADDR_REFUSED_RESERVED},
    {"2000::", WH_ADDR_ALLOWED},
    {"2606:4700:4700::1111", WH_ADDR_ALLOWED},
    {"2a00:1450:4001::200e", WH_ADDR_ALLOWED},
    {"3ffe:ffff::1", WH_ADDR_ALLOWED},
};

static void test_v6(void **state)
{
        (void)state;
        for (size_t i = 0; i < sizeof V6_CASES / sizeof V6_CASES[0]; i++) {
                expect_verdict(NULL, V6_CASES[i].addr, V6_CASES[i].verdict);
        }
}

static void test_not_ip(void **state)
{
        (void)state;
        struct sockaddr_un un = {.sun_family = AF_UNIX, .sun_path = "/x"};
        assert_int_equal(wh_addr_check(NULL, (const struct sockaddr *)&un), WH_ADDR_REFUSED_FAMILY);
        struct sockaddr unspec = {.sa_family = AF_UNSPEC};
        assert_int_equal(wh_addr_check(NULL, &unspec), WH_ADDR_REFUSED_FAMILY);
}

/* ---- the allow-list ---------------------------------------------------------- */

static void test_allow_list_effect(void **state)
{
        (void)state;
        wh_addr_policy p = policy_of("127.0.0.1/32, 10.1.0.0/16 fd00:1::/64\n::1");
        expect_verdict(&p, "127.0.0.1", WH_ADDR_ALLOWED);
        expect_verdict(&p, "::ffff:127.0.0.1", WH_ADDR_ALLOWED); /* judged as the IPv4 one */
        expect_verdict(&p, "64:ff9b::127.0.0.1", WH_ADDR_ALLOWED);
        expect_verdict(&p, "127.0.0.2", WH_ADDR_REFUSED_LOOPBACK);
        expect_verdict(&p, "10.1.255.255", WH_ADDR_ALLOWED);
        expect_verdict(&p, "10.2.0.0", WH_ADDR_REFUSED_PRIVATE);
        expect_verdict(&p, "fd00:1::5", WH_ADDR_ALLOWED);
        expect_verdict(&p, "fd00:2::5", WH_ADDR_REFUSED_PRIVATE);
        expect_verdict(&p, "::1", WH_ADDR_ALLOWED);
        expect_verdict(&p, "169.254.169.254", WH_ADDR_REFUSED_LINK_LOCAL);
        expect_verdict(&p, "8.8.8.8", WH_ADDR_ALLOWED);

        /* An IPv6 entry covering mapped addresses allows them, as written. */
        p = policy_of("::ffff:10.0.0.0/104");
        expect_verdict(&p, "10.9.9.9", WH_ADDR_ALLOWED);
        expect_verdict(&p, "::ffff:10.9.9.9", WH_ADDR_ALLOWED);
        expect_verdict(&p, "11.0.0.1", WH_ADDR_ALLOWED); /* public anyway */

        /* The whole space: the operator turns the policy off for one family. */
        p = policy_of("0.0.0.0/0");
        expect_verdict(&p, "127.0.0.1", WH_ADDR_ALLOWED);
        expect_verdict(&p, "255.255.255.255", WH_ADDR_ALLOWED);
        expect_verdict(&p, "::1", WH_ADDR_REFUSED_LOOPBACK);
        p = policy_of("::/0");
        expect_verdict(&p, "fe80::1", WH_ADDR_ALLOWED);

        /* Empty policies: zeroed, "", NULL. */
        wh_addr_policy zero;
        memset(&zero, 0, sizeof zero);
        expect_verdict(&zero, "127.0.0.1", WH_ADDR_REFUSED_LOOPBACK);
        p = policy_of("");
        assert_int_equal(p.n, 0);
        p = policy_of(NULL);
        assert_int_equal(p.n, 0);
        p = policy_of(" ,, \t,");
        assert_int_equal(p.n, 0);
}

/* Allow-listed addresses agree with the reference everywhere else. */
static void test_allow_list_reference(void **state)
{
        (void)state;
        wh_addr_policy p = policy_of("10.20.0.0/14");
        for (uint32_t hi = 0; hi <= 0xffff; hi++) {
                uint32_t a = (hi << 16) | 0x1234;
                bool listed = (a & mask_of(14)) == v4_of("10.20.0.0");
                wh_addr_verdict want = listed ? WH_ADDR_ALLOWED : ref_check_v4(a);
                assert_int_equal(check_v4(&p, a), want);
                assert_int_equal(check_v4_in_v6(&p, a, false), want);
        }
}

static void expect_parse_error(const char *list, const char *needle)
{
        wh_addr_policy p;
        char err[WH_ADDR_ERR_MAX];
        memset(&p, 0x5a, sizeof p);
        if (wh_addr_policy_parse(&p, list, err, sizeof err) != -1) {
                fail_msg("%s: accepted", list);
        }
        assert_int_equal(p.n, 0); /* emptied, not left half-read */
        if (strstr(err, needle) == NULL) {
                fail_msg("%s: \"%s\" does not say \"%s\"", list, err, needle);
        }
}

static void test_parse_errors(void **state)
{
        (void)state;
        expect_parse_error("10.0.0.1/8", "bits set past the prefix");
        expect_parse_error("127.0.0.1/32, 10.0.0.1/8", "entry 2 \"10.0.0.1/8\"");
        expect_parse_error("fd00::1/64", "bits set past the prefix");
        expect_parse_error("10.0.0.0/33", "0..32");
        expect_parse_error("::/129", "0..128");
        expect_parse_error("10.0.0.0/", "0..32");
        expect_parse_error("10.0.0.0/08", "0..32");
        expect_parse_error("10.0.0.0/-1", "0..32");
        expect_parse_error("10.0.0.0/+8", "0..32");
        expect_parse_error("10.0.0.0/8/8", "0..32");
        expect_parse_error("10.0.0/8", "not an IPv4 address");
        expect_parse_error("010.0.0.0/8", "not an IPv4 address");
        expect_parse_error("localhost", "not an IPv4 address");
        expect_parse_error("256.0.0.0/8", "not an IPv4 address");
        expect_parse_error("fe80::1%eth0", "not an IPv6 address");
        expect_parse_error("fd00:::1/64", "not an IPv6 address");
        expect_parse_error("0123456789012345678901234567890123456789012345678901234567890123456789",
                           "too long");

        char many[WH_ADDR_ALLOW_TEXT_MAX];
        size_t len = 0;
        for (int i = 0; i <= WH_ADDR_ALLOW_MAX; i++) {
                len += (size_t)snprintf(many + len, sizeof many - len, "10.0.%d.0/24,", i);
        }
        expect_parse_error(many, "more than 64 entries");

        char huge[WH_ADDR_ALLOW_TEXT_MAX + 2];
        memset(huge, ' ', sizeof huge - 1);
        huge[sizeof huge - 1] = '\0';
        expect_parse_error(huge, "longer than");

        /* A short error buffer still gets a terminated message. */
        wh_addr_policy p;
        char tiny[8];
        assert_int_equal(wh_addr_policy_parse(&p, "nope", tiny, sizeof tiny), -1);
        assert_int_equal(strlen(tiny), sizeof tiny - 1);
}

static void test_parse_forms(void **state)
{
        (void)state;
        wh_addr_policy p = policy_of("192.0.2.7 2001:db8::/32,0.0.0.0/0,::/0,\r\n1.2.3.0/24");
        assert_int_equal(p.n, 5);
        assert_int_equal(p.allow[0].prefix_bits, 128); /* one IPv4 address: /32, mapped */
        assert_int_equal(p.allow[1].prefix_bits, 32);
        assert_int_equal(p.allow[2].prefix_bits, 96);
        assert_int_equal(p.allow[3].prefix_bits, 0);
        assert_int_equal(p.allow[4].prefix_bits, 120);

        char full[WH_ADDR_ALLOW_TEXT_MAX];
        size_t len = 0;
        for (int i = 0; i < WH_ADDR_ALLOW_MAX; i++) {
                len += (size_t)snprintf(full + len, sizeof full - len, "10.0.%d.0/24 ", i);
        }
        p = policy_of(full);
        assert_int_equal(p.n, WH_ADDR_ALLOW_MAX);
}

static void test_names_and_format(void **state)
{
        (void)state;
        for (int i = 0; i < WH_ADDR_VERDICT_COUNT; i++) {
                const char *name = wh_addr_verdict_name((wh_addr_verdict)i);
                assert_string_not_equal(name, "unknown");
                for (int j = 0; j < i; j++) {
                        assert_string_not_equal(name, wh_addr_verdict_name((wh_addr_verdict)j));
                }
        }
        assert_string_equal(wh_addr_verdict_name(WH_ADDR_VERDICT_COUNT), "unknown");

        char out[WH_ADDR_TEXT_MAX];
        struct sockaddr_storage ss = sockaddr_of("169.254.169.254");
        assert_string_equal(wh_addr_format((struct sockaddr *)&ss, out, sizeof out),
                            "169.254.169.254");
        ss = sockaddr_of("::ffff:127.0.0.1");
        assert_string_equal(wh_addr_format((struct sockaddr *)&ss, out, sizeof out),
                            "::ffff:127.0.0.1");
        struct sockaddr_un un = {.sun_family = AF_UNIX};
        assert_string_equal(wh_addr_format((struct sockaddr *)&un, out, sizeof out), "?");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_v4_block_edges),
            cmocka_unit_test(test_v4_named),
            cmocka_unit_test(test_v4_against_reference),
            cmocka_unit_test(test_v6),
            cmocka_unit_test(test_not_ip),
            cmocka_unit_test(test_allow_list_effect),
            cmocka_unit_test(test_allow_list_reference),
            cmocka_unit_test(test_parse_errors),
            cmocka_unit_test(test_parse_forms),
            cmocka_unit_test(test_names_and_format),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
