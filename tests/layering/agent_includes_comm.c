/* Must not compile: the agent's layer (common) cannot see comm/'s internal headers. */
#include "comm/communicator.h"

int main(void) {
  return 0;
}
