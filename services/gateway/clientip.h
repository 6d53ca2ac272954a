/*
 * clientip.c: trusted proxies (KEELSON_GATEWAY_TRUSTED_PROXIES) and the
 * client address they vouch for in X-Forwarded-For.
 */
#ifndef GW_CLIENTIP_H
#define GW_CLIENTIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_IP_MAX      64
#define GW_PROXIES_MAX 64 /* CIDR entries in KEELSON_GATEWAY_TRUSTED_PROXIES */

typedef struct gw_cidr {
        uint8_t addr[16]; /* IPv6, or IPv4 mapped (::ffff:a.b.c.d) */
        int bits;         /* prefix length over those 128 bits */
} gw_cidr;

typedef struct gw_proxies {
        gw_cidr v[GW_PROXIES_MAX];
        int n;
} gw_proxies;

/*
 * Parses a comma-separated list of addresses and CIDR blocks, IPv4 or IPv6
 * ("10.0.0.0/8, 127.0.0.1, fd00::/8"); "" is the empty list. Returns 0 or -1
 * with a message in err.
 */
int gw_proxies_parse(const char *list, gw_proxies *out, char *err, size_t err_len);
/* True when addr (an IPv4 or IPv6 address in text) is one of the trusted proxies. */
bool gw_proxy_trusted(const gw_proxies *p, const char *addr);
/*
 * The client address: the socket peer, unless the peer is a trusted proxy;
 * then the right-most X-Forwarded-For entry that is not a trusted proxy
 * (xff: the header's values in arrival order). An entry that is not an
 * address stops the walk at the hop that sent it. Written in canonical form.
 */
void gw_client_ip(const gw_proxies *p, const char *peer, const char *const *xff, int n_xff,
                  char out[GW_IP_MAX]);

#endif
