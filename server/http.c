/* kiln serve's HTTP core on libmicrohttpd, one thread per connection, and one worker
 * thread per slot: a connection's thread reads the body, tokenizes the prompt, waits for a
 * free slot (in a bounded FIFO queue), picks the free slot whose cache holds the longest
 * part of the prompt and hands the job to its worker (slots.c). A plain request's thread
 * then waits for the answer (job.c); a streamed one's reads Server-Sent Events from a
 * small locked queue of bytes the worker fills (job_stream.c). This file is the daemon's
 * life: the slots up, the socket bound, the signals waited for, everything stopped. */
#include "server/http_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

int srv_serve(const srv_config *cfg) {
    server s = {.cfg = cfg, .end_turn = -1};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    atomic_init(&s.stopping, false);
    atomic_init(&s.next_id, ((uint64_t)time(NULL) << 20));
    int rc = 1;
    struct MHD_Daemon *d = NULL;
    if (srv_slots_create(&s)) {
        fprintf(stderr, "kiln: out of memory\n");
        goto out;
    }
    if (tok_bos(cfg->tok) >= 0) {
        int64_t k = tok_piece(cfg->tok, tok_bos(cfg->tok), true, s.bos, sizeof s.bos - 1);
        s.bos[k > 0 && k < (int64_t)sizeof s.bos ? k : 0] = 0;
    }
    s.end_turn = tok_find(cfg->tok, chat_end_of_turn(cfg->family));
    kiln_err gerr = {0};
    if (!(s.gvocab = gram_vocab_create(cfg->tok, &gerr))) {
        fprintf(stderr, "kiln: %s\n", gerr.msg);
        goto out;
    }

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(cfg->port)};
    if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1) {
        fprintf(stderr, "kiln: --listen: '%s' is not an IPv4 address\n", cfg->host);
        goto out;
    }
    /* SIGINT and SIGTERM go to sigwait below, in this thread only (the threads started
     * from here on inherit the mask). */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (srv_slots_start(&s)) {
        fprintf(stderr, "kiln: cannot start the slots' threads: %s\n", strerror(errno));
        goto out;
    }
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG, 0,
                         NULL, NULL, srv_handle, &s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                         MHD_OPTION_NOTIFY_COMPLETED, srv_completed, &s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)256, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "kiln: cannot listen on %s:%u: %s\n", cfg->host, (unsigned)cfg->port, strerror(errno));
        goto out;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_in bound;
    socklen_t blen = sizeof bound;
    unsigned port = cfg->port;
    if (info && getsockname(info->listen_fd, (struct sockaddr *)&bound, &blen) == 0) port = ntohs(bound.sin_port);
    printf("listening on http://%s:%u\n", cfg->host, port);
    fflush(stdout);
    int sig = 0;
    while (sigwait(&sigs, &sig) != 0) {}
    fprintf(stderr, "kiln: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    atomic_store(&s.stopping, true);
    pthread_mutex_lock(&s.mu);
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);
    MHD_stop_daemon(d); /* waits for the connections, and so for their jobs */
    rc = 0;
out:
    srv_slots_free(&s);
    gram_vocab_free(s.gvocab);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    return rc;
}
