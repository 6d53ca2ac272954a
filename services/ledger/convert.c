/*
 * Protobuf messages <-> the ledger's structs. A 128-bit value travels as two
 * uint64 fields, <name> (low half) and <name>_hi (see ledger.proto).
 *
 * Only what the protobuf types cannot express is refused here, for the
 * whole request (invalid_argument): code above 65535 (TigerBeetle's code is
 * a u16). Everything else is the state machine's to answer per event.
 */
#include "ledger.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CODE_MAX 65535u

/* A 128-bit value travels as <name> and <name>_hi; the others as they are. */
#define FROM_PB_ID(name)     .name = lg_u128(in->name##_hi, in->name),
#define FROM_PB_AMOUNT(name) FROM_PB_ID(name)
#define FROM_PB_U64(name)    .name = in->name,
#define FROM_PB_U32(name)    FROM_PB_U64(name)
#define FROM_PB(name, kind)  FROM_PB_##kind(name)

#define TO_PB_ID(name)                                                                             \
        o->name = lg_lo(in->name);                                                                 \
        o->name##_hi = lg_hi(in->name);
#define TO_PB_AMOUNT(name) TO_PB_ID(name)
#define TO_PB_U64(name)    o->name = in->name;
#define TO_PB_U32(name)    TO_PB_U64(name)
#define TO_PB(name, kind)  TO_PB_##kind(name)

/* What the protobuf types cannot refuse: a code above a u16's range. */
static int code_check(uint32_t code, char *err, size_t err_len)
{
        if (code > CODE_MAX) {
                snprintf(err, err_len, "code must be at most %u", CODE_MAX);
                return KS_INVALID_ARGUMENT;
        }
        return KS_OK;
}

int lg_account_from_pb(const Keelson__Ledger__V1__Account *in, lg_account *out, char *err,
                       size_t err_len)
{
        if (code_check(in->code, err, err_len) != KS_OK) {
                return KS_INVALID_ARGUMENT;
        }
        *out = (lg_account){LG_ACCOUNT_FIELDS(FROM_PB)};
        return KS_OK;
}

int lg_transfer_from_pb(const Keelson__Ledger__V1__Transfer *in, lg_transfer *out, char *err,
                        size_t err_len)
{
        if (code_check(in->code, err, err_len) != KS_OK) {
                return KS_INVALID_ARGUMENT;
        }
        *out = (lg_transfer){LG_TRANSFER_FIELDS(FROM_PB)};
        return KS_OK;
}

void lg_account_to_pb(const lg_account *in, Keelson__Ledger__V1__Account *o)
{
        keelson__ledger__v1__account__init(o);
        LG_ACCOUNT_FIELDS(TO_PB)
}

void lg_transfer_to_pb(const lg_transfer *in, Keelson__Ledger__V1__Transfer *o)
{
        keelson__ledger__v1__transfer__init(o);
        LG_TRANSFER_FIELDS(TO_PB)
}

int lg_check_batch(ks_call *call, size_t n, const char *what)
{
        lg_service *svc = call->service;
        int rc;

        if ((rc = lg_require_caller(call, true)) != KS_OK) {
                return rc;
        }
        if (n == 0 || n > (size_t)svc->batch_max) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s: expected 1 to %d %s, got %zu",
                                    what, svc->batch_max, what, n);
        }
        return KS_OK;
}

int lg_ids_from_pb(size_t n_ids, const uint64_t *ids, size_t n_hi, const uint64_t *hi, int max,
                   u128 *out, char *err, size_t err_len)
{
        if (n_ids == 0 || n_ids > (size_t)max) {
                snprintf(err, err_len, "ids: expected 1 to %d ids, got %zu", max, n_ids);
                return KS_INVALID_ARGUMENT;
        }
        if (n_hi != 0 && n_hi != n_ids) {
                snprintf(err, err_len, "ids_hi: expected none or %zu values, got %zu", n_ids, n_hi);
                return KS_INVALID_ARGUMENT;
        }
        for (size_t i = 0; i < n_ids; i++) {
                out[i] = lg_u128(n_hi != 0 ? hi[i] : 0, ids[i]);
        }
        return KS_OK;
}

_Static_assert(sizeof(Keelson__Ledger__V1__CreateAccountsResponse__Result) == sizeof(int) &&
                   sizeof(Keelson__Ledger__V1__CreateTransfersResponse__Result) == sizeof(int),
               "lg_reply_results fills a result field as an int array");

int lg_reply_results(ks_call *call, int kind, const uint8_t *results, const uint64_t *timestamps,
                     int n, uint8_t ok, const lg_results_reply *out)
{
        lg_service *svc = call->service;
        int *r = calloc((size_t)n, sizeof(*r));
        uint64_t n_ok = 0;
        int rc;

        if (r == NULL) {
                return ks_call_oom(call);
        }
        for (int i = 0; i < n; i++) {
                r[i] = results[i];
                n_ok += results[i] == ok;
        }
        ks_counter_add(svc->events_ok[kind], n_ok);
        ks_counter_add(svc->events_failed[kind], (uint64_t)n - n_ok);
        *out->n_results = (size_t)n;
        *out->results = r;
        *out->n_timestamps = (size_t)n;
        *out->timestamps = (uint64_t *)timestamps; /* read only, by the packing */
        rc = ks_call_reply(call, out->resp);
        free(r);
        return rc;
}
