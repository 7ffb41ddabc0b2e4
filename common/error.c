#include "bagua/error.h"

const char *bagua_strerror(bagua_status_t st) {
  switch (st) {
#define XX(name, val, text) \
  case BAGUA_ERR_##name:    \
    return text;
    BAGUA_ERROR_MAP(XX)
#undef XX
    default:
      return "unknown error";
  }
}

const char *bagua_err_name(bagua_status_t st) {
  switch (st) {
#define XX(name, val, text) \
  case BAGUA_ERR_##name:    \
    return "BAGUA_ERR_" #name;
    BAGUA_ERROR_MAP(XX)
#undef XX
    default:
      return "BAGUA_ERR_UNKNOWN";
  }
}
