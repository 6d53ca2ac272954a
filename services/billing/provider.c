/*
 * The payment provider: two functions, bl_provider_charge and
 * bl_provider_refund, between billing and whoever moves the money. The
 * built-in provider is a mock whose payment method tokens behave like
 * Stripe's test cards, so that the whole of billing (charges, declines,
 * dunning, refunds) runs and is tested with no network: pm_card_visa and
 * pm_card_mastercard succeed, pm_card_chargeDeclined declines with
 * card_declined, pm_card_chargeDeclinedInsufficientFunds with
 * insufficient_funds, pm_card_refundFail is charged but refuses refunds
 * (declined), and any other token is invalid_payment_method. A real
 * provider goes here, and is handed the idempotency key billing makes for
 * each attempt (bl_invoice_charge says how it is made; the credit note of a
 * refund), so that an attempt made again after a crash moves the money
 * once. The mock's ids are its prefix (ch_mock_, re_mock_) and 32 hex
 * digits of the key's SHA-256: the same key, the same id.
 */
#include "billing.h"

#include <stdio.h>
#include <string.h>

#include "ks_crypto.h"

typedef struct test_card {
        const char *token;
        const char *failure; /* NULL: succeeds */
} test_card;

static const test_card cards[] = {
    {"pm_card_visa", NULL},
    {"pm_card_mastercard", NULL},
    {"pm_card_chargeDeclined", "card_declined"},
    {"pm_card_chargeDeclinedInsufficientFunds", "insufficient_funds"},
    {"pm_card_refundFail", NULL},
};

void bl_digest_hex(const char *text, char out[BL_DIGEST_HEX_MAX])
{
        uint8_t h[KS_SHA256_BYTES];

        ks_sha256(text, strlen(text), h);
        ks_hex_encode(h, 16, out);
}

/* The mock's id of what key did: prefix and the key's digest (bl_digest_hex). */
static void mock_reference(const char *prefix, const char *key, char out[64])
{
        char hex[BL_DIGEST_HEX_MAX];

        bl_digest_hex(key, hex);
        snprintf(out, 64, "%s%s", prefix, hex);
}

void bl_provider_charge(const char *token, int64_t amount, const bl_currency *cur,
                        const char *idempotency_key, bl_charge *out)
{
        memset(out, 0, sizeof(*out));
        (void)cur;
        snprintf(out->failure_code, sizeof(out->failure_code), "invalid_payment_method");
        if (amount <= 0) {
                snprintf(out->failure_code, sizeof(out->failure_code), "amount_too_small");
                return;
        }
        for (size_t i = 0; i < sizeof(cards) / sizeof(cards[0]); i++) {
                if (strcmp(token, cards[i].token) != 0) {
                        continue;
                }
                out->ok = cards[i].failure == NULL;
                snprintf(out->failure_code, sizeof(out->failure_code), "%s",
                         out->ok ? "" : cards[i].failure);
                break;
        }
        /* The mock's charge id is derived from the key: the same attempt is the same charge. */
        mock_reference("ch_mock_", idempotency_key, out->reference);
}

void bl_provider_refund(const char *token, const char *charge_reference, int64_t amount,
                        const bl_currency *cur, const char *idempotency_key, bl_charge *out)
{
        memset(out, 0, sizeof(*out));
        (void)cur;
        if (amount <= 0) {
                snprintf(out->failure_code, sizeof(out->failure_code), "amount_too_small");
        } else if (strncmp(charge_reference, "ch_mock_", 8) != 0) {
                snprintf(out->failure_code, sizeof(out->failure_code), "charge_not_found");
        } else if (strcmp(token, "pm_card_refundFail") == 0) {
                snprintf(out->failure_code, sizeof(out->failure_code), "declined");
        } else {
                out->ok = true;
        }
        mock_reference("re_mock_", idempotency_key, out->reference);
}
