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
        *out = (lg_account){
            .id = lg_u128(in->id_hi, in->id),
            .debits_pending = lg_u128(in->debits_pending_hi, in->debits_pending),
            .debits_posted = lg_u128(in->debits_posted_hi, in->debits_posted),
            .credits_pending = lg_u128(in->credits_pending_hi, in->credits_pending),
            .credits_posted = lg_u128(in->credits_posted_hi, in->credits_posted),
            .user_data_128 = lg_u128(in->user_data_128_hi, in->user_data_128),
            .user_data_64 = in->user_data_64,
            .user_data_32 = in->user_data_32,
            .ledger = in->ledger,
            .code = in->code,
            .flags = in->flags,
            .timestamp = in->timestamp,
        };
        return KS_OK;
}

int lg_transfer_from_pb(const Keelson__Ledger__V1__Transfer *in, lg_transfer *out, char *err,
                        size_t err_len)
{
        if (code_check(in->code, err, err_len) != KS_OK) {
                return KS_INVALID_ARGUMENT;
        }
        *out = (lg_transfer){
            .id = lg_u128(in->id_hi, in->id),
            .debit_account_id = lg_u128(in->debit_account_id_hi, in->debit_account_id),
            .credit_account_id = lg_u128(in->credit_account_id_hi, in->credit_account_id),
            .amount = lg_u128(in->amount_hi, in->amount),
            .pending_id = lg_u128(in->pending_id_hi, in->pending_id),
            .user_data_128 = lg_u128(in->user_data_128_hi, in->user_data_128),
            .user_data_64 = in->user_data_64,
            .user_data_32 = in->user_data_32,
            .timeout = in->timeout,
            .ledger = in->ledger,
            .code = in->code,
            .flags = in->flags,
            .timestamp = in->timestamp,
        };
        return KS_OK;
}

void lg_account_to_pb(const lg_account *a, Keelson__Ledger__V1__Account *o)
{
        keelson__ledger__v1__account__init(o);
        o->id = lg_lo(a->id);
        o->id_hi = lg_hi(a->id);
        o->debits_pending = lg_lo(a->debits_pending);
        o->debits_pending_hi = lg_hi(a->debits_pending);
        o->debits_posted = lg_lo(a->debits_posted);
        o->debits_posted_hi = lg_hi(a->debits_posted);
        o->credits_pending = lg_lo(a->credits_pending);
        o->credits_pending_hi = lg_hi(a->credits_pending);
        o->credits_posted = lg_lo(a->credits_posted);
        o->credits_posted_hi = lg_hi(a->credits_posted);
        o->user_data_128 = lg_lo(a->user_data_128);
        o->user_data_128_hi = lg_hi(a->user_data_128);
        o->user_data_64 = a->user_data_64;
        o->user_data_32 = a->user_data_32;
        o->ledger = a->ledger;
        o->code = a->code;
        o->flags = a->flags;
        o->timestamp = a->timestamp;
}

void lg_transfer_to_pb(const lg_transfer *t, Keelson__Ledger__V1__Transfer *o)
{
        keelson__ledger__v1__transfer__init(o);
        o->id = lg_lo(t->id);
        o->id_hi = lg_hi(t->id);
        o->debit_account_id = lg_lo(t->debit_account_id);
        o->debit_account_id_hi = lg_hi(t->debit_account_id);
        o->credit_account_id = lg_lo(t->credit_account_id);
        o->credit_account_id_hi = lg_hi(t->credit_account_id);
        o->amount = lg_lo(t->amount);
        o->amount_hi = lg_hi(t->amount);
        o->pending_id = lg_lo(t->pending_id);
        o->pending_id_hi = lg_hi(t->pending_id);
        o->user_data_128 = lg_lo(t->user_data_128);
        o->user_data_128_hi = lg_hi(t->user_data_128);
        o->user_data_64 = t->user_data_64;
        o->user_data_32 = t->user_data_32;
        o->timeout = t->timeout;
        o->ledger = t->ledger;
        o->code = t->code;
        o->flags = t->flags;
        o->timestamp = t->timestamp;
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

int lg_reply_results(ks_call *call, int kind, const uint8_t *results, int n, uint8_t ok,
                     ProtobufCMessage *resp, size_t *n_field, int **field)
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
        *n_field = (size_t)n;
        *field = r;
        rc = ks_call_reply(call, resp);
        free(r);
        return rc;
}
