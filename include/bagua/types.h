/*
 * Bagua-C element types and reduction operators shared by the communicator and the kernels.
 */
#ifndef BAGUA_TYPES_H
#define BAGUA_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "bagua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  BAGUA_F32 = 0,
  BAGUA_F16 = 1,  /* IEEE binary16, stored as uint16_t */
  BAGUA_BF16 = 2, /* bfloat16, stored as uint16_t */
  BAGUA_F64 = 3,
  BAGUA_I32 = 4,
  BAGUA_I64 = 5,
  BAGUA_U8 = 6,
  BAGUA_DTYPE__COUNT
} bagua_dtype_t;

typedef enum {
  BAGUA_SUM = 0,
  BAGUA_AVG = 1, /* sum divided by the number of ranks; integer types truncate toward zero */
  BAGUA_MIN = 2,
  BAGUA_MAX = 3,
  BAGUA_OP__COUNT
} bagua_op_t;

/* Size in bytes of one element; 0 for an invalid dtype. */
BAGUA_EXTERN size_t bagua_dtype_size(bagua_dtype_t dt);
/* "f32", "f16", ...; NULL for an invalid dtype. */
BAGUA_EXTERN const char *bagua_dtype_name(bagua_dtype_t dt);
/* Parses "f32", "float32", "f16", "half", "bf16", "f64", "i32", "i64", "u8"; -1 if unknown. */
BAGUA_EXTERN int bagua_dtype_parse(const char *name);
/* "sum", "avg", "min", "max"; NULL for an invalid op. */
BAGUA_EXTERN const char *bagua_op_name(bagua_op_t op);
/* Parses an op name; -1 if unknown. */
BAGUA_EXTERN int bagua_op_parse(const char *name);

#ifdef __cplusplus
}
#endif
#endif
