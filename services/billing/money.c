/*
 * keelson-billing's money (model.h): the ISO 4217 table, checked int64
 * arithmetic, the one rounding rule, tax, proration and invoice totals.
 *
 * Decisions model.h leaves open:
 *
 * - The currency table is ISO 4217 list one as in force at the end of 2026,
 *   less what one does not bill in: the funds codes (BOV CHE CHW COU MXV USN
 *   UYI), precious metals (XAG XAU XPD XPT), bond-market units (XBA..XBD),
 *   XDR XSU XUA, the testing code XTS and XXX. CLF (Unidad de Fomento, 4
 *   digits) stays although ISO flags it as a funds code: Chilean contracts
 *   are priced in it, and model.h names it. UYW (4 digits) stays too.
 *   Currencies ISO has withdrawn are left out: HRK (euro, 2023), CUC (2021),
 *   SLL (SLE since 2022), ZWL (ZWG since 2024), ANG (XCG since 2025, which
 *   took over its number 532) and BGN (euro, 2026). A numeric code is a
 *   ledger number, so no two rows share one (the unit test checks it).
 * - Exponents are ISO's, not CLDR's display digits: ISK, KRW, VND 0, but
 *   IDR, IRR, LAK, LBP, MGA, MKD, MMK, KPW 2.
 * - bl_totals_of writes line_tax only when it succeeds, so that a false
 *   return leaves line_tax untouched like *out.
 * - A value a client could send gets false (den <= 0, a rate out of range,
 *   part outside 0..whole, an unknown code); a NULL array with n > 0 is a
 *   programming error and asserts.
 */
#include "model.h"

#include <string.h>

#include "ks_assert.h"

/* Sorted by code, for bl_currency_find's binary search (the unit test checks the order). */
static const bl_currency currencies[] = {
    {"AED", 2, 784}, {"AFN", 2, 971}, {"ALL", 2, 8},   {"AMD", 2, 51},  {"AOA", 2, 973},
    {"ARS", 2, 32},  {"AUD", 2, 36},  {"AWG", 2, 533}, {"AZN", 2, 944}, {"BAM", 2, 977},
    {"BBD", 2, 52},  {"BDT", 2, 50},  {"BHD", 3, 48},  {"BIF", 0, 108}, {"BMD", 2, 60},
    {"BND", 2, 96},  {"BOB", 2, 68},  {"BRL", 2, 986}, {"BSD", 2, 44},  {"BTN", 2, 64},
    {"BWP", 2, 72},  {"BYN", 2, 933}, {"BZD", 2, 84},  {"CAD", 2, 124}, {"CDF", 2, 976},
    {"CHF", 2, 756}, {"CLF", 4, 990}, {"CLP", 0, 152}, {"CNY", 2, 156}, {"COP", 2, 170},
    {"CRC", 2, 188}, {"CUP", 2, 192}, {"CVE", 2, 132}, {"CZK", 2, 203}, {"DJF", 0, 262},
    {"DKK", 2, 208}, {"DOP", 2, 214}, {"DZD", 2, 12},  {"EGP", 2, 818}, {"ERN", 2, 232},
    {"ETB", 2, 230}, {"EUR", 2, 978}, {"FJD", 2, 242}, {"FKP", 2, 238}, {"GBP", 2, 826},
    {"GEL", 2, 981}, {"GHS", 2, 936}, {"GIP", 2, 292}, {"GMD", 2, 270}, {"GNF", 0, 324},
    {"GTQ", 2, 320}, {"GYD", 2, 328}, {"HKD", 2, 344}, {"HNL", 2, 340}, {"HTG", 2, 332},
    {"HUF", 2, 348}, {"IDR", 2, 360}, {"ILS", 2, 376}, {"INR", 2, 356}, {"IQD", 3, 368},
    {"IRR", 2, 364}, {"ISK", 0, 352}, {"JMD", 2, 388}, {"JOD", 3, 400}, {"JPY", 0, 392},
    {"KES", 2, 404}, {"KGS", 2, 417}, {"KHR", 2, 116}, {"KMF", 0, 174}, {"KPW", 2, 408},
    {"KRW", 0, 410}, {"KWD", 3, 414}, {"KYD", 2, 136}, {"KZT", 2, 398}, {"LAK", 2, 418},
    {"LBP", 2, 422}, {"LKR", 2, 144}, {"LRD", 2, 430}, {"LSL", 2, 426}, {"LYD", 3, 434},
    {"MAD", 2, 504}, {"MDL", 2, 498}, {"MGA", 2, 969}, {"MKD", 2, 807}, {"MMK", 2, 104},
    {"MNT", 2, 496}, {"MOP", 2, 446}, {"MRU", 2, 929}, {"MUR", 2, 480}, {"MVR", 2, 462},
    {"MWK", 2, 454}, {"MXN", 2, 484}, {"MYR", 2, 458}, {"MZN", 2, 943}, {"NAD", 2, 516},
    {"NGN", 2, 566}, {"NIO", 2, 558}, {"NOK", 2, 578}, {"NPR", 2, 524}, {"NZD", 2, 554},
    {"OMR", 3, 512}, {"PAB", 2, 590}, {"PEN", 2, 604}, {"PGK", 2, 598}, {"PHP", 2, 608},
    {"PKR", 2, 586}, {"PLN", 2, 985}, {"PYG", 0, 600}, {"QAR", 2, 634}, {"RON", 2, 946},
    {"RSD", 2, 941}, {"RUB", 2, 643}, {"RWF", 0, 646}, {"SAR", 2, 682}, {"SBD", 2, 90},
    {"SCR", 2, 690}, {"SDG", 2, 938}, {"SEK", 2, 752}, {"SGD", 2, 702}, {"SHP", 2, 654},
    {"SLE", 2, 925}, {"SOS", 2, 706}, {"SRD", 2, 968}, {"SSP", 2, 728}, {"STN", 2, 930},
    {"SVC", 2, 222}, {"SYP", 2, 760}, {"SZL", 2, 748}, {"THB", 2, 764}, {"TJS", 2, 972},
    {"TMT", 2, 934}, {"TND", 3, 788}, {"TOP", 2, 776}, {"TRY", 2, 949}, {"TTD", 2, 780},
    {"TWD", 2, 901}, {"TZS", 2, 834}, {"UAH", 2, 980}, {"UGX", 0, 800}, {"USD", 2, 840},
    {"UYU", 2, 858}, {"UYW", 4, 927}, {"UZS", 2, 860}, {"VED", 2, 926}, {"VES", 2, 928},
    {"VND", 0, 704}, {"VUV", 0, 548}, {"WST", 2, 882}, {"XAF", 0, 950}, {"XCD", 2, 951},
    {"XCG", 2, 532}, {"XOF", 0, 952}, {"XPF", 0, 953}, {"YER", 2, 886}, {"ZAR", 2, 710},
    {"ZMW", 2, 967}, {"ZWG", 2, 924},
};

