/*
 * libFuzzer target: ks_json_to_message over untrusted JSON, for the message
 * types of keelson.test.v1 (every field kind, maps, oneofs, recursion) and
 * for keelson.auth.v1.SignUpRequest (a public endpoint's body).
 *
 * Beyond "no memory error, no leak, no undefined behaviour" it checks:
 * - a refused input returns KS_INVALID_ARGUMENT, leaves *out NULL and puts a
 *   NUL-terminated, non-empty message in err;
 * - an accepted input round-trips: ks_json_from_message succeeds, its output
 *   parses again into a message with the same packed protobuf bytes, and
 *   printing that second message gives the same text (the output is a fixed
 *   point);
 * - the message is one protobuf-c itself would build: packing, unpacking and
 *   packing again gives the same bytes.
 * Any violation aborts, so libFuzzer saves the input.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keelson/auth/v1/auth.pb-c.h"
#include "keelson/test/v1/types.pb-c.h"
#include "ks_code.h"
#include "ks_json.h"

#define ERR_LEN 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ProtobufCMessageDescriptor *const descs[] = {
    &keelson__test__v1__all_types__descriptor,
    &keelson__test__v1__inner__descriptor,
    &keelson__auth__v1__sign_up_request__descriptor,
};

__attribute__((noreturn)) static void die(const ProtobufCMessageDescriptor *desc, const char *what,
                                          const char *detail)
{
        fprintf(stderr, "fuzz_json: %s: %s%s%s\n", desc->name, what, detail != NULL ? ": " : "",
                detail != NULL ? detail : "");
        abort();
}

/* The packed bytes of msg, malloc'd (never NULL: one byte even when empty). */
static uint8_t *pack(const ProtobufCMessage *msg, size_t *len)
{
        *len = protobuf_c_message_get_packed_size(msg);
        uint8_t *buf = malloc(*len + 1);
        if (buf == NULL)
                abort();
        if (protobuf_c_message_pack(msg, buf) != *len)
                die(msg->descriptor, "pack wrote another size than get_packed_size said", NULL);
        return buf;
}

static bool same_bytes(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len)
{
        return a_len == b_len && memcmp(a, b, a_len) == 0;
}

/* protobuf-c's own unpack of our packed message packs to the same bytes. */
static void check_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *bytes, size_t len)
{
        ProtobufCMessage *u = protobuf_c_message_unpack(desc, NULL, len, bytes);
        if (u == NULL)
                die(desc, "protobuf-c cannot unpack the packed message", NULL);
        size_t u_len = 0;
        uint8_t *u_bytes = pack(u, &u_len);
        if (!same_bytes(bytes, len, u_bytes, u_len))
                die(desc, "unpack then pack changed the bytes", NULL);
        free(u_bytes);
        protobuf_c_message_free_unpacked(u, NULL);
}

static char *print(const ProtobufCMessage *msg, size_t *len)
{
        char *json = NULL;

        if (ks_json_from_message(msg, &json, len) != KS_OK || json == NULL)
                die(msg->descriptor, "ks_json_from_message failed on a parsed message", NULL);
        if (strlen(json) != *len)
                die(msg->descriptor, "output length differs from strlen", json);
        return json;
}

static void round_trip(const ProtobufCMessageDescriptor *desc, const ProtobufCMessage *msg)
{
        char err[ERR_LEN];
        ProtobufCMessage *again = NULL;
        size_t len1 = 0, len2 = 0, json_len = 0, json2_len = 0;

        if (!protobuf_c_message_check(msg))
                die(desc, "protobuf_c_message_check refuses the parsed message", NULL);
        uint8_t *bytes1 = pack(msg, &len1);
        check_unpack(desc, bytes1, len1);
        char *json = print(msg, &json_len);
        if (ks_json_to_message(desc, json, json_len, &again, err, sizeof(err)) != KS_OK) {
                fprintf(stderr, "fuzz_json: output: %s\nfuzz_json: error: %s\n", json, err);
                die(desc, "our own output does not parse", NULL);
        }
        uint8_t *bytes2 = pack(again, &len2);
        if (!same_bytes(bytes1, len1, bytes2, len2)) {
                fprintf(stderr, "fuzz_json: output: %s\n", json);
                die(desc, "JSON round trip changed the packed message", NULL);
        }
        char *json2 = print(again, &json2_len);
        if (json_len != json2_len || memcmp(json, json2, json_len) != 0) {
                fprintf(stderr, "fuzz_json: first:  %s\nfuzz_json: second: %s\n", json, json2);
                die(desc, "printing the re-parsed message gives other text", NULL);
        }
        free(json2);
        free(bytes2);
        protobuf_c_message_free_unpacked(again, NULL);
        free(json);
        free(bytes1);
}

static void fuzz_one(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t size)
{
        char err[ERR_LEN];
        /* Not NULL, so that a failure which forgets to clear *out shows. */
        ProtobufCMessage *msg = (ProtobufCMessage *)(uintptr_t)1;

        memset(err, 'x', sizeof(err));
        int rc = ks_json_to_message(desc, (const char *)data, size, &msg, err, sizeof(err));
        if (rc != KS_OK) {
                if (rc != KS_INVALID_ARGUMENT)
                        die(desc, "refused with another code than invalid_argument", NULL);
                if (msg != NULL)
                        die(desc, "refused but *out is not NULL", NULL);
                if (memchr(err, '\0', sizeof(err)) == NULL || err[0] == '\0')
                        die(desc, "refused without a NUL-terminated error message", NULL);
                return;
        }
        if (msg == NULL || msg->descriptor != desc)
                die(desc, "accepted without a message of the type asked for", NULL);
        round_trip(desc, msg);
        protobuf_c_message_free_unpacked(msg, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        for (size_t i = 0; i < sizeof(descs) / sizeof(descs[0]); i++)
                fuzz_one(descs[i], data, size);
        return 0;
}
