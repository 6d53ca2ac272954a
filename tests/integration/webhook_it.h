/*
 * What the webhook integration tests share: WebhookService through the
 * stack's gateway in JSON, intake endpoints, and webhooks signed as Stripe
 * and Standard Webhooks senders sign them (with OpenSSL directly, not with
 * the service's own code), posted to /webhooks/... and looked for in
 * webhook.received_events.
 *
 * Part of the keelson_it_support library (webhook_it.c). Every function
 * fails the test when a call does not go through; call them from the
 * test's own thread, after wit_setup. Include after <cmocka.h>.
 */
#ifndef WEBHOOK_IT_H
#define WEBHOOK_IT_H

#include <jansson.h>
#include <stdint.h>

#include "it_support.h"

#define WIT_PATH      "/keelson.webhook.v1.WebhookService/"
#define WIT_TOKEN_MAX 512

/* Loads the stack; 0 or -1. */
int wit_setup(void);
/* The loaded stack. */
const it_stack *wit_stack(void);

/* A call that must answer 200: its reply, parsed (json_decref it). */
json_t *wit_call_ok(const char *token, const char *method, const char *json);
/* A call that must fail with the Connect error code ("not_found", ...) and message (NULL: any). */
void wit_call_fails_with(const char *token, const char *method, const char *json, const char *code,
                         const char *message);
/* A string at a (and b, when not NULL) of j; "" when absent. */
const char *wit_str(json_t *j, const char *a, const char *b);

/* An intake endpoint of the token's tenant: its path and id. */
void wit_endpoint(const char *token, const char *provider, const char *secret, char path[128],
                  char id[64]);

/* Stripe-Signature of body at t, keyed with the secret string itself. */
void wit_stripe_sign(const char *secret, long t, const char *body, char out[160]);
/* "v1,<base64>" of Standard Webhooks: the key is the base64 after "whsec_". */
void wit_standard_sign(const char *secret, const char *id, long t, const char *body, char out[64]);

/* POSTs body to path with headers ("Name: value", NULL-terminated); its status. keep: the reply. */
long wit_deliver(const char *path, const char *body, const char *const *headers,
                 it_http_response *keep);
/* The same, signed as Stripe signs at t. */
long wit_stripe_deliver(const char *path, const char *secret, long t, const char *body,
                        it_http_response *keep);

/* Rows of webhook.received_events for the endpoint and provider event id. */
long wit_rows_of(const char *endpoint_id, const char *event_id);
/* That row's status (keelson.webhook.v1.ReceivedStatus); -1 when none. */
long wit_status_of(const char *endpoint_id, const char *event_id);

#endif
