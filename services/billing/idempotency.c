/*
 * Idempotency-Key, with Stripe's semantics (docs/api.md, "Idempotency").
 *
 * The gateway checks the header (1..255 printable ASCII characters) and
 * carries it in the call's envelope. For a write method, the first request
 * with a key runs and its outcome is stored with the key, in the request's
 * own transaction: the key is recorded exactly when the effect commits.
 * For 24 hours the same key in the same tenant then answers:
 *
 *   - the same request (method and packed request equal): the stored reply,
 *     marked replayed (the gateway adds Idempotent-Replayed: true); nothing
 *     runs again;
 *   - another request: invalid_argument, and nothing runs;
 *   - while the first request still runs: aborted ("retry"), at once.
 *
 * The lock is a transaction-scoped advisory lock on a hash of the tenant
 * and the key, tried without waiting. It is taken in its own statement
 * before the record is read, in a pipeline: under READ COMMITTED the read
 * then takes its snapshot after the lock is held, so it sees the record of
 * a request that held the lock and committed a moment before.
 *
 * A request refused before it ran (its input failed validation) stores
 * nothing: bl_tx_run is never reached. One that ran and was refused for
 * what it asked (not_found, failed_precondition, ...) is stored after its
 * rollback, in a transaction of its own; transient failures (unavailable,
 * aborted, internal) store nothing, so a retry runs.
 */
#include "billing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_crypto.h"
#include "ks_log.h"

static const char sql_lock[] = "SELECT pg_try_advisory_xact_lock($1::int8)";

static const char sql_get[] = "SELECT method, fingerprint, code, message, reply, created_ms,"
                              " created_ms > billing.now_ms() - $2::int8"
                              " FROM billing.idempotency_keys"
                              " WHERE tenant_id = billing.ctx_tenant() AND key = $1";

static const char sql_drop_expired[] = "DELETE FROM billing.idempotency_keys"
                                       " WHERE tenant_id = billing.ctx_tenant() AND key = $1";

static const char sql_store[] =
    "INSERT INTO billing.idempotency_keys (tenant_id, key, method, fingerprint, code, message,"
    " reply) VALUES (billing.ctx_tenant(), $1, $2, $3::bytea, $4::int4, $5, $6::bytea)"
    " ON CONFLICT (tenant_id, key) DO NOTHING";

static bool applies(const ks_call *call)
{
        return call != NULL && call->idempotency_key[0] != '\0' &&
               (call->method->flags & KS_M_IDEMPOTENT) == 0;
}

/* SHA-256 of the method name, a NUL, and the request as packed (protobuf-c packs canonically). */
static int fingerprint(const ks_call *call, char out[2 + 64 + 1])
{
        size_t name_len = strlen(call->method->name);
        size_t len = protobuf_c_message_get_packed_size(call->in);
        uint8_t *buf = malloc(name_len + 1 + len);

        if (buf == NULL) {
                return KS_RESOURCE_EXHAUSTED;
        }
        memcpy(buf, call->method->name, name_len + 1);
        protobuf_c_message_pack(call->in, buf + name_len + 1);
        out[0] = '\\';
        out[1] = 'x';
        ks_sha256_hex(buf, name_len + 1 + len, out + 2);
        free(buf);
        return KS_OK;
}

/* The advisory lock's key: 64 bits of SHA-256 over the tenant and the key. */
static ks_pg_num lock_key(const char *tenant_id, const char *key)
{
        char buf[BL_UUID_LEN + 1 + 256];
        uint8_t h[KS_SHA256_BYTES];
        int64_t v = 0;
        int n = snprintf(buf, sizeof(buf), "%s/%s", tenant_id, key);

        ks_sha256(buf, (size_t)n, h);
        for (int i = 0; i < 8; i++) {
                v = (int64_t)(((uint64_t)v << 8) | h[i]);
        }
        return ks_pg_num_of(v);
}

/* The stored outcome into the call: its code, message and reply. */
static int replay(bl_tx *tx, const PGresult *res, int *code)
{
        ks_call *call = tx->call;
        const char *reply = ks_pg_text(res, 0, 4);
        size_t cap = strlen(reply) / 2 + 1;
        long n;

        *code = (int)ks_pg_int(res, 0, 2);
        snprintf(call->message, sizeof(call->message), "%s", ks_pg_text(res, 0, 3));
        free(call->out_payload);
        call->out_payload = NULL;
        call->out_len = 0;
        if (*code == KS_OK && reply[0] != '\0') {
                if ((call->out_payload = malloc(cap)) == NULL) {
                        return ks_call_oom(call);
                }
                if ((n = ks_pg_bytea_decode(reply, call->out_payload, cap)) < 0) {
                        return bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
                }
                call->out_len = (size_t)n;
        }
        ks_log_info(tx->request_id, "idempotency key replayed", "{s:s}", "method",
                    call->method->name);
        return KS_OK;
}

