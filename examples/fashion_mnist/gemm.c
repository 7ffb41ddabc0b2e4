/*
 * Packed, cache-blocked SGEMM (see gemm.h).
 *
 * Loop order (outermost first), as in BLIS: columns of C in blocks of NC; the K dimension in
 * blocks of KC, packing a KC x NC block of B once; rows of C in blocks of MC, packing an
 * MC x KC block of A; then MR x NR tiles of C, each computed by the micro-kernel from a
 * packed MR x KC sliver of A (which stays in L1) and a packed KC x NR sliver of B. The sizes
 * suit a core with 32 KiB L1d and 1 MiB L2: the A block is 96 KiB and the B block 512 KiB.
 * Packing zero-pads partial slivers, so the micro-kernel always computes whole tiles; edge
 * tiles are computed into a local buffer and only their valid part is added to C.
 */
#include "gemm.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define MR 6
#define NR 16
#define FM_GEMM_MC 96 /* multiple of MR */
#define FM_GEMM_KC 256
#define FM_GEMM_NC 512 /* multiple of NR */

typedef void (*ukernel_fn)(int kc, const float *a, const float *b, float *c, ptrdiff_t ldc,
                           int accumulate);

int fm_gemm_ws_init(fm_gemm_ws_t *ws) {
  ws->a = aligned_alloc(64, sizeof(float) * FM_GEMM_MC * FM_GEMM_KC);
  ws->b = aligned_alloc(64, sizeof(float) * FM_GEMM_KC * FM_GEMM_NC);
  if (ws->a && ws->b) return 0;
  fm_gemm_ws_free(ws);
  return -1;
}

void fm_gemm_ws_free(fm_gemm_ws_t *ws) {
  free(ws->a);
  free(ws->b);
  ws->a = ws->b = NULL;
}

/* Portable micro-kernel, written with GCC's generic vectors so that it compiles to SSE2 on
 * baseline x86-64 (and to NEON or scalar code elsewhere) without intrinsics. */
typedef float v4f __attribute__((vector_size(16), aligned(4)));

static void ukernel_generic(int kc, const float *a, const float *b, float *c, ptrdiff_t ldc,
                            int accumulate) {
  v4f acc[MR][NR / 4];
  memset(acc, 0, sizeof(acc));
  for (int p = 0; p < kc; p++, a += MR, b += NR) {
    v4f bv[NR / 4];
    memcpy(bv, b, sizeof(bv));
    for (int i = 0; i < MR; i++)
      for (int j = 0; j < NR / 4; j++) acc[i][j] += a[i] * bv[j];
  }
  for (int i = 0; i < MR; i++) {
    float *ci = c + i * ldc;
    for (int j = 0; j < NR / 4; j++) {
      v4f cur;
      memcpy(&cur, ci + 4 * j, sizeof(cur));
      cur = accumulate ? cur + acc[i][j] : acc[i][j];
      memcpy(ci + 4 * j, &cur, sizeof(cur));
    }
  }
}

/*
 * AVX2+FMA micro-kernel: twelve 8-float accumulators hold the 6x16 tile, and each step of k
 * loads two vectors of B and broadcasts six scalars of A, giving twelve fused multiply-adds
 * for eight loads, which keeps both FMA pipes of a Zen or Skylake-class core busy.
 */
__attribute__((target("avx2,fma"))) static void ukernel_avx2(int kc, const float *a, const float *b,
                                                             float *c, ptrdiff_t ldc,
                                                             int accumulate) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int p = 0; p < kc; p++, a += MR, b += NR) {
    __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8), ai;
    ai = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(ai, b0, c00);
    c01 = _mm256_fmadd_ps(ai, b1, c01);
    ai = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(ai, b0, c10);
    c11 = _mm256_fmadd_ps(ai, b1, c11);
    ai = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(ai, b0, c20);
    c21 = _mm256_fmadd_ps(ai, b1, c21);
    ai = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(ai, b0, c30);
    c31 = _mm256_fmadd_ps(ai, b1, c31);
    ai = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(ai, b0, c40);
    c41 = _mm256_fmadd_ps(ai, b1, c41);
    ai = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(ai, b0, c50);
    c51 = _mm256_fmadd_ps(ai, b1, c51);
  }
  __m256 rows[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int i = 0; i < MR; i++) {
    float *ci = c + i * ldc;
    if (accumulate) {
      rows[i][0] = _mm256_add_ps(rows[i][0], _mm256_loadu_ps(ci));
      rows[i][1] = _mm256_add_ps(rows[i][1], _mm256_loadu_ps(ci + 8));
    }
    _mm256_storeu_ps(ci, rows[i][0]);
    _mm256_storeu_ps(ci + 8, rows[i][1]);
  }
}

