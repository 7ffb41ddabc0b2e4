/*
 * The commit registry of the elastic context: the named buffers a program registers, their
 * last committed copies, the participants (objects such as a ddp context that commit, restore
 * and reset their own state) and the synchronisation that hands rank 0's state to every rank
 * of a new world.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "common/sock.h"
#include "elastic_internal.h"

bagua_status_t bagua_elastic_register(bagua_elastic_t *e, const char *name, void *ptr,
                                      size_t bytes) {
  if (!e || !name || (!ptr && bytes) || strlen(name) >= BAGUA__ELASTIC_NAME_MAX) {
    BAGUA_WARN(
        "bagua_elastic_register: need a context, a name of 1..%d characters and a "
        "buffer (got name %s)",
        BAGUA__ELASTIC_NAME_MAX - 1, name ? name : "NULL");
    return BAGUA_ERR_INVALID_ARG;
  }
  for (size_t i = 0; i < e->nentries; i++) {
    if (strcmp(e->entries[i].name, name) == 0) {
      BAGUA_WARN("bagua_elastic_register: \"%s\" is already registered", name);
      return BAGUA_ERR_INVALID_ARG;
    }
  }
  if (e->nentries == e->cap) {
    size_t cap = e->cap ? e->cap * 2 : 8;
    bagua__elastic_entry_t *n = realloc(e->entries, cap * sizeof(*n));
    if (!n) return BAGUA_ERR_NO_MEMORY;
    e->entries = n;
    e->cap = cap;
  }
  bagua__elastic_entry_t *en = &e->entries[e->nentries];
  memset(en, 0, sizeof(*en));
  snprintf(en->name, sizeof(en->name), "%s", name);
  en->ptr = ptr;
  en->bytes = bytes;
  en->copy = malloc(bytes ? bytes : 1);
  if (!en->copy) return BAGUA_ERR_NO_MEMORY;
  /* Until the first commit, restore returns the buffer to its registered contents. */
  if (bytes) memcpy(en->copy, ptr, bytes);
  e->nentries++;
  return BAGUA_OK;
}

void bagua__elastic_commit_entries(bagua_elastic_t *e) {
  for (size_t i = 0; i < e->nentries; i++)
    if (e->entries[i].bytes) memcpy(e->entries[i].copy, e->entries[i].ptr, e->entries[i].bytes);
}

void bagua__elastic_registry_free(bagua_elastic_t *e) {
  for (size_t i = 0; i < e->nentries; i++) free(e->entries[i].copy);
  free(e->entries);
  e->entries = NULL;
  e->nentries = e->cap = 0;
}

bagua_status_t bagua_elastic_commit(bagua_elastic_t *e) {
  if (!e) return BAGUA_ERR_INVALID_ARG;
  bagua__elastic_commit_entries(e);
  for (int i = 0; i < e->nparts; i++)
    if (e->parts[i].p.commit) BAGUA_CHECK(e->parts[i].p.commit(e->parts[i].arg));
  return BAGUA_OK;
}

bagua_status_t bagua_elastic_restore(bagua_elastic_t *e) {
  if (!e) return BAGUA_ERR_INVALID_ARG;
  for (size_t i = 0; i < e->nentries; i++)
    if (e->entries[i].bytes) memcpy(e->entries[i].ptr, e->entries[i].copy, e->entries[i].bytes);
  for (int i = 0; i < e->nparts; i++)
    if (e->parts[i].p.restore) e->parts[i].p.restore(e->parts[i].arg);
  return BAGUA_OK;
}

