/* Must not link: a tool built on the common layer alone cannot call the communicator. The
 * public header is visible (it only declares), the definition is not linked in. */
#include "bagua/comm.h"

int main(void) {
  return bagua_barrier(NULL) == BAGUA_OK;
}
