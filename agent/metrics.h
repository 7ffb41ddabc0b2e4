/*
 * The agent's Prometheus endpoint (bagua-agent --metrics-port, docs/observability.md): a
 * minimal HTTP/1.0 server answering GET /metrics with the text exposition format 0.0.4.
 *
 * It runs in its own thread so that a slow or hostile client can never hold up the agent's
 * loop: the listener and every connection are non-blocking, at most METRICS_MAX_CONNS
 * connections are served at a time, each gets METRICS_DEADLINE_MS to send a request of at
 * most METRICS_REQ_MAX bytes and take the answer, and anything else is answered with an error
 * status and closed. When every slot is taken, a new connection takes the slot of the oldest
 * one still waiting for its request (a scraper sends its request at once, so connections
 * held open idle cannot lock scrapers out); only when every slot is sending an answer is the
 * new one closed. The agent's loop renders the text
 * (bagua__agent_metrics_render) and hands a copy over with bagua__metrics_publish; the two
 * threads share only that text, under a mutex.
 */
#ifndef BAGUA_AGENT_METRICS_H
#define BAGUA_AGENT_METRICS_H

#include <stddef.h>

#define METRICS_MAX_CONNS 64
#define METRICS_DEADLINE_MS 2000
#define METRICS_REQ_MAX 4096

typedef struct bagua__metrics bagua__metrics_t;

/*
 * Listens on addr:port (an IPv4 address; never a wildcard by default) and starts the thread.
 * Returns 0, or -1 with `err` naming the address, the port and the error (e.g. "Address
 * already in use"); nothing is left running then.
 */
int bagua__metrics_start(const char *addr, int port, bagua__metrics_t **out, char *err,
                         size_t errlen);
/* The port it listens on (useful with port 0 in tests). */
int bagua__metrics_port(const bagua__metrics_t *m);
/* Replaces the text served from now on (copied). Any thread; never blocks beyond the mutex. */
void bagua__metrics_publish(bagua__metrics_t *m, const char *text, size_t len);
/* Stops the thread, closes every connection and frees. NULL is accepted. */
void bagua__metrics_stop(bagua__metrics_t *m);

struct bagua__agent_s;
/* The exposition text of the agent's state (malloc'ed; NULL when out of memory). Main
 * thread. */
char *bagua__agent_metrics_render(const struct bagua__agent_s *a, size_t *len);

#endif
