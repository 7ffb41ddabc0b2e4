/* The liveness ring's rules (ring.h). */
#include "ring.h"

int bagua__ring_revokes_first(int d, const int *dead) {
  for (int i = 0; i < d - 1; i++)
    if (!dead[i]) return 0;
  return 1;
}
