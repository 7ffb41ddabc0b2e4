/*
 * Tensor fusion: the partition of registered tensors into buckets and the flat layout.
 *
 * As in Bagua (computed locally here instead of by its autotune service), tensors are taken
 * in registration order, which approximates the order gradients become ready in backward,
 * and a bucket closes once it holds at least the bucket size, so a bucket may overshoot and
 * one huge tensor is one bucket. All tensors are f32, so buckets are dtype-homogeneous by
 * construction. Each bucket is padded with zeros to a multiple of `align` elements, which
 * makes it split evenly into one chunk per rank (and per node) for the scatter-gather
 * algorithms and keeps every bucket 64-byte aligned in the flat buffers.
 */
#include <stdlib.h>
#include <string.h>

#include "tune.h"
#include "common/log.h"
#include "ddp_internal.h"

bagua_status_t bagua__ddp_partition(bagua__ddp_tensor_t *t, int nt, size_t bucket_bytes,
                                    size_t align, bagua__ddp_bucket_t **buckets, int *nbuckets,
                                    size_t *total, size_t *max_bucket) {
  *buckets = NULL;
  *nbuckets = 0;
  *total = *max_bucket = 0;
  if (nt < 1 || align < 1 || bucket_bytes < 1) return BAGUA_ERR_INVALID_ARG;
  /* At most one bucket per tensor. */
  bagua__ddp_bucket_t *b = calloc((size_t)nt, sizeof(*b));
  if (!b) return BAGUA_ERR_NO_MEMORY;
  int nb = 0;
  size_t offset = 0;
  for (int i = 0; i < nt;) {
    bagua__ddp_bucket_t *cur = &b[nb];
    cur->offset = offset;
    cur->first = i;
    size_t bytes = 0;
    while (i < nt && bytes < bucket_bytes) {
      t[i].offset = offset + cur->used;
      t[i].bucket = nb;
      cur->used += t[i].count;
      bytes += t[i].count * sizeof(float);
      cur->ntensors++;
      i++;
    }
    size_t rem = cur->used % align;
    cur->count = cur->used + (rem ? align - rem : 0);
    if (cur->count < cur->used) { /* overflow of size_t: absurd sizes */
      free(b);
      return BAGUA_ERR_INVALID_ARG;
    }
    offset += cur->count;
    if (cur->count > *max_bucket) *max_bucket = cur->count;
    nb++;
  }
  *buckets = b;
  *nbuckets = nb;
  *total = offset;
  return BAGUA_OK;
}

/* FNV-1a over the words that must agree across ranks. */
static uint64_t mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t bagua__ddp_layout_hash(const bagua_ddp_t *d) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char *p = d->s.algo->name; *p; p++) h = mix(h, (uint64_t)(unsigned char)*p);
  h = mix(h, (uint64_t)d->s.optimizer);
  h = mix(h, (uint64_t)d->s.hierarchical);
  h = mix(h, (uint64_t)d->s.peer_mode);
  h = mix(h, (uint64_t)d->s.comm_interval);
  h = mix(h, (uint64_t)d->s.error_feedback);
  h = mix(h, (uint64_t)d->s.warmup_steps);
  h = mix(h, (uint64_t)d->s.rank);
  h = mix(h, (uint64_t)d->ntensors);
  h = mix(h, (uint64_t)d->nbuckets);
  for (int i = 0; i < d->ntensors; i++) h = mix(mix(h, d->tensors[i].count), d->tensors[i].rows);
  for (int i = 0; i < d->nbuckets; i++) h = mix(h, d->buckets[i].count);
  h = mix(h, bagua__ddp_tune_fingerprint(d)); /* ranks that tune call more collectives */
  h = mix(h, (uint64_t)d->phase.numbered);    /* so do ranks that check their step numbers */
  return h;
}
