/*
 * keelson-auth's own settings and what it starts beside the service skeleton
 * (ks_service.h): the password hash pool and the dummy hash, the per-request
 * limits and counters the handlers read, and housekeeping. main.c hands
 * these to ks_service_run.
 */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "ks_log.h"

#define SCRYPT_MEM_BYTES_MAX (1ull << 30) /* 128 * r * N: one hash may not want more */

#define C auth_config
const ks_config_var auth_config_vars[] = {
    KS_CFG_INT("KEELSON_AUTH_SESSION_TTL_S", C, session_ttl_s, "604800", 60, 31536000,
               "session lifetime in seconds"),
    KS_CFG_INT("KEELSON_AUTH_SCRYPT_LOG_N", C, scrypt_log_n, "14", 10, 20,
               "scrypt cost: log2 of N for new password hashes"),
    KS_CFG_INT("KEELSON_AUTH_SCRYPT_R", C, scrypt_r, "8", 1, 32, "scrypt block size r"),
    KS_CFG_INT("KEELSON_AUTH_SCRYPT_P", C, scrypt_p, "1", 1, 16, "scrypt parallelism p"),
    KS_CFG_INT("KEELSON_AUTH_HASH_WORKERS", C, hash_workers, "0", 0, 256,
               "threads running scrypt (0 = half the CPUs auth may use, at least 1, at most "
               "half the workers)"),
    KS_CFG_INT("KEELSON_AUTH_HASH_QUEUE_MAX", C, hash_queue_max, "0", 0, 65536,
               "password hashes waiting for a hash thread; more are refused with"
               " resource_exhausted (0 = twice the hash workers)"),
    KS_CFG_INT("KEELSON_AUTH_HASH_NICE", C, hash_nice, "10", 0, 19,
               "scheduling niceness of the hash worker processes (and of their session's"
               " scheduling group): cheap calls get the cores first"),
    KS_CFG_BOOL("KEELSON_AUTH_HASH_PIN", C, hash_pin, "true",
                "run the hash workers on the last KEELSON_AUTH_HASH_WORKERS of the CPUs auth may"
                " use (the highest numbered), so that the cheap calls always have the others;"
                " no pinning when the hash workers are as many as the CPUs"),
    KS_CFG_INT("KEELSON_AUTH_INVITATION_TTL_S", C, invitation_ttl_s, "604800", 60, 31536000,
               "invitation lifetime in seconds"),
    KS_CFG_INT("KEELSON_AUTH_RESET_TTL_S", C, reset_ttl_s, "3600", 60, 86400,
               "password reset token lifetime in seconds"),
    KS_CFG_INT("KEELSON_AUTH_RESET_MAX_PER_WINDOW", C, reset_max_per_window, "5", 1, 1000,
               "reset mails one address may cause per window; more are silently not sent"),
    KS_CFG_INT("KEELSON_AUTH_RESET_WINDOW_S", C, reset_window_s, "3600", 1, 86400,
               "the reset mail window in seconds"),
    KS_CFG_INT("KEELSON_AUTH_LOCKOUT_MAX_FAILURES", C, lockout_max_failures, "5", 1, 1000,
               "failed password checks within the window that lock an account"),
    KS_CFG_INT("KEELSON_AUTH_LOCKOUT_WINDOW_S", C, lockout_window_s, "900", 1, 86400,
               "the window failed password checks are counted in, in seconds"),
    KS_CFG_INT("KEELSON_AUTH_LOCKOUT_DURATION_S", C, lockout_duration_s, "900", 1, 86400,
               "how long a locked account refuses every login, in seconds"),
    KS_CFG_INT("KEELSON_AUTH_HOUSEKEEPING_S", C, housekeeping_s, "300", 1, 86400,
               "how often stale sessions, reset tokens and request records are deleted"),
};
#undef C
const size_t auth_config_vars_n = sizeof(auth_config_vars) / sizeof(auth_config_vars[0]);

/* The cores this process may run on (its affinity mask: a cpuset-limited container's share). */
static long usable_cores(void)
{
        cpu_set_t set;

        if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
                return CPU_COUNT(&set);
        }
        return sysconf(_SC_NPROCESSORS_ONLN);
}

/*
 * The hash pool's size, and the rule that keeps cheap methods answering: RPC
 * workers blocked on hashing (running or queued) are at most hash workers +
 * hash queue, which must leave at least one RPC worker free.
 */
int auth_check_config(void *service, char *err, size_t err_len)
{
        auth_service *svc = service;
        const auth_config *c = svc->cfg;
        int workers = (int)c->base.workers;
        long cores = usable_cores();

        if ((128ull * (uint64_t)c->scrypt_r << c->scrypt_log_n) > SCRYPT_MEM_BYTES_MAX) {
                snprintf(err, err_len,
                         "KEELSON_AUTH_SCRYPT_LOG_N and KEELSON_AUTH_SCRYPT_R ask"
                         " for more than 1 GiB per hash (128 * r * 2^log_n)");
                return -1;
        }
        svc->hash_workers = (int)c->hash_workers;
        if (svc->hash_workers == 0) {
                svc->hash_workers = cores > 1 ? (int)(cores / 2) : 1;
                if (svc->hash_workers > workers / 2) {
                        svc->hash_workers = workers / 2;
                }
        }
        svc->hash_queue_max =
            c->hash_queue_max != 0 ? (int)c->hash_queue_max : 2 * svc->hash_workers;
        if (svc->hash_workers + svc->hash_queue_max >= workers) {
                snprintf(err, err_len,
                         "KEELSON_AUTH_HASH_WORKERS + KEELSON_AUTH_HASH_QUEUE_MAX (%d + %d) must be"
                         " less than KEELSON_AUTH_WORKERS (%d): some workers must stay free",
                         svc->hash_workers, svc->hash_queue_max, workers);
                return -1;
        }
        return 0;
}