int bl_idem_claim(bl_tx *tx, bl_idem_state *state, int *code)
{
        const char *key = tx->call != NULL ? tx->call->idempotency_key : "";
        ks_pg_num lk, ttl = ks_pg_num_of(BL_IDEMPOTENCY_TTL_MS);
        PGresult *locked = NULL, *res = NULL;
        int rc;

        *state = BL_IDEM_NONE;
        *code = KS_OK;
        if (!applies(tx->call)) {
                return KS_OK;
        }
        if ((rc = fingerprint(tx->call, tx->idem_fp)) != KS_OK) {
                return ks_call_oom(tx->call);
        }
        lk = lock_key(tx->tenant_id, key);
        const char *lp[1] = {lk.s}, *gp[2] = {key, ttl.s};
        const ks_pg_stmt s[2] = {{.sql = sql_lock, .n_params = 1, .params = lp, .out = &locked},
                                 {.sql = sql_get, .n_params = 2, .params = gp, .out = &res}};
        if ((rc = bl_pipeline(tx, s, 2)) != KS_OK) {
                return rc;
        }
        if (!ks_pg_bool(locked, 0, 0)) {
                rc = bl_fail(tx, KS_ABORTED,
                             "a request with this Idempotency-Key is in progress;"
                             " retry it later");
        } else if (PQntuples(res) == 1 && ks_pg_bool(res, 0, 6)) {
                if (strcmp(ks_pg_text(res, 0, 0), tx->call->method->name) != 0 ||
                    strcmp(ks_pg_text(res, 0, 1), tx->idem_fp) != 0) {
                        rc = bl_fail(tx, KS_INVALID_ARGUMENT,
                                     "this Idempotency-Key was used with another request; a key"
                                     " may only be reused with the same request");
                } else if ((rc = replay(tx, res, code)) == KS_OK) {
                        *state = BL_IDEM_REPLAYED;
                }
        } else if (PQntuples(res) == 1) { /* older than 24 hours: the key is free again */
                const char *dp[1] = {key};
                if ((rc = bl_defer(tx, sql_drop_expired, 1, dp)) == KS_OK) {
                        *state = BL_IDEM_NEW;
                }
        } else {
                *state = BL_IDEM_NEW;
        }
        PQclear(locked);
        PQclear(res);
        return rc;
}

static int store(bl_tx *tx, int code)
{
        ks_call *call = tx->call;
        char *reply = NULL;
        ks_pg_num c = ks_pg_num_of(code);
        int rc;

        if (code == KS_OK && (reply = ks_pg_bytea_text(call->out_payload, call->out_len)) == NULL) {
                return ks_call_oom(call);
        }
        const char *p[6] = {call->idempotency_key,
                            call->method->name,
                            tx->idem_fp,
                            c.s,
                            code == KS_OK ? "" : call->message,
                            reply};
        rc = bl_defer(tx, sql_store, 6, p);
        free(reply);
        return rc;
}

int bl_idem_store(bl_tx *tx, int code)
{
        return applies(tx->call) ? store(tx, code) : KS_OK;
}

bool bl_idem_keeps(int code)
{
        return code == KS_NOT_FOUND || code == KS_ALREADY_EXISTS ||
               code == KS_FAILED_PRECONDITION || code == KS_OUT_OF_RANGE ||
               code == KS_INVALID_ARGUMENT;
}

typedef struct failure {
        ks_call *call;
        int code;
        char fp[2 + 64 + 1];
} failure;

static int store_fn(bl_tx *tx, void *arg)
{
        failure *f = arg;

        tx->call = f->call;
        memcpy(tx->idem_fp, f->fp, sizeof(tx->idem_fp));
        return store(tx, f->code);
}

void bl_idem_store_failure(ks_call *call, int code)
{
        failure f = {.call = call, .code = code};
        char message[KS_MESSAGE_MAX];

        if (!applies(call) || fingerprint(call, f.fp) != KS_OK) {
                return;
        }
        /* The refusal's message is the reply: keep it whatever storing it does. */
        snprintf(message, sizeof(message), "%s", call->message);
        if (bl_tx_run_as(call->service, call->request_id, call->caller->tenant_id, store_fn, &f) !=
            KS_OK) {
                ks_log_warn(call->request_id, "idempotency key: the refusal was not stored", NULL);
        }
        snprintf(call->message, sizeof(call->message), "%s", message);
}
