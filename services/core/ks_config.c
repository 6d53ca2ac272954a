/*
 * ks_config: environment variables through a declarative table.
 *
 * Parsing is strict on purpose: a typo in a deployment ("4O" workers, "ture")
 * must stop the process at start-up with a message naming the variable, not
 * run with a silently different value. A secret's value never appears in a
 * message, the help text or the log.
 */
#include "ks_config.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ks_log.h"

/* Longest string value accepted: a DSN or URL, never a document. */
#define CFG_STR_MAX  8192
#define SECRET_SHOWN "(secret)"

/* The field of cfg that var describes. */
static void *field_of(const ks_config_var *var, const void *cfg)
{
        return (char *)(uintptr_t)cfg + var->offset;
}

/* Strict decimal: optional '-', digits only, no overflow. */
static int parse_int(const char *s, int64_t *out)
{
        bool neg = *s == '-';
        uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, v = 0;
        const char *p = neg ? s + 1 : s;

        if (*p == '\0') {
                return -1;
        }
        for (; *p != '\0'; p++) {
                unsigned d = (unsigned)(*p - '0');
                if (d > 9 || v > (limit - d) / 10) {
                        return -1;
                }
                v = v * 10 + d;
        }
        /* -(2^63) has no positive counterpart: negate in unsigned arithmetic. */
        *out = neg ? (int64_t)(0 - v) : (int64_t)v;
        return 0;
}

static int parse_bool(const char *s, bool *out)
{
        static const char *const yes[] = {"true", "1", "yes", "on"};
        static const char *const no[] = {"false", "0", "no", "off"};
        size_t i;

        for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
                if (strcasecmp(s, yes[i]) == 0) {
                        *out = true;
                        return 0;
                }
                if (strcasecmp(s, no[i]) == 0) {
                        *out = false;
                        return 0;
                }
        }
        return -1;
}

/* "debug, info, warn or error" */
static void list_choices(const char *const *choices, char *out, size_t out_len)
{
        size_t used = 0;

        out[0] = '\0';
        for (size_t i = 0; choices[i] != NULL && used < out_len; i++) {
                const char *sep = i == 0 ? "" : choices[i + 1] == NULL ? " or " : ", ";
                int n = snprintf(out + used, out_len - used, "%s%s", sep, choices[i]);
                used += n > 0 ? (size_t)n : 0;
        }
}

static bool is_choice(const char *const *choices, const char *value)
{
        for (size_t i = 0; choices[i] != NULL; i++) {
                if (strcasecmp(choices[i], value) == 0) {
                        return true;
                }
        }
        return false;
}

/* What a variable accepts, for messages and help: "an integer in [1, 256]". */
static void describe(const ks_config_var *var, char *out, size_t out_len)
{
        if (var->choices != NULL) {
                list_choices(var->choices, out, out_len);
                return;
        }
        switch (var->type) {
        case KS_CFG_TYPE_INT:
                snprintf(out, out_len, "an integer in [%lld, %lld]", (long long)var->min,
                         (long long)var->max);
                break;
        case KS_CFG_TYPE_BOOL:
                snprintf(out, out_len, "a boolean (true/false, 1/0, yes/no, on/off)");
                break;
        case KS_CFG_TYPE_STR:
                snprintf(out, out_len, "a %sstring of at most %d bytes",
                         var->flags & KS_CFG_NONEMPTY ? "non-empty " : "", CFG_STR_MAX);
                break;
        }
}

/* "NAME=value: expected ..." (the value withheld for a secret). */
static void bad_value(const ks_config_var *var, const char *value, bool from_default, char *err,
                      size_t err_len)
{
        char what[96];

        describe(var, what, sizeof(what));
        if (var->flags & KS_CFG_SECRET) {
                snprintf(err, err_len, "%s: invalid %svalue (secret, not shown): expected %s",
                         var->name, from_default ? "default " : "", what);
        } else {
                snprintf(err, err_len, "%s=%.200s%s: expected %s", var->name, value,
                         from_default ? " (the default)" : "", what);
        }
}

static int load_one(const ks_config_var *var, void *cfg, char *err, size_t err_len)
{
        const char *value = getenv(var->name);
        bool from_default = value == NULL;
        char what[96], *copy;

        if (value == NULL && ((var->flags & KS_CFG_REQUIRED) || var->default_value == NULL)) {
                describe(var, what, sizeof(what));
                snprintf(err, err_len, "%s is not set (required): expected %s", var->name, what);
                return -1;
        }
        if (value == NULL) {
                value = var->default_value;
        }
        switch (var->type) {
        case KS_CFG_TYPE_INT: {
                int64_t v;
                if (parse_int(value, &v) != 0 || v < var->min || v > var->max) {
                        break;
                }
                *(int64_t *)field_of(var, cfg) = v;
                return 0;
        }
        case KS_CFG_TYPE_BOOL:
                if (parse_bool(value, (bool *)field_of(var, cfg)) != 0) {
                        break;
                }
                return 0;
        case KS_CFG_TYPE_STR:
                if ((var->flags & KS_CFG_NONEMPTY && value[0] == '\0') ||
                    strnlen(value, CFG_STR_MAX + 1) > CFG_STR_MAX ||
                    (var->choices != NULL && !is_choice(var->choices, value))) {
                        break;
                }
                if ((copy = strdup(value)) == NULL) {
                        snprintf(err, err_len, "%s: out of memory", var->name);
                        return -1;
                }
                *(char **)field_of(var, cfg) = copy;
                return 0;
        }
        bad_value(var, value, from_default, err, err_len);
        return -1;
}

