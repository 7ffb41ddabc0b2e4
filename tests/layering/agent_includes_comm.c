/* Must not compile: the agent's layer (common) cannot see comm/'s internal headers. */
#include "comm/comm_internal.h"

int main(void) {
  return 0;
}
