/*
 * The gateway's context cache as a client sees it, on the stack's two
 * gateway replicas: a token is resolved once and then served from the
 * cache; an auth.context_revoked event makes both replicas refuse it on the
 * next request, long before the cache's TTL; the TTL bounds what a lost
 * event can cost.
 *
 * To tell the cache from auth, some tests revoke a session in the database
 * directly (no event, so auth still says no but the cache does not know)
 * and then publish the event themselves on the broker's event input, the
 * way auth's outbox relay does. The end-to-end tests log out, change a
 * member's role and revoke an API key through one replica and check both.
 *
 * A role change is seen through the ledger, which takes the caller's role
 * from the context the gateway hands it (auth's own methods read the role
 * again in the database): a viewer may not write, so CreateAccounts turns
 * from 200 into 403 once a replica drops the cached member context.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <jansson.h>

#include "it_support.h"
#include "keelson/auth/v1/events.pb-c.h"
#include "ks_code.h"
#include "ks_crypto.h"
#include "ks_events.h"

#define TOKEN_MAX        512
#define ID_MAX           64
#define EVENT_WAIT_MS    10000 /* well inside the 30 s session TTL */
#define PUBLISH_EVERY_MS 200
#define PASSWORD         "correct horse battery staple"
#define REVOKED_TOPIC    "auth.context_revoked"
#define LEDGER_WRITE     "/keelson.ledger.v1.LedgerService/CreateAccounts"
#define ACCOUNT_BODY     "{\"accounts\":[{\"id\":\"1\",\"ledger\":840,\"code\":1}]}"

static it_stack g_stack;
static ks_publisher *g_pub;
static ks_subscriber *g_sub;

/* ---- helpers ------------------------------------------------------------------ */

static void sleep_ms(long ms)
{
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

static long whoami(const char *url, const char *token)
{
        it_http_response r;
        assert_int_equal(it_auth_call(url, "WhoAmI", "{}", token, NULL, &r), 0);
        long status = r.status;
        it_http_response_free(&r);
        return status;
}

static void assert_both(const char *token, long want)
{
        for (int i = 0; i < 2; i++) {
                assert_int_equal(whoami(g_stack.gateway_urls[i], token), want);
        }
}

/* Revokes the session in the database only: auth refuses it, no event is sent. */
static void revoke_in_db(const char *where_sql, const char *param)
{
        char sql[256];
        const char *params[1] = {param};
        PGconn *c = it_pg_connect(&g_stack);
        assert_non_null(c);
        snprintf(sql, sizeof(sql), "UPDATE auth.sessions SET revoked_at = now() WHERE %s",
                 where_sql);
        PGresult *res = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_COMMAND_OK || atoi(PQcmdTuples(res)) < 1) {
                fail_msg("revoking in the database: %s (%s rows)", PQerrorMessage(c),
                         PQcmdTuples(res));
        }
        PQclear(res);
        PQfinish(c);
}

static void token_hash(const char *token, uint8_t sha[KS_SHA256_BYTES], char hex[65])
{
        ks_sha256(token, strlen(token), sha);
        ks_sha256_hex(token, strlen(token), hex);
}

static void publish(const uint8_t *sha, const char *user_id, const char *tenant_id)
{
        Keelson__Auth__V1__ContextRevoked m = KEELSON__AUTH__V1__CONTEXT_REVOKED__INIT;
        Keelson__Events__V1__Event ev = KEELSON__EVENTS__V1__EVENT__INIT;
        ProtobufCBinaryData hash = {KS_SHA256_BYTES, (uint8_t *)sha};
        uint8_t buf[512];
        char event_id[37];
        if (sha != NULL) {
                m.n_token_sha256 = 1;
                m.token_sha256 = &hash;
        }
        m.user_id = (char *)(user_id != NULL ? user_id : "");
        m.tenant_id = (char *)(tenant_id != NULL ? tenant_id : "");
        m.reason = "sessions_revoked";
        assert_true(keelson__auth__v1__context_revoked__get_packed_size(&m) <= sizeof(buf));
        ev.payload.len = keelson__auth__v1__context_revoked__pack(&m, buf);
        ev.payload.data = buf;
        assert_int_equal(ks_uuid_v4(event_id), 0);
        ev.event_id = event_id;
        ev.topic = REVOKED_TOPIC;
        ev.tenant_id = m.tenant_id;
        assert_int_equal(ks_publish(g_pub, &ev), KS_OK);
}

