/*
 * A function run in a forked process of its own, with what it writes to
 * stderr captured: for code whose end is the process's end (an assertion
 * that aborts, a deadline that exits).
 */
#ifndef KS_TEST_CHILD_H
#define KS_TEST_CHILD_H

#include <stddef.h>

/*
 * Runs child() in a forked process (SIGABRT at its default, stderr into a
 * pipe; _exit(0) when child returns). log gets what it wrote, at most
 * log_size - 1 bytes, NUL-terminated; *status its wait status. Returns 0,
 * or -1 when the process could not be run or waited for.
 */
int run_child(void (*child)(void), char *log, size_t log_size, int *status);

#endif
