/* The pod sandbox's process, standing in for registry.k8s.io/pause: it
 * sleeps until told to stop and reaps what is re-parented to it. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, 0, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction stopping = {.sa_handler = stop};
    struct sigaction reaping = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGINT, &stopping, 0);
    sigaction(SIGTERM, &stopping, 0);
    sigaction(SIGCHLD, &reaping, 0);
    for (;;)
        pause();
}