int ks_config_load(const ks_config_var *vars, size_t n, void *out, char *err, size_t err_len)
{
        size_t i;
        char dummy[1];

        if (err == NULL || err_len == 0) {
                err = dummy;
                err_len = sizeof(dummy);
        }
        err[0] = '\0';
        for (i = 0; i < n; i++) {
                if (vars[i].type == KS_CFG_TYPE_STR) {
                        *(char **)field_of(&vars[i], out) = NULL;
                }
        }
        for (i = 0; i < n; i++) {
                if (load_one(&vars[i], out, err, err_len) != 0) {
                        ks_config_free(vars, n, out);
                        return -1;
                }
        }
        return 0;
}

void ks_config_free(const ks_config_var *vars, size_t n, void *cfg)
{
        size_t i;

        if (cfg == NULL) {
                return;
        }
        for (i = 0; i < n; i++) {
                if (vars[i].type == KS_CFG_TYPE_STR) {
                        char **s = field_of(&vars[i], cfg);
                        free(*s);
                        *s = NULL;
                }
        }
}

static const char *type_name(ks_config_type t)
{
        switch (t) {
        case KS_CFG_TYPE_INT:
                return "integer";
        case KS_CFG_TYPE_BOOL:
                return "boolean";
        case KS_CFG_TYPE_STR:
                return "string";
        }
        return "?";
}

static void print_var(FILE *f, const ks_config_var *var)
{
        const char *def = var->default_value;

        fprintf(f, "  %s\n", var->name);
        fprintf(f, "      type:    %s%s%s%s\n", type_name(var->type),
                var->flags & KS_CFG_SECRET ? ", secret" : "",
                var->flags & KS_CFG_REQUIRED ? ", required" : "",
                var->flags & KS_CFG_NONEMPTY ? ", non-empty" : "");
        if ((var->flags & KS_CFG_REQUIRED) || def == NULL) {
                fprintf(f, "      default: (none: must be set)\n");
        } else if (var->flags & KS_CFG_SECRET) {
                fprintf(f, "      default: " SECRET_SHOWN "\n");
        } else {
                fprintf(f, "      default: \"%s\"\n", def);
        }
        if (var->choices != NULL) {
                char list[160];
                list_choices(var->choices, list, sizeof(list));
                fprintf(f, "      values:  %s\n", list);
        } else if (var->type == KS_CFG_TYPE_INT) {
                fprintf(f, "      range:   [%lld, %lld]\n", (long long)var->min,
                        (long long)var->max);
        } else if (var->type == KS_CFG_TYPE_BOOL) {
                fprintf(f, "      values:  true/false, 1/0, yes/no, on/off\n");
        }
        if (var->help != NULL) {
                fprintf(f, "      %s\n", var->help);
        }
}

void ks_config_print_help(FILE *f, const char *binary, const char *summary,
                          const ks_config_var *vars, size_t n)
{
        size_t i;

        fprintf(f, "Usage: %s [--help]\n", binary != NULL ? binary : "keelson");
        if (summary != NULL) {
                fprintf(f, "\n%s\n", summary);
        }
        fprintf(f, "\nConfiguration comes from these environment variables:\n");
        for (i = 0; i < n; i++) {
                fputc('\n', f);
                print_var(f, &vars[i]);
        }
}

/* The effective value as JSON; a secret becomes "(secret)". */
static json_t *var_json(const ks_config_var *var, const void *cfg)
{
        const void *field = field_of(var, cfg);

        if (var->flags & KS_CFG_SECRET) {
                return json_string(SECRET_SHOWN);
        }
        switch (var->type) {
        case KS_CFG_TYPE_INT:
                return json_integer((json_int_t) * (const int64_t *)field);
        case KS_CFG_TYPE_BOOL:
                return json_boolean(*(const bool *)field);
        case KS_CFG_TYPE_STR: {
                const char *s = *(char *const *)field;
                /* A value that is not UTF-8 is logged by its length only. */
                json_t *j = s != NULL ? json_string(s) : json_null();
                return j != NULL ? j : json_string("(not UTF-8)");
        }
        }
        return json_null();
}

void ks_config_log(const ks_config_var *vars, size_t n, const void *cfg)
{
        json_t *obj = json_object();
        size_t i;

        if (obj == NULL) {
                return;
        }
        for (i = 0; i < n; i++) {
                json_object_set_new(obj, vars[i].name, var_json(&vars[i], cfg));
        }
        /* Secrets are already "(secret)" by their table flag: see ks_log_prechecked. */
        ks_log_prechecked(KS_LOG_INFO, NULL, "configuration", json_pack("{s:o}", "config", obj));
}

void ks_config_init(int argc, char **argv, const char *summary, const ks_config_var *vars, size_t n,
                    void *out)
{
        const char *binary = argc > 0 && argv[0] != NULL ? argv[0] : "keelson";
        const char *slash = strrchr(binary, '/');
        char err[512];
        int i;

        binary = slash != NULL ? slash + 1 : binary;
        for (i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
                        ks_config_print_help(stdout, binary, summary, vars, n);
                        exit(fflush(stdout) == 0 ? 0 : 1);
                }
        }
        /* Configuration is the environment only: an argument is a mistake. */
        if (argc > 1) {
                fprintf(stderr,
                        "%s: unexpected argument '%.100s' (configuration comes from "
                        "the environment; see --help)\n",
                        binary, argv[1]);
                exit(2);
        }
        if (ks_config_load(vars, n, out, err, sizeof(err)) != 0) {
                fprintf(stderr, "%s: %s\n", binary, err);
                exit(2);
        }
        ks_config_log(vars, n, out);
}