/* The hashing parameters, and the dummy hash that unknown emails are verified against. */
static int init_passwords(auth_service *svc)
{
        const auth_config *c = svc->cfg;
        char throwaway[AUTH_TOKEN_LEN + 1];
        uint8_t raw[AUTH_TOKEN_BYTES];
        int64_t t0;

        svc->scrypt = KS_SCRYPT_DEFAULT;
        svc->scrypt.n = 1ull << c->scrypt_log_n;
        svc->scrypt.r = (uint32_t)c->scrypt_r;
        svc->scrypt.p = (uint32_t)c->scrypt_p;
        if (ks_random_bytes(raw, sizeof(raw)) != 0 ||
            ks_base64url_encode(raw, sizeof(raw), throwaway, sizeof(throwaway)) < 0) {
                ks_log_error(NULL, "no random bytes", NULL);
                return -1;
        }
        t0 = ks_mono_ms();
        if (ks_password_hash(throwaway, &svc->scrypt, svc->dummy_hash) != 0) {
                ks_log_error(NULL, "scrypt failed with the configured parameters", NULL);
                return -1;
        }
        explicit_bzero(throwaway, sizeof(throwaway));
        explicit_bzero(raw, sizeof(raw));
        cpu_set_t allowed, cpus;
        bool pin = c->hash_pin && sched_getaffinity(0, sizeof(allowed), &allowed) == 0 &&
                   auth_hash_cpus(&allowed, svc->hash_workers, &cpus);
        if (auth_hash_pool_new(&svc->hash, svc->hash_workers, svc->hash_queue_max,
                               (int)c->hash_nice, "/proc/self/exe", pin ? &cpus : NULL) != KS_OK) {
                ks_log_error(NULL, "cannot start the hash pool", NULL);
                return -1;
        }
        ks_log_info(NULL, "password hashing ready", "{s:i, s:i, s:i, s:i, s:i, s:i, s:i}",
                    "scrypt_log_n", (int)c->scrypt_log_n, "scrypt_r", (int)c->scrypt_r, "scrypt_p",
                    (int)c->scrypt_p, "hash_ms", (int)(ks_mono_ms() - t0), "hash_workers",
                    svc->hash_workers, "hash_queue_max", svc->hash_queue_max, "hash_cpus_pinned",
                    pin ? CPU_COUNT(&cpus) : 0);
        return 0;
}

/* The per-request limits and counters the handlers read. */
static void init_settings(auth_service *svc)
{
        const auth_config *c = svc->cfg;
        const char *logins_help = "Login calls by outcome (failed: any reply but ok)";

        svc->session_ttl_s = c->session_ttl_s;
        svc->invitation_ttl_s = c->invitation_ttl_s;
        svc->reset_ttl_s = c->reset_ttl_s;
        svc->reset_max_per_window = (int)c->reset_max_per_window;
        svc->reset_window_s = (int)c->reset_window_s;
        svc->lockout_max_failures = (int)c->lockout_max_failures;
        svc->lockout_window_s = (int)c->lockout_window_s;
        svc->lockout_duration_s = (int)c->lockout_duration_s;
        svc->logins_ok = ks_counter_get(ks_metrics_default(), "keelson_auth_logins_total",
                                        logins_help, "result=\"ok\"");
        svc->logins_failed = ks_counter_get(ks_metrics_default(), "keelson_auth_logins_total",
                                            logins_help, "result=\"failed\"");
        svc->lockouts = ks_counter_get(ks_metrics_default(), "keelson_auth_lockouts_total",
                                       "Accounts locked after repeated failed logins", NULL);
}

int auth_start(void *service, ks_service_env *env)
{
        auth_service *svc = service;

        init_settings(svc);
        if (init_passwords(svc) != 0) {
                return -1;
        }
        /* The server refuses heavy calls the hash pool could not take, before they hold a worker.
         */
        env->heavy_max = svc->hash_workers + svc->hash_queue_max;
        env->heavy_message = AUTH_HASH_BUSY_MSG;
        env->heavy_rejected = auth_hash_pool_rejected_counter(svc->hash);
        if (auth_housekeeper_start(&svc->housekeeper, svc, (int)svc->cfg->housekeeping_s) !=
            KS_OK) {
                ks_log_error(NULL, "cannot start housekeeping", NULL);
                return -1;
        }
        return 0;
}

void auth_stop(void *service)
{
        auth_service *svc = service;

        auth_housekeeper_stop(svc->housekeeper);
        svc->housekeeper = NULL;
        auth_hash_pool_free(svc->hash);
        svc->hash = NULL;
}
