/*
 * API keys: CreateApiKey shows "ks_live_..." once and stores its SHA-256;
 * the gateway authenticates "Authorization: Bearer ks_live_..." through
 * ResolveContext like a session token, with the key's role in the key's
 * tenant; ListApiKeys never shows a secret; RevokeApiKey stops the key and
 * publishes auth.context_revoked with its hash. ResolveContext is also
 * called directly over the broker, as the gateway does, for both kinds of
 * bearer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "auth_it.h"
#include "ks_crypto.h"
#include "keelson/auth/v1/auth.pb-c.h"
#include "ks_rpc.h"
#include "ks_topology.h"

#define KEY_LEN 51 /* "ks_live_" + 43 base64url characters */

typedef struct api_key {
        char id[AIT_ID_MAX];
        char key[AIT_TOKEN_MAX];
} api_key;

static void create_key(const ait_user *caller, const char *name, const char *role, api_key *k)
{
        ait_create_key(caller->token, name, role, k->key, k->id);
}

/* A key authenticates as long as ListMembers (members.read, every role) answers 200. */
static long list_members_status(const char *key)
{
        return ait_status("ListMembers", "{}", key);
}

static void wait_key_refused(const char *key)
{
        ait_wait_status("ListMembers", "{}", key, 401);
}

static void test_create_use_list(void **state)
{
        ait_user owner;
        char body[512], hex[65];
        const char *params[2];
        long mark;
        json_t *created, *j, *k;
        it_http_response r;

        (void)state;
        ait_signup("it-key-owner", "Key Tenant", &owner);
        mark = ait_outbox_mark();
        AIT_BODY(body, "{s:s, s:s}", "name", "deploy bot", "role", "admin");
        created = ait_ok("CreateApiKey", body, owner.token);
        const char *key = ait_str(created, "key");
        k = json_object_get(created, "apiKey");
        assert_int_equal(strlen(key), KEY_LEN);
        assert_memory_equal(key, "ks_live_", 8);
        assert_string_equal(ait_str(k, "name"), "deploy bot");
        assert_string_equal(ait_str(k, "role"), "admin");
        assert_memory_equal(ait_str(k, "prefix"), key, 12);
        assert_string_equal(ait_str(k, "createdByUserId"), owner.user_id);
        ks_sha256_hex(key, strlen(key), hex);
        params[0] = hex;
        params[1] = owner.tenant_id;
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.api_keys WHERE"
                                      " encode(token_sha256, 'hex') = $1 AND tenant_id = $2::uuid",
                                      2, params),
                         1);
        params[0] = key;
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.api_keys a"
                                      " WHERE strpos(a::text, $1) > 0",
                                      1, params),
                         0);
        ait_assert_one_summary(mark, owner.tenant_id, "CreateApiKey");

        /* The key is a bearer like a session: its tenant, its role. */
        j = ait_ok("ListMembers", "{}", key);
        assert_string_equal(ait_str(json_array_get(json_object_get(j, "members"), 0), "userId"),
                            owner.user_id);
        json_decref(j);
        /* User methods need a user. */
        ait_fails_with("WhoAmI", "{}", key, "permission_denied",
                       "this method needs a user session");
        ait_fails_with("ChangePassword", "{}", key, "permission_denied",
                       "this method needs a user session");

        ait_call("ListApiKeys", "{}", owner.token, &r);
        assert_int_equal(r.status, 200);
        assert_null(strstr(r.body, key));
        assert_null(strstr(r.body, "\"key\""));
        j = ait_json(&r);
        assert_int_equal(json_array_size(json_object_get(j, "apiKeys")), 1);
        json_decref(j);
        it_http_response_free(&r);
        j = ait_ok("ListApiKeys", "{}", key); /* an admin key may list keys */
        json_decref(j);
        json_decref(ait_ok("CreateApiKey", "{\"name\":\"x\",\"role\":\"viewer\"}", owner.token));
        json_decref(ait_ok("ListAudit", "{}", owner.token));
        json_decref(created);
}

