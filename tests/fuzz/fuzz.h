/*
 * Shared helpers of the libFuzzer targets (tests/fuzz/README.md says how to run them).
 *
 * Each target is a single LLVMFuzzerTestOneInput over one parser. Input bytes are never
 * NUL-terminated by libFuzzer, so text parsers get a malloc'ed copy with a NUL after it: ASan
 * then catches a read one byte past the end of what a real caller would have passed.
 */
#ifndef BAGUA_TESTS_FUZZ_H
#define BAGUA_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL-terminated copy of data[0, size). Aborts when out of memory (a fuzzer bug, not a find). */
static inline char *fuzz_strndup(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) abort();
  if (size) memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

/* Fails the run with a message: a broken invariant is a finding just like a crash. */
#define FUZZ_ASSERT(cond)                                                               \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                          \
    }                                                                                   \
  } while (0)

/*
 * The parsers warn about bad input through the library's log, which would print one line
 * per rejected input and slow the fuzzer down by an order of magnitude. The log goes to
 * /dev/null unless the person reproducing a crash set BAGUA_DEBUG_FILE (e.g. /dev/stderr).
 */
static inline void fuzz_quiet_log(void) {
  setenv("BAGUA_DEBUG_FILE", "/dev/null", 0);
}

#endif
