/*
 * addrpolicy: which IP addresses an outbound webhook may connect to.
 *
 * Tenants choose the URLs keelson POSTs to, so a URL is a request the
 * tenant makes from inside our network (server-side request forgery): to a
 * database on 10.0.0.5, to the cloud metadata service at 169.254.169.254, to
 * a port of 127.0.0.1. The sender asks this module about the address it is
 * about to connect to (after DNS, at connect time), never about a name.
 *
 * The rule: an address in a special-purpose block (the IANA registries cited
 * in addrpolicy.c: loopback, private, link-local, shared, documentation,
 * multicast, reserved, ...) is refused, unless the operator's allow-list
 * holds it; any other address is allowed. An IPv6 address that carries an
 * IPv4 address (IPv4-mapped ::ffff:0:0/96, NAT64 64:ff9b::/96) is judged as
 * that IPv4 address, allow-list included. IPv6 outside global unicast
 * (2000::/3) is refused.
 *
 * Pure: no allocation, no I/O, no global state; a policy is a plain value,
 * safe to read from any number of threads.
 *
 *   wh_addr_policy p;
 *   char err[WH_ADDR_ERR_MAX];
 *   if (wh_addr_policy_parse(&p, "127.0.0.1/32, fd00:1::/64", err, sizeof err) != 0) { die(err); }
 *   wh_addr_verdict v = wh_addr_check(&p, sa);   (WH_ADDR_ALLOWED or why not)
 */
#ifndef WH_ADDRPOLICY_H
#define WH_ADDRPOLICY_H

#include <stddef.h>
#include <stdint.h>

#include "ks_code.h"

struct sockaddr;

#define WH_ADDR_ALLOW_MAX      64   /* entries in an allow-list */
#define WH_ADDR_ALLOW_TEXT_MAX 4096 /* bytes of an allow-list's text, NUL excluded */
#define WH_ADDR_ENTRY_TEXT_MAX 64   /* bytes of one entry ("ffff:...:ffff/128" is 43) */
#define WH_ADDR_ERR_MAX        192  /* an error message, NUL included, always enough */
#define WH_ADDR_TEXT_MAX       64   /* an address as text, NUL included (wh_addr_format) */

/* Why an address is refused; WH_ADDR_ALLOWED (0) when it is not. */
typedef enum wh_addr_verdict {
        WH_ADDR_ALLOWED = 0,
        WH_ADDR_REFUSED_FAMILY,        /* neither IPv4 nor IPv6 (AF_UNIX, ...) */
        WH_ADDR_REFUSED_UNSPECIFIED,   /* 0.0.0.0/8, ::/128 */
        WH_ADDR_REFUSED_LOOPBACK,      /* 127.0.0.0/8, ::1/128 */
        WH_ADDR_REFUSED_PRIVATE,       /* RFC 1918, fc00::/7 (ULA), fec0::/10 */
        WH_ADDR_REFUSED_SHARED,        /* 100.64.0.0/10 (carrier-grade NAT) */
        WH_ADDR_REFUSED_LINK_LOCAL,    /* 169.254.0.0/16 (cloud metadata), fe80::/10 */
        WH_ADDR_REFUSED_MULTICAST,     /* 224.0.0.0/4, ff00::/8 */
        WH_ADDR_REFUSED_BROADCAST,     /* 255.255.255.255 */
        WH_ADDR_REFUSED_DOCUMENTATION, /* TEST-NET-1..3, 2001:db8::/32, 3fff::/20 */
        WH_ADDR_REFUSED_RESERVED,      /* the rest: 240/4, benchmarking, 6to4, ... */
        WH_ADDR_VERDICT_COUNT
} wh_addr_verdict;

/* One allow-list entry: an IPv6 prefix; IPv4 ones are kept IPv4-mapped (prefix + 96). */
typedef struct wh_addr_cidr {
        uint8_t addr[16];
        uint8_t prefix_bits; /* 0..128 */
} wh_addr_cidr;

/* A policy: the operator's allow-list. All zeros is a valid, empty one. */
typedef struct wh_addr_policy {
        size_t n;
        wh_addr_cidr allow[WH_ADDR_ALLOW_MAX];
} wh_addr_policy;

/*
 * Reads an allow-list into *p: entries separated by commas and/or spaces,
 * each an IPv4 or IPv6 CIDR ("10.1.0.0/16", "fd00:1::/64") or one address
 * (a /32 or /128). NULL or "" is an empty list. An entry whose address has
 * bits set past its prefix ("10.0.0.1/8") is an error, not rounded down: it
 * is most likely a typo. Returns 0; or -1 with *p empty and err holding a
 * message naming the entry (err_len >= 1; WH_ADDR_ERR_MAX always suffices).
 */
int wh_addr_policy_parse(wh_addr_policy *p, const char *list, char *err,
                         size_t err_len) KS_MUST_CHECK;

/*
 * The verdict on connecting to sa (AF_INET or AF_INET6; anything else is
 * WH_ADDR_REFUSED_FAMILY). p NULL: an empty allow-list.
 */
wh_addr_verdict wh_addr_check(const wh_addr_policy *p, const struct sockaddr *sa);

/* "allowed", "loopback", "private", ...; "unknown" out of range. */
const char *wh_addr_verdict_name(wh_addr_verdict v);

/* sa as text ("10.0.0.1", "::1"; "?" for another family) into out; returns out. */
char *wh_addr_format(const struct sockaddr *sa, char *out, size_t out_len);

#endif