static void test_roles_bound_keys(void **state)
{
        ait_user owner, admin;
        api_key viewer_key, admin_key, made_by_key;
        long mark;
        json_t *j;

        (void)state;
        ait_tenant_of_two("it-key-roles", "Key Roles", "admin", &owner, &admin);
        create_key(&owner, "viewer key", "viewer", &viewer_key);
        create_key(&admin, "admin key", "admin", &admin_key);

        mark = ait_outbox_mark();
        /* No key above its creator. */
        ait_fails_with("CreateApiKey", "{\"name\":\"k\",\"role\":\"owner\"}", admin.token,
                       "permission_denied",
                       "cannot create a key with a role above your own (admin)");
        ait_fails_with("CreateApiKey", "{\"name\":\"k\",\"role\":\"admin\"}", viewer_key.key,
                       "permission_denied", "your role (viewer) lacks api_keys.manage");
        /* A viewer key does what a viewer does. */
        ait_fails_with("Invite", "{\"emails\":[\"z@example.test\"],\"role\":\"viewer\"}",
                       viewer_key.key, "permission_denied",
                       "your role (viewer) lacks members.invite");
        assert_int_equal(ait_events(mark, "users.admin_summary", owner.tenant_id), 0);
        /* A key may make a key within its own role; it is recorded as the creator. */
        j = ait_ok("CreateApiKey", "{\"name\":\"child\",\"role\":\"member\"}", admin_key.key);
        snprintf(made_by_key.id, sizeof(made_by_key.id), "%s",
                 ait_str(json_object_get(j, "apiKey"), "id"));
        assert_string_equal(ait_str(json_object_get(j, "apiKey"), "createdByApiKeyId"),
                            admin_key.id);
        json_decref(j);
        /* An admin cannot revoke a key ranked above them. */
        api_key owner_key;
        char body[256];
        create_key(&owner, "owner key", "owner", &owner_key);
        AIT_BODY(body, "{s:s}", "apiKeyId", owner_key.id);
        ait_fails_with("RevokeApiKey", body, admin.token, "permission_denied",
                       "this key's role is above yours (admin)");
        assert_int_equal(list_members_status(owner_key.key), 200);
        /* Names are required; expiries lie ahead. */
        ait_fails_with("CreateApiKey", "{\"name\":\"\",\"role\":\"viewer\"}", owner.token,
                       "invalid_argument", "name: required");
        ait_fails_with(
            "CreateApiKey", "{\"name\":\"old\",\"role\":\"viewer\",\"expiresAtUnixMs\":\"1000\"}",
            owner.token, "invalid_argument", "expires_at_unix_ms: in the future, within ten years");
}

static void test_revoke(void **state)
{
        ait_user owner;
        api_key k;
        char body[256], reason[64] = "";
        long mark;

        (void)state;
        ait_signup("it-key-revoke", "Key Revoke", &owner);
        create_key(&owner, "short lived", "member", &k);
        assert_int_equal(list_members_status(k.key), 200);
        mark = ait_outbox_mark();
        AIT_BODY(body, "{s:s}", "apiKeyId", k.id);
        json_decref(ait_ok("RevokeApiKey", body, owner.token));
        wait_key_refused(k.key);
        assert_int_equal(ait_revoked_has(mark, k.key, reason), 1);
        assert_string_equal(reason, "api_key_revoked");
        ait_assert_one_summary(mark, owner.tenant_id, "RevokeApiKey");
        /* Again: nothing changes, nothing is published. */
        mark = ait_outbox_mark();
        json_decref(ait_ok("RevokeApiKey", body, owner.token));
        assert_int_equal(ait_events(mark, "users.admin_summary", NULL), 0);
        json_t *j = ait_ok("ListApiKeys", "{\"includeRevoked\":true}", owner.token);
        json_t *first = json_array_get(json_object_get(j, "apiKeys"), 0);
        assert_true(atoll(ait_str(first, "revokedAtUnixMs")) > 0);
        json_decref(j);
        j = ait_ok("ListApiKeys", "{}", owner.token);
        assert_int_equal(json_array_size(json_object_get(j, "apiKeys")), 0);
        json_decref(j);
}

