/*
 * Webhook intake paths and the request they make (intake.h).
 */
#include "intake.h"

#include <stdlib.h>
#include <string.h>

#include "keelson/webhook/v1/webhook.pb-c.h"
#include "ks_crypto.h"

static const char *const stripe_headers[] = {"stripe-signature", NULL};
static const char *const standard_headers[] = {"webhook-id", "webhook-timestamp",
                                               "webhook-signature", NULL};

bool gw_intake_path(const char *path)
{
        return path != NULL && strncmp(path, GW_INTAKE_PREFIX, strlen(GW_INTAKE_PREFIX)) == 0;
}

int gw_intake_target_of(const char *path, gw_intake_target *out)
{
        static const struct {
                const char *name;
                int provider;
        } providers[] = {{"stripe/", 1}, {"standard/", 2}};

        if (!gw_intake_path(path)) {
                return -1;
        }
        const char *p = path + strlen(GW_INTAKE_PREFIX);
        for (size_t i = 0; i < sizeof(providers) / sizeof(providers[0]); i++) {
                size_t n = strlen(providers[i].name);
                if (strncmp(p, providers[i].name, n) != 0) {
                        continue;
                }
                const char *id = p + n;
                if (strlen(id) != 36 || !ks_uuid_valid(id)) {
                        return -1;
                }
                out->provider = providers[i].provider;
                memcpy(out->endpoint_id, id, 37);
                return 0;
        }
        return -1;
}

const char *const *gw_intake_headers(int provider)
{
        return provider == 1 ? stripe_headers : standard_headers;
}

int gw_intake_pack(const gw_intake_target *t, const uint8_t *body, size_t body_len,
                   const char *const *names, const char *const *values, size_t n, uint8_t **out,
                   size_t *out_len)
{
        Keelson__Webhook__V1__ReceiveWebhookRequest m =
            KEELSON__WEBHOOK__V1__RECEIVE_WEBHOOK_REQUEST__INIT;
        Keelson__Webhook__V1__Header h[GW_INTAKE_HEADERS_MAX], *ph[GW_INTAKE_HEADERS_MAX];
        static const uint8_t empty[1] = {0};

        *out = NULL;
        *out_len = 0;
        m.provider = (Keelson__Webhook__V1__Provider)t->provider;
        m.endpoint_id = (char *)t->endpoint_id;
        m.body.data = body_len > 0 ? (uint8_t *)body : (uint8_t *)empty;
        m.body.len = body_len;
        for (size_t i = 0; i < n && m.n_headers < GW_INTAKE_HEADERS_MAX; i++) {
                if (values[i] == NULL) {
                        continue;
                }
                keelson__webhook__v1__header__init(&h[m.n_headers]);
                h[m.n_headers].name = (char *)names[i];
                h[m.n_headers].value = (char *)values[i];
                ph[m.n_headers] = &h[m.n_headers];
                m.n_headers++;
        }
        m.headers = ph;
        size_t len = keelson__webhook__v1__receive_webhook_request__get_packed_size(&m);
        uint8_t *buf = malloc(len > 0 ? len : 1);
        if (buf == NULL) {
                return -1;
        }
        *out_len = keelson__webhook__v1__receive_webhook_request__pack(&m, buf);
        *out = buf;
        return 0;
}