#define CURRENCIES_N (sizeof(currencies) / sizeof(currencies[0]))

/* Exactly three upper-case ASCII letters; reads no byte past the first bad one or the NUL. */
static bool code_shaped(const char *code)
{
        for (int i = 0; i < 3; i++) {
                if (code[i] < 'A' || code[i] > 'Z') {
                        return false;
                }
        }
        return code[3] == '\0';
}

const bl_currency *bl_currency_find(const char *code)
{
        size_t lo = 0, hi = CURRENCIES_N;

        if (code == NULL || !code_shaped(code)) {
                return NULL;
        }
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = memcmp(code, currencies[mid].code, 3);
                if (c == 0) {
                        return &currencies[mid];
                }
                if (c < 0) {
                        hi = mid;
                } else {
                        lo = mid + 1;
                }
        }
        return NULL;
}

const bl_currency *bl_currency_table(size_t *n)
{
        *n = CURRENCIES_N;
        return currencies;
}

/* ---- checked arithmetic --------------------------------------------------- */

bool bl_add(int64_t a, int64_t b, int64_t *out)
{
        int64_t r;

        if (__builtin_add_overflow(a, b, &r)) {
                return false;
        }
        *out = r;
        return true;
}

bool bl_sub(int64_t a, int64_t b, int64_t *out)
{
        int64_t r;

        if (__builtin_sub_overflow(a, b, &r)) {
                return false;
        }
        *out = r;
        return true;
}

bool bl_mul(int64_t a, int64_t b, int64_t *out)
{
        int64_t r;

        if (__builtin_mul_overflow(a, b, &r)) {
                return false;
        }
        *out = r;
        return true;
}

bool bl_mul_div(int64_t a, int64_t num, int64_t den, int64_t *out)
{
        if (den <= 0) {
                return false;
        }
        /* |a × num| <= 2^126: exact in 128 bits, and so are q and r. */
        __int128 p = (__int128)a * num;
        __int128 q = p / den; /* toward zero */
        __int128 r = p % den; /* with the sign of p */
        __int128 r_abs = r < 0 ? -r : r;

        /* Half away from zero, the same for a credit as for a charge: -2.5 is -3 as 2.5 is 3. */
        if (2 * r_abs >= den) {
                q += p < 0 ? -1 : 1;
        }
        if (q < INT64_MIN || q > INT64_MAX) {
                return false;
        }
        *out = (int64_t)q;
        return true;
}

bool bl_tax(int64_t amount, int32_t rate_bp, int64_t *out)
{
        if (rate_bp < 0 || rate_bp > BL_BASIS_POINTS) {
                return false;
        }
        return bl_mul_div(amount, rate_bp, BL_BASIS_POINTS, out);
}

bool bl_prorate(int64_t amount, int64_t part, int64_t whole, int64_t *out)
{
        if (whole <= 0 || part < 0 || part > whole) {
                return false;
        }
        return bl_mul_div(amount, part, whole, out);
}

/* The tax of one line: 0 when it is not taxable. */
static bool line_tax_of(const bl_line_amount *l, int32_t rate_bp, int64_t *out)
{
        if (!l->taxable) {
                *out = 0;
                return true;
        }
        return bl_tax(l->amount, rate_bp, out);
}

bool bl_totals_of(const bl_line_amount *lines, size_t n, int32_t rate_bp, int64_t *line_tax,
                  bl_totals *out)
{
        bl_totals t = {0, 0, 0};
        int64_t tax;

        KS_ASSERT(out != NULL);
        KS_ASSERT(lines != NULL || n == 0);
        if (rate_bp < 0 || rate_bp > BL_BASIS_POINTS) {
                return false;
        }
        for (size_t i = 0; i < n; i++) {
                if (!bl_add(t.subtotal, lines[i].amount, &t.subtotal) ||
                    !line_tax_of(&lines[i], rate_bp, &tax) || !bl_add(t.tax, tax, &t.tax)) {
                        return false;
                }
        }
        if (!bl_add(t.subtotal, t.tax, &t.total)) {
                return false;
        }
        /* Written only now that every sum held: a false return leaves line_tax as it was. */
        for (size_t i = 0; line_tax != NULL && i < n; i++) {
                bool ok = line_tax_of(&lines[i], rate_bp, &line_tax[i]);
                KS_ASSERT(ok); /* the same computation succeeded in the first pass */
        }
        *out = t;
        return true;
}
