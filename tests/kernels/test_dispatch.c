/*
 * Implementation selection: the automatic choice is the widest the CPU supports, forcing
 * works for what the CPU has and refuses what it lacks or does not know, and "auto" returns
 * to the automatic choice.
 */
#include "ktest.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

int main(void) {
  const char *isa = bagua__kernels_isa();
  printf("automatic choice: %s\n", isa);
  ASSERT_TRUE(strcmp(isa, "scalar") == 0 || strcmp(isa, "avx2") == 0 || strcmp(isa, "avx512") == 0);
#if defined(__x86_64__)
  __builtin_cpu_init();
  unsigned eax, ebx, ecx, edx;
  int f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
  int avx2 = __builtin_cpu_supports("avx2") && f16c;
  int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
  ASSERT_STREQ(isa, avx512 ? "avx512" : avx2 ? "avx2" : "scalar");
  ASSERT_EQ(bagua__kernels_force_isa("avx2"), avx2 ? 0 : -1);
  if (avx2) ASSERT_STREQ(bagua__kernels_isa(), "avx2");
  ASSERT_EQ(bagua__kernels_force_isa("avx512"), avx512 ? 0 : -1);
  if (avx512) ASSERT_STREQ(bagua__kernels_isa(), "avx512");
  ASSERT_EQ(bagua__kernels_force_isa("avx512zmm"), avx512 ? 0 : -1);
  if (avx512) ASSERT_STREQ(bagua__kernels_isa(), "avx512zmm");
#endif
  ASSERT_EQ(bagua__kernels_force_isa("scalar"), 0);
  ASSERT_STREQ(bagua__kernels_isa(), "scalar");
  ASSERT_EQ(bagua__kernels_force_isa("sse9"), -1);
  ASSERT_STREQ(bagua__kernels_isa(), "scalar"); /* unchanged by a refused request */
  ASSERT_EQ(bagua__kernels_force_isa("auto"), 0);
  ASSERT_STREQ(bagua__kernels_isa(), isa);
  ASSERT_EQ(bagua__kernels_force_isa(NULL), 0);
  ASSERT_STREQ(bagua__kernels_isa(), isa);
  /* Invalid dtypes are ignored rather than indexing past the table. */
  float x = 1.0f;
  bagua__reduce((bagua_dtype_t)99, BAGUA_SUM, &x, &x, 1);
  bagua__reduce_out((bagua_dtype_t)-1, BAGUA_MAX, &x, &x, &x, 1);
  ASSERT_TRUE(x == 1.0f);
  return 0;
}
