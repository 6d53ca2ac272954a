/* See tls.h. */
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tls.h"

#define PATH_MAX_LEN 1024
/* TLS 1.2: ECDHE only (forward secrecy), AEAD only. TLS 1.3's suites are all fine. */
#define CIPHERS_TLS12 "ECDHE+AESGCM:ECDHE+CHACHA20"

struct gw_tls {
        SSL_CTX *ctx;
        char cert[PATH_MAX_LEN];
        char key[PATH_MAX_LEN];
        int min_version;
};

/* ALPN (RFC 7301): h2 when the client offers it, else http/1.1; neither: no ALPN. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
        static const unsigned char ours[] = "\x02h2\x08http/1.1";
        (void)ssl;
        (void)arg;
        if (SSL_select_next_proto((unsigned char **)out, outlen, ours, sizeof(ours) - 1, in,
                                  inlen) != OPENSSL_NPN_NEGOTIATED) {
                return SSL_TLSEXT_ERR_NOACK;
        }
        return SSL_TLSEXT_ERR_OK;
}

static void ssl_error(const char *what, const char *path, char *why, size_t why_len)
{
        char err[256];
        unsigned long e = ERR_get_error();
        ERR_error_string_n(e, err, sizeof(err));
        ERR_clear_error();
        snprintf(why, why_len, "%s%s%s: %s", what, path != NULL ? " " : "",
                 path != NULL ? path : "", e != 0 ? err : "unknown error");
}

static SSL_CTX *ctx_new(const gw_tls *t, char *why, size_t why_len)
{
        SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
        if (ctx == NULL) {
                ssl_error("cannot make a TLS context", NULL, why, why_len);
                return NULL;
        }
        SSL_CTX_set_min_proto_version(ctx, t->min_version);
        SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                                     SSL_OP_CIPHER_SERVER_PREFERENCE);
        SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
        if (SSL_CTX_set_cipher_list(ctx, CIPHERS_TLS12) != 1) {
                ssl_error("cannot set the TLS 1.2 ciphers", NULL, why, why_len);
                SSL_CTX_free(ctx);
                return NULL;
        }
        if (SSL_CTX_use_certificate_chain_file(ctx, t->cert) != 1) {
                ssl_error("cannot read the certificate chain", t->cert, why, why_len);
                SSL_CTX_free(ctx);
                return NULL;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, t->key, SSL_FILETYPE_PEM) != 1) {
                ssl_error("cannot read the private key", t->key, why, why_len);
                SSL_CTX_free(ctx);
                return NULL;
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
                ssl_error("the private key does not match the certificate", t->key, why, why_len);
                SSL_CTX_free(ctx);
                return NULL;
        }
        SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
        return ctx;
}

int gw_tls_new(gw_tls **out, const char *cert_path, const char *key_path, const char *min_version,
               char *why, size_t why_len)
{
        *out = NULL;
        gw_tls *t = calloc(1, sizeof(*t));
        if (t == NULL) {
                snprintf(why, why_len, "out of memory");
                return -1;
        }
        if (strcmp(min_version, "1.2") == 0) {
                t->min_version = TLS1_2_VERSION;
        } else if (strcmp(min_version, "1.3") == 0) {
                t->min_version = TLS1_3_VERSION;
        } else {
                snprintf(why, why_len, "the minimum TLS version is 1.2 or 1.3, not \"%s\"",
                         min_version);
                free(t);
                return -1;
        }
        if (strlen(cert_path) >= sizeof(t->cert) || strlen(key_path) >= sizeof(t->key)) {
                snprintf(why, why_len, "a path is longer than %d bytes", PATH_MAX_LEN - 1);
                free(t);
                return -1;
        }
        snprintf(t->cert, sizeof(t->cert), "%s", cert_path);
        snprintf(t->key, sizeof(t->key), "%s", key_path);
        if ((t->ctx = ctx_new(t, why, why_len)) == NULL) {
                free(t);
                return -1;
        }
        *out = t;
        return 0;
}

int gw_tls_reload(gw_tls *t, char *why, size_t why_len)
{
        SSL_CTX *ctx = ctx_new(t, why, why_len);
        if (ctx == NULL) {
                return -1;
        }
        SSL_CTX_free(t->ctx); /* each SSL made from it holds a reference of its own */
        t->ctx = ctx;
        return 0;
}

SSL *gw_tls_accept(gw_tls *t)
{
        return SSL_new(t->ctx);
}

void gw_tls_free(gw_tls *t)
{
        if (t == NULL) {
                return;
        }
        SSL_CTX_free(t->ctx);
        free(t);
}
