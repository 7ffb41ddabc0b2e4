/* Element types and operators: sizes, names and parsing. */
#include <string.h>
#include <strings.h>

#include "bagua/types.h"

static const struct {
  const char *name, *alias;
  size_t size;
} k_dtypes[BAGUA_DTYPE__COUNT] = {
    [BAGUA_F32] = {"f32", "float32", 4},    [BAGUA_F16] = {"f16", "float16", 2},
    [BAGUA_BF16] = {"bf16", "bfloat16", 2}, [BAGUA_F64] = {"f64", "float64", 8},
    [BAGUA_I32] = {"i32", "int32", 4},      [BAGUA_I64] = {"i64", "int64", 8},
    [BAGUA_U8] = {"u8", "uint8", 1},
};

static const char *k_ops[BAGUA_OP__COUNT] = {"sum", "avg", "min", "max"};

size_t bagua_dtype_size(bagua_dtype_t dt) {
  return (unsigned)dt < BAGUA_DTYPE__COUNT ? k_dtypes[dt].size : 0;
}

const char *bagua_dtype_name(bagua_dtype_t dt) {
  return (unsigned)dt < BAGUA_DTYPE__COUNT ? k_dtypes[dt].name : NULL;
}

int bagua_dtype_parse(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < BAGUA_DTYPE__COUNT; i++)
    if (strcasecmp(name, k_dtypes[i].name) == 0 || strcasecmp(name, k_dtypes[i].alias) == 0)
      return i;
  if (strcasecmp(name, "half") == 0) return BAGUA_F16;
  if (strcasecmp(name, "float") == 0) return BAGUA_F32;
  return -1;
}

const char *bagua_op_name(bagua_op_t op) {
  return (unsigned)op < BAGUA_OP__COUNT ? k_ops[op] : NULL;
}

int bagua_op_parse(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < BAGUA_OP__COUNT; i++)
    if (strcasecmp(name, k_ops[i]) == 0) return i;
  if (strcasecmp(name, "mean") == 0) return BAGUA_AVG;
  return -1;
}
