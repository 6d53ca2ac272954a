/*
 * ks_assert: KS_ASSERT(cond), compiled in whatever NDEBUG says.
 *
 * An assertion states an invariant the code relies on (an argument in range,
 * a count that must match, a result that must hold). When one is false the
 * process is already wrong, and carrying on would turn a bug into lost or
 * corrupted data: KS_ASSERT logs the expression and file:line as a JSON line
 * on stderr and aborts, in release builds too (Redis's serverAssert,
 * TigerBeetle's assert). Not for what a client or the network can cause:
 * those are errors, returned as such.
 */
#ifndef KS_ASSERT_H
#define KS_ASSERT_H

/* Logs "assertion failed" with expr, file and line, then abort(). */
void ks_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn, cold));

#define KS_ASSERT(cond)                                                                            \
        (__builtin_expect(!!(cond), 1) ? (void)0 : ks_assert_fail(#cond, __FILE__, __LINE__))

#endif