static int force_generic;

static ukernel_fn pick_ukernel(void) {
  if (!force_generic && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return ukernel_avx2;
  return ukernel_generic;
}

const char *fm_gemm_isa(void) {
  return pick_ukernel() == ukernel_avx2 ? "avx2" : "generic";
}

void fm_gemm_force_generic(int on) {
  force_generic = on;
}

/* Packs an mc x kc block of A into MR-row slivers, each stored k-major: dst[k*MR + i]. Reading
 * MR source rows side by side suits both layouts that occur: rows of X (csa == 1) and columns
 * of X for X^T (rsa == 1, where the MR values of one k are adjacent). */
static void pack_a(int mc, int kc, const float *a, ptrdiff_t rsa, ptrdiff_t csa, float *dst) {
  for (int i0 = 0; i0 < mc; i0 += MR) {
    int rows = mc - i0 < MR ? mc - i0 : MR;
    const float *src = a + i0 * rsa;
    for (int p = 0; p < kc; p++) {
      for (int i = 0; i < rows; i++) dst[p * MR + i] = src[i * rsa + p * csa];
      for (int i = rows; i < MR; i++) dst[p * MR + i] = 0.0f;
    }
    dst += MR * kc;
  }
}

/* Packs a kc x nc block of B into NR-column slivers, each stored k-major: dst[k*NR + j]. */
static void pack_b(int kc, int nc, const float *b, ptrdiff_t rsb, ptrdiff_t csb, float *dst) {
  for (int j0 = 0; j0 < nc; j0 += NR) {
    int cols = nc - j0 < NR ? nc - j0 : NR;
    const float *src = b + j0 * csb;
    if (csb == 1) {
      for (int p = 0; p < kc; p++) {
        for (int j = 0; j < cols; j++) dst[p * NR + j] = src[p * rsb + j];
        for (int j = cols; j < NR; j++) dst[p * NR + j] = 0.0f;
      }
    } else {
      /* Row-strided B (W^T in the input gradient): walk each source row contiguously. */
      for (int j = 0; j < NR; j++)
        for (int p = 0; p < kc; p++) dst[p * NR + j] = j < cols ? src[j * csb + p * rsb] : 0.0f;
    }
    dst += NR * kc;
  }
}

void fm_sgemm(fm_gemm_ws_t *ws, int m, int n, int k, const float *a, ptrdiff_t rsa, ptrdiff_t csa,
              const float *b, ptrdiff_t rsb, ptrdiff_t csb, float *c, ptrdiff_t ldc,
              int accumulate) {
  ukernel_fn kern = pick_ukernel();
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    /* An empty sum: C = 0 or C unchanged. */
    if (!accumulate)
      for (int i = 0; i < m; i++) memset(c + i * ldc, 0, sizeof(float) * (size_t)n);
    return;
  }
  float edge[MR * NR] __attribute__((aligned(32)));
  for (int jc = 0; jc < n; jc += FM_GEMM_NC) {
    int nc = n - jc < FM_GEMM_NC ? n - jc : FM_GEMM_NC;
    for (int pc = 0; pc < k; pc += FM_GEMM_KC) {
      int kc = k - pc < FM_GEMM_KC ? k - pc : FM_GEMM_KC;
      /* Later K blocks add to what the earlier ones wrote. */
      int acc = accumulate || pc > 0;
      pack_b(kc, nc, b + pc * rsb + jc * csb, rsb, csb, ws->b);
      for (int ic = 0; ic < m; ic += FM_GEMM_MC) {
        int mc = m - ic < FM_GEMM_MC ? m - ic : FM_GEMM_MC;
        pack_a(mc, kc, a + ic * rsa + pc * csa, rsa, csa, ws->a);
        for (int jr = 0; jr < nc; jr += NR) {
          int cols = nc - jr < NR ? nc - jr : NR;
          const float *bp = ws->b + (size_t)jr * kc;
          for (int ir = 0; ir < mc; ir += MR) {
            int rows = mc - ir < MR ? mc - ir : MR;
            const float *ap = ws->a + (size_t)ir * kc;
            float *cp = c + (ic + ir) * ldc + jc + jr;
            if (rows == MR && cols == NR) {
              kern(kc, ap, bp, cp, ldc, acc);
              continue;
            }
            kern(kc, ap, bp, edge, NR, 0);
            for (int i = 0; i < rows; i++)
              for (int j = 0; j < cols; j++)
                cp[i * ldc + j] = (acc ? cp[i * ldc + j] : 0.0f) + edge[i * NR + j];
          }
        }
      }
    }
  }
}
