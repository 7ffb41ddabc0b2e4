/*
 * Entry point of `bagua-bench kernel`, implemented in bench/kernel_bench.c (owned by the
 * kernels engineer) and called by bagua-bench's main.
 */
#ifndef BAGUA_KERNELS_BENCH_H
#define BAGUA_KERNELS_BENCH_H

/*
 * argv[0] is the subcommand name ("kernel") and is ignored; the rest are
 *   [NAME] [--bytes SIZE] [--isa scalar|avx2|avx512] [--iters N] [--dtype DT] [--op OP]
 *   [--chunks N]
 * NAME is memcpy, reduce, quantize, dequantize, dequantize_add, axpy, sgd, adam or all (the
 * default). Returns the process exit status (0, or 2 for a usage error).
 */
int bagua__bench_kernel_main(int argc, char **argv);

#endif
