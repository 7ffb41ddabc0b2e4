/* Must not compile: the comm layer sits below ddp/ and cannot see its internals. */
#include "ddp/ddp_internal.h"

int bagua__layering_probe(void) {
  return 0;
}