bagua_status_t bagua_elastic_sync(bagua_elastic_t *e) {
  if (!e) return BAGUA_ERR_INVALID_ARG;
  if (!e->comm) {
    BAGUA_WARN("bagua_elastic_sync: no communicator (a failed rebuild left none)");
    return BAGUA_ERR_INVALID_USAGE;
  }
  /* Every rank compares rank 0's registry fingerprint with its own and the verdict is
   * reduced, so a mismatch fails on all ranks instead of hanging the ones that agree. */
  uint64_t fp[3] = {e->nentries, 0, 0};
  for (size_t i = 0; i < e->nentries; i++) {
    fp[1] += e->entries[i].bytes;
    fp[2] = bagua__hash64(e->entries[i].name, strlen(e->entries[i].name), fp[2] + i);
  }
  uint64_t root[3];
  BAGUA_CHECK(bagua_broadcast(e->comm, fp, root, 3, BAGUA_I64, 0));
  int64_t bad = memcmp(fp, root, sizeof(fp)) != 0, any_bad = 0;
  BAGUA_CHECK(bagua_allreduce(e->comm, &bad, &any_bad, 1, BAGUA_I64, BAGUA_MAX));
  if (any_bad) {
    BAGUA_WARN(
        "bagua_elastic_sync: registered state differs between ranks (rank 0: %llu "
        "buffers, %llu bytes; rank %d: %llu buffers, %llu bytes, names %s); register "
        "the same names and sizes in the same order everywhere",
        (unsigned long long)root[0], (unsigned long long)root[1], e->rank,
        (unsigned long long)fp[0], (unsigned long long)fp[1],
        fp[2] == root[2] ? "equal" : "different");
    return BAGUA_ERR_INVALID_USAGE;
  }
  for (size_t i = 0; i < e->nentries; i++) {
    bagua__elastic_entry_t *en = &e->entries[i];
    BAGUA_CHECK(bagua_broadcast(e->comm, en->ptr, en->ptr, en->bytes, BAGUA_U8, 0));
  }
  /* Participants synchronise in their reset hook, which decides from their own restore state
   * what to carry; committing them here would overwrite a pending restore. */
  bagua__elastic_commit_entries(e);
  return BAGUA_OK;
}

bagua_status_t bagua_elastic_attach(bagua_elastic_t *e, const bagua_elastic_participant_t *p,
                                    void *arg) {
  if (!e || !p || p->struct_size < sizeof(bagua_elastic_participant_t)) {
    BAGUA_WARN("bagua_elastic_attach: need a context and a participant with struct_size set");
    return BAGUA_ERR_INVALID_ARG;
  }
  pthread_mutex_lock(&e->lock);
  if (e->nparts == BAGUA__ELASTIC_MAX_CALLBACKS) {
    pthread_mutex_unlock(&e->lock);
    BAGUA_WARN("bagua_elastic_attach: at most %d callbacks and participants",
               BAGUA__ELASTIC_MAX_CALLBACKS);
    return BAGUA_ERR_INVALID_USAGE;
  }
  e->parts[e->nparts].p = *p;
  e->parts[e->nparts].arg = arg;
  e->nparts++;
  pthread_mutex_unlock(&e->lock);
  return BAGUA_OK;
}

void bagua_elastic_detach(bagua_elastic_t *e, void *arg) {
  if (!e) return;
  pthread_mutex_lock(&e->lock);
  int k = 0;
  for (int i = 0; i < e->nparts; i++)
    if (e->parts[i].arg != arg) e->parts[k++] = e->parts[i];
  e->nparts = k;
  pthread_mutex_unlock(&e->lock);
}

bagua_status_t bagua_elastic_on_reset(bagua_elastic_t *e, bagua_elastic_reset_cb cb, void *arg) {
  if (!e || !cb) return BAGUA_ERR_INVALID_ARG;
  bagua_elastic_participant_t p = {sizeof(p), NULL, NULL, NULL, cb};
  return bagua_elastic_attach(e, &p, arg);
}

int64_t bagua_elastic_step(const bagua_elastic_t *e) {
  return e ? e->step : 0;
}
void bagua_elastic_set_step(bagua_elastic_t *e, int64_t step) {
  if (e) e->step = step;
}
int64_t bagua_elastic_epoch(const bagua_elastic_t *e) {
  return e ? e->epoch : 0;
}
void bagua_elastic_set_epoch(bagua_elastic_t *e, int64_t epoch) {
  if (e) e->epoch = epoch;
}
