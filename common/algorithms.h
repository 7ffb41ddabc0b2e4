/*
 * The names of the data-parallel algorithms: the one list. Each name is a file of
 * ddp/algorithms/ that defines bagua__ddp_<name>; the data-parallel layer builds its table
 * from this list (ddp/algorithms/table.c), and the parameter registry builds the words
 * BAGUA_ALGORITHM and BAGUA_AUTO_ALLOW accept from it (common/params.def), so adding an
 * algorithm is its file and its row here. It lives in the common layer because the registry,
 * which every layer reads, needs the names.
 *
 * BAGUA__ALGORITHMS(X) calls X(SEP, name) once per algorithm in the registry's order; SEP is
 * empty for the first and | for the others, so that stringifying both spells "a|b|c".
 */
#ifndef BAGUA_COMMON_ALGORITHMS_H
#define BAGUA_COMMON_ALGORITHMS_H

/* clang-format off */
#define BAGUA__ALGORITHMS(X) \
  X(, gradient_allreduce) \
  X(|, bytegrad) \
  X(|, decentralized) \
  X(|, low_precision_decentralized) \
  X(|, qadam) \
  X(|, async) \
  X(|, powersgd)
/* clang-format on */

/* "gradient_allreduce|bytegrad|...": the algorithms as registry words. */
#define BAGUA__ALGORITHM_WORD(sep, name) #sep #name
#define BAGUA__ALGORITHM_WORDS BAGUA__ALGORITHMS(BAGUA__ALGORITHM_WORD)

#endif
