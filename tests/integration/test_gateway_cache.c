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

#include "auth_it.h"
#include "keelson/auth/v1/events.pb-c.h"
#include "ks_code.h"
#include "ks_crypto.h"
#include "ks_events.h"

#define EVENT_WAIT_MS    10000 /* well inside the 30 s session TTL */
#define PUBLISH_EVERY_MS 200
#define REVOKED_TOPIC    "auth.context_revoked"
#define LEDGER_WRITE     "/keelson.ledger.v1.LedgerService/CreateAccounts"
#define ACCOUNT_BODY     "{\"accounts\":[{\"id\":\"1\",\"ledger\":840,\"code\":1}]}"

static ks_publisher *g_pub;
static ks_subscriber *g_sub;

/* ---- helpers ------------------------------------------------------------------ */

static long whoami(const char *url, const char *token)
{
        return it_post_json_status(url, AIT_PATH "WhoAmI", "{}", token);
}

static void assert_both(const char *token, long want)
{
        for (int i = 0; i < 2; i++) {
                assert_int_equal(whoami(ait_stack.gateway_urls[i], token), want);
        }
}

/* Revokes the session in the database only: auth refuses it, no event is sent. */
static void revoke_in_db(const char *where_sql, const char *param)
{
        char sql[256];
        const char *params[1] = {param};
        PGconn *c = ait_pg();
        snprintf(sql, sizeof(sql), "UPDATE auth.sessions SET revoked_at = now() WHERE %s",
                 where_sql);
        PGresult *res = it_sql(c, sql, 1, params);
        if (atoi(PQcmdTuples(res)) < 1) {
                fail_msg("revoking in the database: no session where %s", where_sql);
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
                it_sleep_ms(PUBLISH_EVERY_MS);
                bool all = true;
                for (int t = 0; t < n_tokens && all; t++) {
                        for (int i = 0; i < 2 && all; i++) {
                                all = whoami(ait_stack.gateway_urls[i], tokens[t]) == 401;
                        }
                }
                if (all) {
                        return;
                }
        }
        fail_msg("the revocation did not reach both replicas within %d ms", EVENT_WAIT_MS);
}

static long ledger_write(const char *url, const char *token)
{
        return it_post_json_status(url, LEDGER_WRITE, ACCOUNT_BODY, token);
}

/* Waits until status_of(replica, token) is want on both replicas, at most EVENT_WAIT_MS. */
static void wait_both(long (*status_of)(const char *url, const char *token), const char *token,
                      long want)
{
        bool seen[2] = {false, false};
        for (int waited = 0; waited < EVENT_WAIT_MS; waited += 50) {
                for (int i = 0; i < 2; i++) {
                        seen[i] = seen[i] || status_of(ait_stack.gateway_urls[i], token) == want;
                }
                if (seen[0] && seen[1]) {
                        return;
                }
                it_sleep_ms(50);
        }
        fail_msg("replicas answered %ld: %s, %s after %d ms", want, seen[0] ? "yes" : "no",
                 seen[1] ? "yes" : "no", EVENT_WAIT_MS);
}

static double hits_on(int replica)
{
        return it_metric_of(ait_stack.gateway_admin_urls[replica],
                            "keelson_gateway_context_cache_hits_total");
}

/* Both replicas hold token's context: a second call on each is a cache hit. */
static void assert_cached_on_both(long (*status_of)(const char *url, const char *token),
                                  const char *token, long want)
{
        for (int i = 0; i < 2; i++) {
                assert_int_equal(status_of(ait_stack.gateway_urls[i], token), want);
                double before = hits_on(i);
                assert_int_equal(status_of(ait_stack.gateway_urls[i], token), want);
                assert_true(hits_on(i) >= before + 1);
        }
}

/* ---- group ---------------------------------------------------------------------- */

