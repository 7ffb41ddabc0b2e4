/* Must compile and link: the control case, so the failures above are about the layering and
 * not about a broken set-up. The agent's layer reaches common/ headers and functions. */
#include "bagua/params.h"
#include "common/log.h"

int main(void) {
  (void)bagua_param_get("BAGUA_DEBUG");
  return 0;
}