/*
 * Publishes until both replicas refuse token (pub/sub drops what is sent
 * before a connection is up, so one message may not be enough).
 */
static void publish_until_refused(const uint8_t *sha, const char *user_id, const char *tenant_id,
                                  const char *const *tokens, int n_tokens)
{
        for (int waited = 0; waited < EVENT_WAIT_MS; waited += PUBLISH_EVERY_MS) {
                publish(sha, user_id, tenant_id);
                sleep_ms(PUBLISH_EVERY_MS);
                bool all = true;
                for (int t = 0; t < n_tokens && all; t++) {
                        for (int i = 0; i < 2 && all; i++) {
                                all = whoami(g_stack.gateway_urls[i], tokens[t]) == 401;
                        }
                }
                if (all) {
                        return;
                }
        }
        fail_msg("the revocation did not reach both replicas within %d ms", EVENT_WAIT_MS);
}

static void login(const char *email, char token[TOKEN_MAX], char tenant[ID_MAX], char user[ID_MAX])
{
        char body[256];
        it_http_response r;
        snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"" PASSWORD "\"}", email);
        assert_int_equal(it_auth_call(g_stack.gateway_url, "Login", body, NULL, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
        assert_non_null(j);
        snprintf(token, TOKEN_MAX, "%s", json_string_value(json_object_get(j, "sessionToken")));
        snprintf(tenant, ID_MAX, "%s", json_string_value(json_object_get(j, "tenantId")));
        snprintf(user, ID_MAX, "%s", json_string_value(json_object_get(j, "userId")));
        json_decref(j);
        it_http_response_free(&r);
}

static void signup(char *email, size_t len)
{
        char body[256];
        it_http_response r;
        it_unique_email("cache", email, len);
        snprintf(body, sizeof(body),
                 "{\"email\":\"%s\",\"password\":\"" PASSWORD "\",\"tenantName\":\"cache\"}",
                 email);
        assert_int_equal(it_auth_call(g_stack.gateway_url, "SignUp", body, NULL, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        it_http_response_free(&r);
}

/* POSTs a JSON body with a bearer token; returns the status, body into *out when not NULL. */
static long post_json(const char *url, const char *path, const char *body, const char *token,
                      it_http_response *out)
{
        char auth[TOKEN_MAX + 32];
        it_http_response r;
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        const char *headers[] = {auth, NULL};
        assert_int_equal(
            it_http_post(url, path, "application/json", body, strlen(body), headers, &r), 0);
        long status = r.status;
        if (out != NULL) {
                *out = r;
        } else {
                it_http_response_free(&r);
        }
        return status;
}

static long ledger_write(const char *url, const char *token)
{
        return post_json(url, LEDGER_WRITE, ACCOUNT_BODY, token, NULL);
}

/* A string field of a 200 JSON reply of an AuthService method. */
static void auth_ok(const char *method, const char *body, const char *token, const char *field,
                    char *out, size_t out_len)
{
        it_http_response r;
        assert_int_equal(it_auth_call(g_stack.gateway_url, method, body, token, NULL, &r), 0);
        if (r.status != 200) {
                fail_msg("%s: %ld %s", method, r.status, r.body);
        }
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
        assert_non_null(j);
        if (field != NULL) {
                const char *v = json_string_value(json_object_get(j, field));
                assert_non_null(v);
                snprintf(out, out_len, "%s", v);
        }
        json_decref(j);
        it_http_response_free(&r);
}

/* The invitation token auth mailed to "to", read from its outbox as a mail sender would. */
static void invitation_token(const char *to, char token[TOKEN_MAX])
{
        PGconn *c = it_pg_connect(&g_stack);
        assert_non_null(c);
        PGresult *res = PQexec(c, "SELECT payload FROM auth.outbox WHERE topic = 'auth.email'"
                                  " ORDER BY id DESC LIMIT 50");
        assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
        token[0] = '\0';
        for (int i = 0; i < PQntuples(res) && token[0] == '\0'; i++) {
                size_t len = 0;
                uint8_t *b = PQunescapeBytea((const unsigned char *)PQgetvalue(res, i, 0), &len);
                assert_non_null(b);
                Keelson__Auth__V1__EmailRequested *m =
                    keelson__auth__v1__email_requested__unpack(NULL, len, b);
                if (m != NULL && strcmp(m->to, to) == 0 && strcmp(m->kind, "invitation") == 0) {
                        snprintf(token, TOKEN_MAX, "%s", m->token);
                }
                if (m != NULL) {
                        keelson__auth__v1__email_requested__free_unpacked(m, NULL);
                }
                PQfreemem(b);
        }
        PQclear(res);
        PQfinish(c);
        assert_true(token[0] != '\0');
}

/* Waits until status_of(replica, token) is want on both replicas, at most EVENT_WAIT_MS. */
static void wait_both(long (*status_of)(const char *url, const char *token), const char *token,
                      long want)
{
        bool seen[2] = {false, false};
        for (int waited = 0; waited < EVENT_WAIT_MS; waited += 50) {
                for (int i = 0; i < 2; i++) {
                        seen[i] = seen[i] || status_of(g_stack.gateway_urls[i], token) == want;
                }
                if (seen[0] && seen[1]) {
                        return;
                }
                sleep_ms(50);
        }
        fail_msg("replicas answered %ld: %s, %s after %d ms", want, seen[0] ? "yes" : "no",
                 seen[1] ? "yes" : "no", EVENT_WAIT_MS);
}

static double hits_on(int replica)
{
        double v = 0;
        assert_int_equal(it_metric(g_stack.gateway_urls[replica],
                                   "keelson_gateway_context_cache_hits_total", &v),
                         0);
        return v;
}

/* Both replicas hold token's context: a second call on each is a cache hit. */
static void assert_cached_on_both(long (*status_of)(const char *url, const char *token),
                                  const char *token, long want)
{
        for (int i = 0; i < 2; i++) {
                assert_int_equal(status_of(g_stack.gateway_urls[i], token), want);
                double before = hits_on(i);
                assert_int_equal(status_of(g_stack.gateway_urls[i], token), want);
                assert_true(hits_on(i) >= before + 1);
        }
}

/* ---- group ---------------------------------------------------------------------- */

static int setup(void **state)
{
        (void)state;
        const char *prefixes[] = {REVOKED_TOPIC};
        if (it_stack_load(&g_stack) != 0) {
                return -1;
        }
        if (g_stack.n_gateways < 2) {
                fprintf(stderr, "these tests need two gateway replicas (--gateway-replicas 2)\n");
                return -1;
        }
        const char *bases[] = {g_stack.broker_url};
        if (ks_publisher_new(&g_pub, bases, 1) != KS_OK ||
            ks_subscriber_new(&g_sub, bases, 1, prefixes, 1) != KS_OK) {
                return -1;
        }
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        ks_publisher_free(g_pub);
        ks_subscriber_free(g_sub);
        return 0;
}

/* ---- the tests -------------------------------------------------------------------- */

/* Resolved once, served from the cache after; an event ends it on both replicas. */
static void test_event_evicts_token_on_every_replica(void **state)
{
        (void)state;
        char email[128], token[TOKEN_MAX], tenant[ID_MAX], user[ID_MAX], hex[65];
        uint8_t sha[KS_SHA256_BYTES];
        double hits_before = 0, hits_after = 0;
        const char *tokens[1] = {token};
        signup(email, sizeof(email));
        login(email, token, tenant, user);
        assert_both(token, 200); /* each replica resolves it once and keeps it */
        assert_int_equal(it_metric(g_stack.gateway_urls[1],
                                   "keelson_gateway_context_cache_hits_total", &hits_before),
                         0);
        assert_int_equal(whoami(g_stack.gateway_urls[1], token), 200);
        assert_int_equal(it_metric(g_stack.gateway_urls[1],
                                   "keelson_gateway_context_cache_hits_total", &hits_after),
                         0);
        assert_true(hits_after >= hits_before + 1);

        token_hash(token, sha, hex);
        char param[70];
        snprintf(param, sizeof(param), "\\x%s", hex);
        revoke_in_db("token_sha256 = $1::bytea", param);
        /* Auth would refuse it now; the replicas still serve it from their caches. */
        assert_both(token, 200);
        publish_until_refused(sha, NULL, NULL, tokens, 1);
        assert_both(token, 401);
}

/* An event naming a user and a tenant ends every session of that user there. */
static void test_event_evicts_user_in_tenant(void **state)
{
        (void)state;
        char email[128], t1[TOKEN_MAX], t2[TOKEN_MAX], tenant[ID_MAX], user[ID_MAX];
        const char *tokens[2] = {t1, t2};
        signup(email, sizeof(email));
        login(email, t1, tenant, user);
        login(email, t2, tenant, user);
        assert_both(t1, 200);
        assert_both(t2, 200);
        revoke_in_db("user_id = $1::uuid", user);
        assert_both(t1, 200);
        assert_both(t2, 200);
        publish_until_refused(NULL, user, tenant, tokens, 2);
}

/* Waits for one auth.context_revoked on the test's own subscription. */
static bool revoked_event_seen(int wait_ms)
{
        for (int waited = 0; waited < wait_ms; waited += 250) {
                Keelson__Events__V1__Event *ev = NULL;
                if (ks_subscriber_next(g_sub, 250, &ev) == KS_OK) {
                        bool ours = strcmp(ev->topic, REVOKED_TOPIC) == 0;
                        keelson__events__v1__event__free_unpacked(ev, NULL);
                        if (ours) {
                                return true;
                        }
                }
        }
        return false;
}

/* Logout through one replica: both refuse the token on the next request. */
static void test_logout_refused_by_both_replicas(void **state)
{
        (void)state;
        char email[128], token[TOKEN_MAX], tenant[ID_MAX], user[ID_MAX];
        it_http_response r;
        Keelson__Events__V1__Event *ev = NULL;
        signup(email, sizeof(email));
        login(email, token, tenant, user);
        assert_both(token, 200);
        while (ks_subscriber_next(g_sub, 10, &ev) == KS_OK) { /* what earlier tests published */
                keelson__events__v1__event__free_unpacked(ev, NULL);
        }
        assert_int_equal(it_auth_call(g_stack.gateway_urls[0], "Logout", "{}", token, NULL, &r), 0);
        assert_int_equal(r.status, 200);
        it_http_response_free(&r);
        /* The replica that saw the logout drops the token at once. */
        assert_int_equal(whoami(g_stack.gateway_urls[0], token), 401);
        /* auth publishes auth.context_revoked through its outbox after the commit */
        assert_true(revoked_event_seen(EVENT_WAIT_MS));
        for (int waited = 0; waited < EVENT_WAIT_MS; waited += 50) {
                if (whoami(g_stack.gateway_urls[1], token) == 401) {
                        return;
                }
                sleep_ms(50);
        }
        fail_msg("replica 2 still accepts a logged-out token after %d ms", EVENT_WAIT_MS);
}

/*
 * SetRole through one replica: the member's cached context (role member) is
 * dropped by both replicas at once, so the ledger sees the new role
 * (viewer: no writes) on the next request, long before the 30 s TTL.
 */
static void test_role_change_reaches_both_replicas(void **state)
{
        (void)state;
        char owner_email[128], owner[TOKEN_MAX], tenant[ID_MAX], owner_id[ID_MAX];
        char member_email[128], invite[TOKEN_MAX], member[TOKEN_MAX], member_id[ID_MAX];
        char body[TOKEN_MAX + 256];
        signup(owner_email, sizeof(owner_email));
        login(owner_email, owner, tenant, owner_id);
        it_unique_email("cache-member", member_email, sizeof(member_email));
        snprintf(body, sizeof(body), "{\"emails\":[\"%s\"],\"role\":\"member\"}", member_email);
        auth_ok("Invite", body, owner, NULL, NULL, 0);
        invitation_token(member_email, invite);
        snprintf(body, sizeof(body),
                 "{\"token\":\"%s\",\"password\":\"" PASSWORD "\",\"displayName\":\"m\"}", invite);
        auth_ok("AcceptInvitation", body, NULL, "sessionToken", member, sizeof(member));
        auth_ok("WhoAmI", "{}", member, "userId", member_id, sizeof(member_id));
        assert_cached_on_both(ledger_write, member, 200); /* a member may write */

        snprintf(body, sizeof(body), "{\"userId\":\"%s\",\"role\":\"viewer\"}", member_id);
        auth_ok("SetRole", body, owner, NULL, NULL, 0);
        wait_both(ledger_write, member, 403); /* fails after EVENT_WAIT_MS */
        /* The session itself lives on, with its new role. */
        for (int i = 0; i < 2; i++) {
                assert_int_equal(whoami(g_stack.gateway_urls[i], member), 200);
                assert_int_equal(ledger_write(g_stack.gateway_urls[i], member), 403);
        }
}

/* RevokeApiKey through one replica: both refuse the key at once (its TTL is 5 min). */
static void test_api_key_revocation_reaches_both_replicas(void **state)
{
        (void)state;
        char email[128], owner[TOKEN_MAX], tenant[ID_MAX], user[ID_MAX], body[256];
        char key[TOKEN_MAX], key_id[ID_MAX];
        it_http_response r;
        signup(email, sizeof(email));
        login(email, owner, tenant, user);
        assert_int_equal(it_auth_call(g_stack.gateway_url, "CreateApiKey",
                                      "{\"name\":\"cache\",\"role\":\"member\"}", owner, NULL, &r),
                         0);
        assert_int_equal(r.status, 200);
        json_t *j = json_loadb(r.body, r.body_len, 0, NULL);
        assert_non_null(j);
        snprintf(key, sizeof(key), "%s", json_string_value(json_object_get(j, "key")));
        snprintf(key_id, sizeof(key_id), "%s",
                 json_string_value(json_object_get(json_object_get(j, "apiKey"), "id")));
        json_decref(j);
        it_http_response_free(&r);
        assert_cached_on_both(ledger_write, key, 200);

        snprintf(body, sizeof(body), "{\"apiKeyId\":\"%s\"}", key_id);
        auth_ok("RevokeApiKey", body, owner, NULL, NULL, 0);
        wait_both(ledger_write, key, 401); /* fails after EVENT_WAIT_MS */
        assert_int_equal(ledger_write(g_stack.gateway_urls[0], key), 401);
        assert_int_equal(ledger_write(g_stack.gateway_urls[1], key), 401);
}

/* Without any event, the TTL ends a cached context (here 1 s). */
static void test_ttl_is_the_floor(void **state)
{
        (void)state;
        char email[128], token[TOKEN_MAX], tenant[ID_MAX], user[ID_MAX], hex[65], param[70];
        uint8_t sha[KS_SHA256_BYTES];
        it_gateway gw;
        const char *env[] = {"KEELSON_GATEWAY_CACHE_SESSION_TTL_S=1", NULL};
        assert_int_equal(it_gateway_start(&g_stack, env, 1, &gw), 0);
        signup(email, sizeof(email));
        login(email, token, tenant, user);
        assert_int_equal(whoami(gw.url, token), 200);
        token_hash(token, sha, hex);
        snprintf(param, sizeof(param), "\\x%s", hex);
        revoke_in_db("token_sha256 = $1::bytea", param);
        long status = 200;
        for (int waited = 0; waited < EVENT_WAIT_MS && status == 200; waited += 100) {
                sleep_ms(100);
                status = whoami(gw.url, token);
        }
        it_gateway_stop(&gw);
        assert_int_equal(status, 401);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_event_evicts_token_on_every_replica),
            cmocka_unit_test(test_event_evicts_user_in_tenant),
            cmocka_unit_test(test_logout_refused_by_both_replicas),
            cmocka_unit_test(test_role_change_reaches_both_replicas),
            cmocka_unit_test(test_api_key_revocation_reaches_both_replicas),
            cmocka_unit_test(test_ttl_is_the_floor),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
