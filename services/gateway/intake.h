/*
 * intake.c: webhook intake at /webhooks/<provider>/<endpoint id>, outside
 * the Connect routes. A provider calls it as it calls any webhook URL: a
 * POST of its event, signed in its headers. The gateway hands the body,
 * byte for byte, and the headers of the provider's signature scheme to the
 * webhook service's intake method (the KS_M_INTAKE row of the catalog,
 * ReceiveWebhook) and answers with what it replies, in Connect's error
 * JSON when it refuses. Pure: the handler (handler.c) does the I/O.
 */
#ifndef GW_INTAKE_H
#define GW_INTAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_INTAKE_PREFIX      "/webhooks/"
#define GW_INTAKE_HEADERS_MAX 3 /* of one provider's scheme */

typedef struct gw_intake_target {
        int provider;         /* keelson.webhook.v1.Provider: 1 stripe, 2 standard */
        char endpoint_id[37]; /* a uuid, lower or upper case as sent */
} gw_intake_target;

/* Whether path is an intake path at all (under GW_INTAKE_PREFIX). */
bool gw_intake_path(const char *path);

/*
 * "/webhooks/stripe/<uuid>" or "/webhooks/standard/<uuid>", exactly (no
 * trailing slash, no query): 0 and *out; -1 for anything else (the
 * handler answers 404 as for an unknown endpoint).
 */
int gw_intake_target_of(const char *path, gw_intake_target *out);

/* The headers of provider's scheme, lower case, NULL-terminated. */
const char *const *gw_intake_headers(int provider);

/*
 * ReceiveWebhookRequest{provider, endpoint_id, body, headers} packed into
 * *out (malloc'ed; free it): names[i] with values[i] for each of the n
 * headers that came (values[i] NULL: absent, left out). 0, or -1 when out
 * of memory.
 */
int gw_intake_pack(const gw_intake_target *t, const uint8_t *body, size_t body_len,
                   const char *const *names, const char *const *values, size_t n, uint8_t **out,
                   size_t *out_len);

#endif
