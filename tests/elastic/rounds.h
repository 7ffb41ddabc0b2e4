/*
 * Helpers shared by the elastic tests, which play bagua-agent: publishing round records and
 * giving a forked worker the environment an agent would.
 */
#ifndef BAGUA_TESTS_ELASTIC_ROUNDS_H
#define BAGUA_TESTS_ELASTIC_ROUNDS_H

/* Puts `json` under /bagua/<job>/round through the agent's own etcd client. */
void rounds_put_json(const char *endpoint, const char *job, const char *json);
/* Publishes round `round` with members n<first> .. n<first+n-1>, one worker each. */
void rounds_put(const char *endpoint, const char *job, int round, int first, int n);
/* Sets the worker variables of (round, rank, size) on node n<slot> and reloads the params. */
void rounds_worker_env(const char *endpoint, const char *job, int round, int rank, int size,
                       int slot);
void rounds_sleep_ms(int ms);

#endif
