/*
 * The events of the auth service, written to the outbox inside the write's
 * own transaction (services/core/ks_outbox.h): a rolled-back write leaves
 * no event, a committed one is published by a relay after the commit.
 *
 *   users.admin_summary    exactly one per committed admin write on users,
 *                          roles, memberships, invitations or API keys
 *   auth.context_revoked   sessions or keys that must stop working now, by
 *                          the SHA-256 of each token (gateways' caches)
 *   auth.email             a mail to send (invitations, password resets)
 */
#include "auth.h"

#include <stdlib.h>
#include <string.h>

#include "keelson/auth/v1/events.pb-c.h"
#include "ks_log.h"
#include "ks_outbox.h"

#define SCHEMA "auth"

/* Packs any message into a malloc'd buffer. */
static int pack(const ProtobufCMessage *m, uint8_t **out, size_t *len)
{
        size_t n = protobuf_c_message_get_packed_size(m);

        *out = malloc(n > 0 ? n : 1);
        if (*out == NULL) {
                return KS_INTERNAL;
        }
        *len = protobuf_c_message_pack(m, *out);
        return KS_OK;
}

static int emit(PGconn *conn, const char *request_id, const char *topic, const char *tenant_id,
                const ProtobufCMessage *m)
{
        uint8_t *buf = NULL;
        size_t len = 0;
        int rc;

        if ((rc = pack(m, &buf, &len)) != KS_OK) {
                return rc;
        }
        rc = ks_outbox_add(conn, request_id, SCHEMA, topic,
                           tenant_id != NULL && tenant_id[0] != '\0' ? tenant_id : NULL, buf, len,
                           NULL);
        free(buf);
        return rc;
}

int auth_emit_admin_summary(PGconn *conn, const char *request_id, const char *tenant_id,
                            const char *reason)
{
        Keelson__Auth__V1__AdminSummaryChanged m = KEELSON__AUTH__V1__ADMIN_SUMMARY_CHANGED__INIT;

        m.tenant_id = (char *)tenant_id;
        m.reason = (char *)reason;
        return emit(conn, request_id, "users.admin_summary", tenant_id, &m.base);
}

/* One event for rows [first, first + n) of res. */
static int emit_revoked_chunk(PGconn *conn, const char *request_id, const auth_revocation *r,
                              const PGresult *res, int col, int first, int n)
{
        Keelson__Auth__V1__ContextRevoked m = KEELSON__AUTH__V1__CONTEXT_REVOKED__INIT;
        uint8_t(*hashes)[KS_SHA256_BYTES] = NULL;
        ProtobufCBinaryData *items = NULL;
        int rc = KS_OK;

        if (n > 0) {
                hashes = calloc((size_t)n, sizeof(*hashes));
                items = calloc((size_t)n, sizeof(*items));
                if (hashes == NULL || items == NULL) {
                        rc = KS_INTERNAL;
                }
        }
        for (int i = 0; rc == KS_OK && i < n; i++) {
                if (ks_pg_bytea_decode(PQgetvalue(res, first + i, col), hashes[i],
                                       KS_SHA256_BYTES) != KS_SHA256_BYTES) {
                        rc = KS_INTERNAL;
                        break;
                }
                items[i].data = hashes[i];
                items[i].len = KS_SHA256_BYTES;
        }
        if (rc == KS_OK) {
                m.n_token_sha256 = (size_t)n;
                m.token_sha256 = items;
                m.user_id = (char *)(r->user_id ? r->user_id : "");
                m.tenant_id = (char *)(r->tenant_id ? r->tenant_id : "");
                m.reason = (char *)r->reason;
                m.api_key_id = (char *)(r->api_key_id ? r->api_key_id : "");
                rc = emit(conn, request_id, "auth.context_revoked", r->tenant_id, &m.base);
        }
        free(items);
        free(hashes);
        return rc;
}

int auth_emit_context_revoked(PGconn *conn, const char *request_id, const auth_revocation *r,
                              const PGresult *res, int col)
{
        int rows = res != NULL ? PQntuples(res) : 0, rc;

        if (rows == 0) {
                if (r->user_id == NULL || r->user_id[0] == '\0') {
                        return KS_OK;
                }
                return emit_revoked_chunk(conn, request_id, r, NULL, col, 0, 0);
        }
        for (int first = 0; first < rows; first += AUTH_REVOKED_PER_EVENT) {
                int n =
                    rows - first < AUTH_REVOKED_PER_EVENT ? rows - first : AUTH_REVOKED_PER_EVENT;

                if ((rc = emit_revoked_chunk(conn, request_id, r, res, col, first, n)) != KS_OK) {
                        return rc;
                }
        }
        return KS_OK;
}

int auth_email_pack(const auth_email *e, uint8_t **out, size_t *len)
{
        Keelson__Auth__V1__EmailRequested m = KEELSON__AUTH__V1__EMAIL_REQUESTED__INIT;

        m.to = (char *)e->to;
        m.kind = (char *)e->kind;
        m.token = (char *)e->token;
        m.tenant_name = (char *)(e->tenant_name ? e->tenant_name : "");
        m.tenant_id = (char *)(e->tenant_id ? e->tenant_id : "");
        m.role = (char *)(e->role ? e->role : "");
        m.expires_at_unix_ms = e->expires_at_unix_ms;
        return pack(&m.base, out, len);
}

int auth_emit_email(PGconn *conn, const char *request_id, const auth_email *e)
{
        uint8_t *buf = NULL;
        size_t len = 0;
        int rc;

        if ((rc = auth_email_pack(e, &buf, &len)) != KS_OK) {
                return rc;
        }
        rc = ks_outbox_add(conn, request_id, SCHEMA, "auth.email", e->tenant_id, buf, len, NULL);
        /* The buffer holds the token: wiped, not only freed. */
        explicit_bzero(buf, len);
        free(buf);
        return rc;
}
