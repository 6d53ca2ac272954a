/*
 * tls.c: TLS on the gateway's port (OpenSSL 3), when a certificate is
 * configured (KEELSON_GATEWAY_TLS_CERT, KEELSON_GATEWAY_TLS_KEY). ALPN
 * chooses `h2` or `http/1.1` (a client that offers neither gets HTTP/1.1);
 * the protocol floor is TLS 1.2 (or 1.3, KEELSON_GATEWAY_TLS_MIN_VERSION),
 * TLS 1.2 limited to forward-secret AEAD suites, no renegotiation, no
 * compression. gw_tls_reload (SIGHUP) reads the files again: connections
 * that are open keep the context they began with; new ones get the new
 * one, and a reload that fails keeps the old one (and says why).
 */
#ifndef GW_TLS_H
#define GW_TLS_H

#include <openssl/ssl.h>
#include <stddef.h>

typedef struct gw_tls gw_tls;

/* "1.2" or "1.3". Returns 0 with *out, or -1 with why (the files, the key, the version). */
int gw_tls_new(gw_tls **out, const char *cert_path, const char *key_path, const char *min_version,
               char *why, size_t why_len);
void gw_tls_free(gw_tls *t); /* NULL is fine; open connections keep their context */
/* Loads the files again into a new context; 0, or -1 with why (the old one stays). */
int gw_tls_reload(gw_tls *t, char *why, size_t why_len);
/* An SSL for one accepted connection, server side; NULL when out of memory. */
SSL *gw_tls_accept(gw_tls *t);

#endif
