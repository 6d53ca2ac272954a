/*
 * libFuzzer target: the gateway's body decoder (decode.c), both walks and
 * the decode behind them, over a message with every field kind
 * (keelson.test.v1.AllTypes) and over CreateTransfersRequest. The first
 * byte chooses the codec and the message. It checks that:
 *
 * - nothing is read outside the body (ASan);
 * - the walk and the decoder agree: a body the walk refuses is refused by
 *   gw_decode with the same code and message, and a body gw_decode accepts
 *   yields a payload that unpacks again as the same message type;
 * - a refusal is invalid_argument (or resource_exhausted for a message
 *   too large), never anything else.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "keelson/ledger/v1/ledger.pb-c.h"
#include "keelson/test/v1/types.pb-c.h"

static void die(const char *what)
{
        fprintf(stderr, "fuzz_decode: %s\n", what);
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        gw_codec codec = (data[0] & 1) ? GW_CODEC_JSON : GW_CODEC_PROTO;
        const ProtobufCMessageDescriptor *desc =
            (data[0] & 2) ? &keelson__ledger__v1__create_transfers_request__descriptor
                          : &keelson__test__v1__all_types__descriptor;
        size_t len = size - 1;
        uint8_t *body = malloc(len > 0 ? len : 1); /* exactly len bytes: ASan sees overreads */
        if (body == NULL)
                return 0;
        memcpy(body, data + 1, len);
        char walk_err[256], err[256];
        int walk = gw_decode_check(desc, codec, body, len, walk_err, sizeof(walk_err));
        uint8_t *payload = NULL;
        size_t payload_len = 0;
        int rc = gw_decode(desc, codec, body, len, &payload, &payload_len, err, sizeof(err));
        if (walk != KS_OK && walk != KS_INVALID_ARGUMENT)
                die("the walk answered another code than invalid_argument");
        if (walk != KS_OK && (rc != walk || strcmp(err, walk_err) != 0))
                die("the decoder did not refuse what the walk refused, as the walk did");
        if (rc == KS_OK) {
                ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, payload_len, payload);
                if (m == NULL)
                        die("an accepted body packed into bytes that do not unpack");
                protobuf_c_message_free_unpacked(m, NULL);
        } else if (rc != KS_INVALID_ARGUMENT && rc != KS_RESOURCE_EXHAUSTED) {
                die("a refusal with an unexpected code");
        }
        if (rc != KS_OK && payload != NULL)
                die("a payload left behind a refusal");
        free(payload);
        free(body);
        return 0;
}
