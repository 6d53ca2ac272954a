/*
 * Webhook intake paths and the request the gateway makes of them
 * (services/gateway/intake.c): which paths are intake paths, which name an
 * endpoint, and that the body and the scheme's headers reach the service
 * as they came.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "intake.h"
#include "keelson/webhook/v1/webhook.pb-c.h"

#define ID "6b0f4c59-6f7e-4b7a-9f55-1c3f1d1f0c11"

static void test_paths(void **state)
{
        gw_intake_target t;

        (void)state;
        assert_true(gw_intake_path("/webhooks/stripe/" ID));
        assert_true(gw_intake_path("/webhooks/"));
        assert_false(gw_intake_path("/webhooks"));
        assert_false(gw_intake_path("/keelson.webhook.v1.WebhookService/ReceiveWebhook"));
        assert_false(gw_intake_path(NULL));

        assert_int_equal(gw_intake_target_of("/webhooks/stripe/" ID, &t), 0);
        assert_int_equal(t.provider, 1);
        assert_string_equal(t.endpoint_id, ID);
        assert_int_equal(gw_intake_target_of("/webhooks/standard/" ID, &t), 0);
        assert_int_equal(t.provider, 2);

        static const char *const bad[] = {
            "/webhooks/",
            "/webhooks/stripe/",
            "/webhooks/stripe/" ID "/",
            "/webhooks/stripe/" ID "?x=1",
            "/webhooks/stripe//" ID,
            "/webhooks/Stripe/" ID,
            "/webhooks/paypal/" ID,
            "/webhooks/stripe/6b0f4c59-6f7e-4b7a-9f55-1c3f1d1f0c1",
            "/webhooks/stripe/6b0f4c59-6f7e-4b7a-9f55-1c3f1d1f0c11x",
            "/webhooks/stripe/6b0f4c59_6f7e_4b7a_9f55_1c3f1d1f0c11",
            "/webhooks/stripe/../standard/" ID,
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                if (gw_intake_target_of(bad[i], &t) == 0) {
                        fail_msg("accepted %s", bad[i]);
                }
        }
}

static void test_headers_of_each_scheme(void **state)
{
        (void)state;
        const char *const *s = gw_intake_headers(1);
        assert_string_equal(s[0], "stripe-signature");
        assert_null(s[1]);
        s = gw_intake_headers(2);
        assert_string_equal(s[0], "webhook-id");
        assert_string_equal(s[1], "webhook-timestamp");
        assert_string_equal(s[2], "webhook-signature");
        assert_null(s[3]);
}

static void test_pack_keeps_the_bytes(void **state)
{
        gw_intake_target t;
        const uint8_t body[] = {'{', 0, 0xff, '}', '\n'};
        const char *const *names = gw_intake_headers(2);
        const char *values[3] = {"msg_1", NULL, "v1,abc"};
        uint8_t *out = NULL;
        size_t len = 0;

        (void)state;
        assert_int_equal(gw_intake_target_of("/webhooks/standard/" ID, &t), 0);
        assert_int_equal(gw_intake_pack(&t, body, sizeof(body), names, values, 3, &out, &len), 0);
        Keelson__Webhook__V1__ReceiveWebhookRequest *m =
            keelson__webhook__v1__receive_webhook_request__unpack(NULL, len, out);
        assert_non_null(m);
        assert_int_equal(m->provider, 2);
        assert_string_equal(m->endpoint_id, ID);
        assert_int_equal(m->body.len, sizeof(body));
        assert_memory_equal(m->body.data, body, sizeof(body));
        /* an absent header is left out, the others keep their order */
        assert_int_equal(m->n_headers, 2);
        assert_string_equal(m->headers[0]->name, "webhook-id");
        assert_string_equal(m->headers[0]->value, "msg_1");
        assert_string_equal(m->headers[1]->name, "webhook-signature");
        keelson__webhook__v1__receive_webhook_request__free_unpacked(m, NULL);
        free(out);

        /* an empty body is an empty body */
        assert_int_equal(gw_intake_pack(&t, NULL, 0, names, values, 0, &out, &len), 0);
        m = keelson__webhook__v1__receive_webhook_request__unpack(NULL, len, out);
        assert_non_null(m);
        assert_int_equal(m->body.len, 0);
        assert_int_equal(m->n_headers, 0);
        keelson__webhook__v1__receive_webhook_request__free_unpacked(m, NULL);
        free(out);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_paths),
            cmocka_unit_test(test_headers_of_each_scheme),
            cmocka_unit_test(test_pack_keeps_the_bytes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