static int setup(void **state)
{
        (void)state;
        const char *prefixes[] = {REVOKED_TOPIC};
        if (ait_setup(state) != 0) {
                return -1;
        }
        if (ait_stack.n_gateways < 2) {
                fprintf(stderr, "these tests need two gateway replicas (--gateway-replicas 2)\n");
                return -1;
        }
        const char *bases[] = {ait_stack.broker_url};
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
        char hex[65];
        uint8_t sha[KS_SHA256_BYTES];
        ait_user u;
        const char *token = u.token;
        const char *tokens[1] = {u.token};
        ait_signup("cache", "cache", &u);
        assert_both(token, 200); /* each replica resolves it once and keeps it */
        double hits_before = hits_on(1);
        assert_int_equal(whoami(ait_stack.gateway_urls[1], token), 200);
        assert_true(hits_on(1) >= hits_before + 1);

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
        char t2[AIT_TOKEN_MAX];
        ait_user u;
        const char *tokens[2] = {u.token, t2};
        ait_signup("cache", "cache", &u);
        ait_login(&u, NULL, t2);
        assert_both(u.token, 200);
        assert_both(t2, 200);
        revoke_in_db("user_id = $1::uuid", u.user_id);
        assert_both(u.token, 200);
        assert_both(t2, 200);
        publish_until_refused(NULL, u.user_id, u.tenant_id, tokens, 2);
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
        ait_user u;
        const char *token = u.token;
        Keelson__Events__V1__Event *ev = NULL;
        ait_signup("cache", "cache", &u);
        assert_both(token, 200);
        while (ks_subscriber_next(g_sub, 10, &ev) == KS_OK) { /* what earlier tests published */
                keelson__events__v1__event__free_unpacked(ev, NULL);
        }
        assert_int_equal(
            it_post_json_status(ait_stack.gateway_urls[0], AIT_PATH "Logout", "{}", token), 200);
        /* The replica that saw the logout drops the token at once. */
        assert_int_equal(whoami(ait_stack.gateway_urls[0], token), 401);
        /* auth publishes auth.context_revoked through its outbox after the commit */
        assert_true(revoked_event_seen(EVENT_WAIT_MS));
        wait_both(whoami, token, 401); /* fails after EVENT_WAIT_MS */
}

/*
 * SetRole through one replica: the member's cached context (role member) is
 * dropped by both replicas at once, so the ledger sees the new role
 * (viewer: no writes) on the next request, long before the 30 s TTL.
 */
static void test_role_change_reaches_both_replicas(void **state)
{
        (void)state;
        char body[512];
        ait_user owner, m;
        const char *member = m.token;
        ait_tenant_of_two("cache", "cache", "member", &owner, &m);
        assert_cached_on_both(ledger_write, member, 200); /* a member may write */

        AIT_BODY(body, "{s:s, s:s}", "userId", m.user_id, "role", "viewer");
        json_decref(ait_ok("SetRole", body, owner.token));
        wait_both(ledger_write, member, 403); /* fails after EVENT_WAIT_MS */
        /* The session itself lives on, with its new role. */
        for (int i = 0; i < 2; i++) {
                assert_int_equal(whoami(ait_stack.gateway_urls[i], member), 200);
                assert_int_equal(ledger_write(ait_stack.gateway_urls[i], member), 403);
        }
}

/* RevokeApiKey through one replica: both refuse the key at once (its TTL is 5 min). */
static void test_api_key_revocation_reaches_both_replicas(void **state)
{
        (void)state;
        char body[256], key[AIT_TOKEN_MAX], key_id[AIT_ID_MAX];
        ait_user owner;
        ait_signup("cache", "cache", &owner);
        ait_create_key(owner.token, "cache", "member", key, key_id);
        assert_cached_on_both(ledger_write, key, 200);

        AIT_BODY(body, "{s:s}", "apiKeyId", key_id);
        json_decref(ait_ok("RevokeApiKey", body, owner.token));
        wait_both(ledger_write, key, 401); /* fails after EVENT_WAIT_MS */
        assert_int_equal(ledger_write(ait_stack.gateway_urls[0], key), 401);
        assert_int_equal(ledger_write(ait_stack.gateway_urls[1], key), 401);
}

/* Without any event, the TTL ends a cached context (here 1 s). */
static void test_ttl_is_the_floor(void **state)
{
        (void)state;
        char hex[65], param[70];
        uint8_t sha[KS_SHA256_BYTES];
        it_gateway gw;
        ait_user u;
        const char *token = u.token;
        const char *env[] = {"KEELSON_GATEWAY_CACHE_SESSION_TTL_S=1", NULL};
        assert_int_equal(it_gateway_start(&ait_stack, env, 1, &gw), 0);
        ait_signup("cache", "cache", &u);
        assert_int_equal(whoami(gw.url, token), 200);
        token_hash(token, sha, hex);
        snprintf(param, sizeof(param), "\\x%s", hex);
        revoke_in_db("token_sha256 = $1::bytea", param);
        long status = 200;
        for (int waited = 0; waited < EVENT_WAIT_MS && status == 200; waited += 100) {
                it_sleep_ms(100);
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
