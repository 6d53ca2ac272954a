#include "child.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int run_child(void (*child)(void), char *log, size_t log_size, int *status)
{
        size_t used = 0;
        ssize_t n;
        int fds[2];
        pid_t pid;

        if (log_size == 0 || pipe(fds) != 0) {
                return -1;
        }
        if ((pid = fork()) < 0) {
                close(fds[0]);
                close(fds[1]);
                return -1;
        }
        if (pid == 0) {
                dup2(fds[1], STDERR_FILENO);
                close(fds[0]);
                close(fds[1]);
                signal(SIGABRT, SIG_DFL);
                child();
                _exit(0);
        }
        close(fds[1]);
        while (used + 1 < log_size && (n = read(fds[0], log + used, log_size - 1 - used)) > 0) {
                used += (size_t)n;
        }
        log[used] = '\0';
        close(fds[0]);
        return waitpid(pid, status, 0) == pid ? 0 : -1;
}