static void test_expired_and_unknown_keys(void **state)
{
        ait_user owner;
        api_key k;
        const char *params[1];

        (void)state;
        ait_signup("it-key-exp", "Key Expiry", &owner);
        create_key(&owner, "expiring", "viewer", &k);
        params[0] = k.id;
        ait_exec("UPDATE auth.api_keys SET created_at = now() - interval '2 days',"
                 " expires_at = now() - interval '1 day' WHERE id = $1::uuid",
                 1, params);
        wait_key_refused(k.key);
        assert_int_equal(list_members_status("ks_live_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
                         401);
}

static void test_repeated_create_makes_one_key(void **state)
{
        ait_user owner;
        it_http_response first, second;
        long mark;
        const char *params[1];

        (void)state;
        ait_signup("it-key-dup", "Key Dedupe", &owner);
        mark = ait_outbox_mark();
        ait_call_rid("CreateApiKey", "{\"name\":\"once\",\"role\":\"viewer\"}", owner.token,
                     "it-key-dup-request", &first);
        ait_call_rid("CreateApiKey", "{\"name\":\"once\",\"role\":\"viewer\"}", owner.token,
                     "it-key-dup-request", &second);
        assert_int_equal(first.status, 200);
        /* The key is shown once: a repeat cannot show it again, and makes no second key. */
        assert_int_equal(second.status, 409);
        it_http_response_free(&first);
        it_http_response_free(&second);
        params[0] = owner.tenant_id;
        assert_int_equal(ait_sql_long("SELECT count(*) FROM auth.api_keys"
                                      " WHERE tenant_id = $1::uuid",
                                      1, params),
                         1);
        ait_assert_one_summary(mark, owner.tenant_id, "CreateApiKey");
}

/* ---- ResolveContext, as the gateway calls it ------------------------------------ */

static Keelson__Auth__V1__ResolveContextResponse *resolve(ks_rpc_client *c, const char *token)
{
        Keelson__Auth__V1__ResolveContextRequest req =
            KEELSON__AUTH__V1__RESOLVE_CONTEXT_REQUEST__INIT;
        Keelson__Auth__V1__ResolveContextResponse *resp;
        uint8_t buf[1024];
        ks_rpc_call_args args = {0};
        ks_rpc_result res;

        req.token = (char *)token;
        args.method = "keelson.auth.v1.AuthService/ResolveContext";
        args.request_id = "it-resolve";
        args.payload = buf;
        args.payload_len = protobuf_c_message_pack(&req.base, buf);
        assert_int_equal(ks_rpc_call(c, &args, &res), KS_OK);
        resp =
            keelson__auth__v1__resolve_context_response__unpack(NULL, res.payload_len, res.payload);
        ks_rpc_result_clear(&res);
        assert_non_null(resp);
        return resp;
}

static void test_resolve_context_both_bearers(void **state)
{
        Keelson__Auth__V1__ResolveContextResponse *r;
        ks_rpc_client *c = NULL;
        ait_user owner;
        api_key k;

        (void)state;
        ait_signup("it-key-resolve", "Key Resolve", &owner);
        create_key(&owner, "resolver", "member", &k);
        /* Connected before the first call (calls fail fast until the dial completes). */
        assert_int_equal(it_rpc_client(&c, ait_stack.broker_url, KS_SVC_AUTH, 5000, 1), 0);

        r = resolve(c, owner.token);
        assert_true(r->authenticated);
        assert_string_equal(r->user_id, owner.user_id);
        assert_string_equal(r->tenant_id, owner.tenant_id);
        assert_string_equal(r->role, "owner");
        assert_true(r->session_id[0] != '\0');
        assert_string_equal(r->api_key_id, "");
        keelson__auth__v1__resolve_context_response__free_unpacked(r, NULL);

        r = resolve(c, k.key);
        assert_true(r->authenticated);
        assert_string_equal(r->user_id, "");
        assert_string_equal(r->api_key_id, k.id);
        assert_string_equal(r->tenant_id, owner.tenant_id);
        assert_string_equal(r->role, "member");
        assert_int_equal(r->expires_at_unix_ms, 0);
        keelson__auth__v1__resolve_context_response__free_unpacked(r, NULL);

        r = resolve(c, "ks_live_unknown");
        assert_false(r->authenticated);
        keelson__auth__v1__resolve_context_response__free_unpacked(r, NULL);
        r = resolve(c, "unknown-session-token");
        assert_false(r->authenticated);
        keelson__auth__v1__resolve_context_response__free_unpacked(r, NULL);
        ks_rpc_client_free(c);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_create_use_list),
            cmocka_unit_test(test_roles_bound_keys),
            cmocka_unit_test(test_revoke),
            cmocka_unit_test(test_expired_and_unknown_keys),
            cmocka_unit_test(test_repeated_create_makes_one_key),
            cmocka_unit_test(test_resolve_context_both_bearers),
        };

        return cmocka_run_group_tests(tests, ait_setup, NULL);
}
