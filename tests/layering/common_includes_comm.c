/* Must not compile: nothing in common/ may depend on the communicator. */
#include "comm/wire.h"

int bagua__layering_probe(void) {
  return 0;
}
