/*
 * ks_config: configuration from environment variables through one
 * declarative table per binary, in the manner of pgbouncer's config table.
 * Each variable has a type, a default and a range; the same table prints
 * --help and the effective configuration (secrets redacted).
 *
 *   struct auth_config { int64_t workers; char *pg_dsn; bool debug; };
 *   static const ks_config_var vars[] = {
 *       KS_CFG_INT("KEELSON_AUTH_WORKERS", struct auth_config, workers, "4", 1, 256,
 *                  "worker threads serving RPCs"),
 *       KS_CFG_STR("KEELSON_PG_DSN", struct auth_config, pg_dsn, "postgresql://...",
 *                  KS_CFG_SECRET, "libpq connection string"),
 *   };
 */
#ifndef KS_CONFIG_H
#define KS_CONFIG_H

#include "ks_code.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ks_log.h"

typedef enum ks_config_type {
        KS_CFG_TYPE_INT,  /* int64_t, decimal, within [min, max] */
        KS_CFG_TYPE_STR,  /* char * (owned by the config; ks_config_free) */
        KS_CFG_TYPE_BOOL, /* bool: true/false/1/0/yes/no/on/off */
} ks_config_type;

enum {
        KS_CFG_SECRET = 1u << 0,   /* never printed: shown as "(secret)" */
        KS_CFG_REQUIRED = 1u << 1, /* no default: must be set */
        KS_CFG_NONEMPTY = 1u << 2, /* a string that may not be empty */
};

typedef struct ks_config_var {
        const char *name; /* the environment variable */
        ks_config_type type;
        size_t offset;             /* offsetof(struct, field) */
        const char *default_value; /* as it would be written in the environment */
        int64_t min, max;          /* for KS_CFG_TYPE_INT */
        unsigned flags;
        const char *help;
        /* For KS_CFG_TYPE_STR: the values accepted, NULL-terminated, matched
         * without regard to case (NULL: any string). */
        const char *const *choices;
} ks_config_var;

#define KS_CFG_INT(name_, T, field, def, lo, hi, help_)                                            \
        {                                                                                          \
                .name = (name_), .type = KS_CFG_TYPE_INT, .offset = offsetof(T, field),            \
                .default_value = (def), .min = (lo), .max = (hi), .help = (help_)                  \
        }
#define KS_CFG_STR(name_, T, field, def, flags_, help_)                                            \
        {                                                                                          \
                .name = (name_), .type = KS_CFG_TYPE_STR, .offset = offsetof(T, field),            \
                .default_value = (def), .flags = (flags_), .help = (help_)                         \
        }
#define KS_CFG_BOOL(name_, T, field, def, help_)                                                   \
        {                                                                                          \
                .name = (name_), .type = KS_CFG_TYPE_BOOL, .offset = offsetof(T, field),           \
                .default_value = (def), .max = 1, .help = (help_)                                  \
        }
#define KS_CFG_CHOICE(name_, T, field, def, choices_, help_)                                       \
        {                                                                                          \
                .name = (name_), .type = KS_CFG_TYPE_STR, .offset = offsetof(T, field),            \
                .default_value = (def), .flags = KS_CFG_NONEMPTY, .help = (help_),                 \
                .choices = (choices_)                                                              \
        }

/* KEELSON_LOG_LEVEL, the same in every binary: read it with ks_log_level_parse. */
#define KS_CFG_LOG_LEVEL(T, field)                                                                 \
        KS_CFG_CHOICE("KEELSON_LOG_LEVEL", T, field, "info", ks_log_level_names,                   \
                      "the least severe level logged")

/*
 * Loads every variable of the table into the struct at out, from getenv()
 * or the default. Returns 0, or -1 with a message in err naming the variable
 * and what it accepts ("KEELSON_AUTH_WORKERS=abc: expected an integer in
 * [1, 256]"). On error the strings loaded so far are freed.
 */
int ks_config_load(const ks_config_var *vars, size_t n, void *out, char *err,
                   size_t err_len) KS_MUST_CHECK;

/* Frees the strings ks_config_load allocated. */
void ks_config_free(const ks_config_var *vars, size_t n, void *cfg);

/* Prints usage: each variable, its type, default, range and help. */
void ks_config_print_help(FILE *f, const char *binary, const char *summary,
                          const ks_config_var *vars, size_t n);

/* Logs the effective configuration, one line, secrets redacted. */
void ks_config_log(const ks_config_var *vars, size_t n, const void *cfg);

/*
 * The usual start of a main(): handles --help (prints and exits 0), loads the
 * table (a bad value prints the message on stderr and exits 2), logs it.
 */
void ks_config_init(int argc, char **argv, const char *summary, const ks_config_var *vars, size_t n,
                    void *out);

#endif
