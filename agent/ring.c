/* The liveness ring's rules (ring.h). */
#include "ring.h"

int bagua__ring_revokes_first(int d, const int *dead) {
  for (int i = 0; i < d - 1; i++)
    if (!dead[i]) return 0;
  return 1;
}

int bagua__ring_campaign_delay_ms(int index, int nmembers, int step_ms) {
  if (nmembers <= 0) return 0;
  if (index < 0 || index >= nmembers) index = nmembers;
  /* Tier t holds places [FIRST (2^t - 1), FIRST (2^(t+1) - 1)). */
  int tier = 0;
  for (int64_t q = index / BAGUA__CAMPAIGN_FIRST + 1; q > 1; q >>= 1) tier++;
  return tier * step_ms;
}
