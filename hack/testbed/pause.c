/* The sandbox process of the real node's pods (what registry.k8s.io/pause is, written here:
 * no registry serves that image on these machines). It holds the pod's namespaces open, reaps
 * the zombies it inherits as PID 1, and exits 0 on SIGINT or SIGTERM. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = reap;
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    for (;;) {
        pause();
    }
}
