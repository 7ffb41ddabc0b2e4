/*
 * The shared validators of user-given values (see validate.h). The messages are part of the
 * tools' interface: the launcher's golden tests and the agent's tests match them.
 */
#include "validate.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Strict decimal integer: optional sign, digits, nothing else (no blanks, no "0x"). */
static int parse_int(const char *text, int64_t *out) {
  if (!*text || isspace((unsigned char)*text)) return -1;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0') return -1;
  *out = v;
  return 0;
}

bagua_status_t bagua__check_int(const char *text, int64_t lo, int64_t hi, int64_t *out, char *err,
                                size_t errlen) {
  int64_t v = 0;
  if (!*text) {
    snprintf(err, errlen, "the value is empty; accepted: an integer in [%lld, %lld]", (long long)lo,
             (long long)hi);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (parse_int(text, &v) != 0) {
    snprintf(err, errlen, "\"%s\" is not an integer; accepted: an integer in [%lld, %lld]", text,
             (long long)lo, (long long)hi);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (v < lo || v > hi) {
    snprintf(err, errlen, "%lld is out of range; accepted: an integer in [%lld, %lld]",
             (long long)v, (long long)lo, (long long)hi);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (out) *out = v;
  return BAGUA_OK;
}

bagua_status_t bagua__check_id(const char *text, char *err, size_t errlen) {
  size_t n = strlen(text);
  if (n == 0) {
    snprintf(err, errlen, "the value is empty; accepted: " BAGUA_ID_ACCEPTED);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (n > BAGUA_ID_MAX_LEN) {
    snprintf(err, errlen, "\"%.20s...\" is longer than %d characters; accepted: " BAGUA_ID_ACCEPTED,
             text, BAGUA_ID_MAX_LEN);
    return BAGUA_ERR_INVALID_ARG;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)text[i];
    /* isalnum() would follow the locale; ids must mean the same bytes on every host. */
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
        c == '_' || c == '-')
      continue;
    if (isprint(c))
      snprintf(err, errlen, "\"%s\" contains '%c'; accepted: " BAGUA_ID_ACCEPTED, text, c);
    else
      snprintf(err, errlen, "the value contains byte 0x%02x; accepted: " BAGUA_ID_ACCEPTED, c);
    return BAGUA_ERR_INVALID_ARG;
  }
  /* "." and ".." would turn into path components of the etcd keys and of file names. */
  if (strcmp(text, ".") == 0 || strcmp(text, "..") == 0) {
    snprintf(err, errlen, "\"%s\" is a path component; accepted: " BAGUA_ID_ACCEPTED, text);
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

static bagua_status_t check_nnodes_part(const char *part, const char *whole, int64_t *out,
                                        char *err, size_t errlen) {
  if (parse_int(part, out) != 0) {
    if (*part)
      snprintf(err, errlen, "\"%s\" is not an integer; accepted: " BAGUA_NNODES_ACCEPTED, part);
    else
      snprintf(err, errlen, "\"%s\" has an empty number; accepted: " BAGUA_NNODES_ACCEPTED, whole);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (*out < 1 || *out > BAGUA_NNODES_MAX) {
    snprintf(err, errlen, "%lld is out of range; accepted: " BAGUA_NNODES_ACCEPTED,
             (long long)*out);
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

bagua_status_t bagua__check_nnodes(const char *text, int64_t *min, int64_t *max, char *err,
                                   size_t errlen) {
  char buf[64];
  if (!*text) {
    snprintf(err, errlen, "the value is empty; accepted: " BAGUA_NNODES_ACCEPTED);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (strlen(text) >= sizeof(buf)) {
    snprintf(err, errlen, "the value is too long; accepted: " BAGUA_NNODES_ACCEPTED);
    return BAGUA_ERR_INVALID_ARG;
  }
  /* A second colon is a shape error, not a bad number: say so about the whole value rather
   * than blame the text after the first colon. */
  const char *first = strchr(text, ':');
  if (first && strchr(first + 1, ':')) {
    snprintf(err, errlen, "\"%s\" is not N or MIN:MAX; accepted: " BAGUA_NNODES_ACCEPTED, text);
    return BAGUA_ERR_INVALID_ARG;
  }
  snprintf(buf, sizeof(buf), "%s", text);
  char *colon = strchr(buf, ':');
  if (colon) *colon = '\0';
  int64_t lo = 0, hi = 0;
  if (check_nnodes_part(buf, text, &lo, err, errlen) != BAGUA_OK) return BAGUA_ERR_INVALID_ARG;
  hi = lo;
  if (colon && check_nnodes_part(colon + 1, text, &hi, err, errlen) != BAGUA_OK)
    return BAGUA_ERR_INVALID_ARG;
  if (lo > hi) {
    snprintf(err, errlen,
             "\"%s\" has MIN %lld larger than MAX %lld; accepted: " BAGUA_NNODES_ACCEPTED, text,
             (long long)lo, (long long)hi);
    return BAGUA_ERR_INVALID_ARG;
  }
  *min = lo;
  *max = hi;
  return BAGUA_OK;
}

bagua_status_t bagua__check_host(const char *text, char *err, size_t errlen) {
  /* A remote command (ssh) would read a leading '-' as an option: -oProxyCommand=... */
  if (text[0] == '-') {
    snprintf(err, errlen, "\"%s\" starts with '-'; accepted: " BAGUA_HOST_ACCEPTED, text);
    return BAGUA_ERR_INVALID_ARG;
  }
  for (const char *p = text; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (isalnum(c) || c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']')
      continue;
    if (isprint(c))
      snprintf(err, errlen, "\"%s\" contains '%c'; accepted: " BAGUA_HOST_ACCEPTED, text, c);
    else
      snprintf(err, errlen, "the value contains byte 0x%02x; accepted: " BAGUA_HOST_ACCEPTED, c);
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

bagua_status_t bagua__check_listen_addr(const char *what, const char *text, char *err,
                                        size_t errlen) {
  struct in_addr a;
  if (!text || inet_pton(AF_INET, text, &a) != 1) {
    snprintf(err, errlen, "%s%s\"%s\" is not an IPv4 address; accepted: " BAGUA_LISTEN_ACCEPTED,
             what, *what ? " " : "", text ? text : "");
    return BAGUA_ERR_INVALID_ARG;
  }
  /* 224/4 is multicast; 240/4 is reserved and ends with the limited broadcast address. */
  unsigned first = ntohl(a.s_addr) >> 24;
  if (first >= 224) {
    snprintf(err, errlen,
             "%s%s\"%s\" is a %s address, which no client can connect to; "
             "accepted: " BAGUA_LISTEN_ACCEPTED,
             what, *what ? " " : "", text, first < 240 ? "multicast" : "broadcast or reserved");
    return BAGUA_ERR_INVALID_ARG;
  }
  return BAGUA_OK;
}

/* The part of an endpoint after its http:// or https:// scheme, if any. */
static const char *skip_scheme(const char *ep) {
  if (strncmp(ep, "http://", 7) == 0) return ep + 7;
  if (strncmp(ep, "https://", 8) == 0) return ep + 8;
  return ep;
}

bagua_status_t bagua__check_endpoints(const char *text, char *err, size_t errlen) {
  const char *p = text;
  for (;;) {
    size_t len = strcspn(p, ",");
    char one[256], host[256], what[256];
    if (len == 0) {
      snprintf(err, errlen, "\"%s\" has an empty entry; accepted: " BAGUA_ENDPOINTS_ACCEPTED, text);
      return BAGUA_ERR_INVALID_ARG;
    }
    if (len >= sizeof(one)) {
      snprintf(err, errlen,
               "an entry is longer than %zu characters; accepted: " BAGUA_ENDPOINTS_ACCEPTED,
               sizeof(one) - 1);
      return BAGUA_ERR_INVALID_ARG;
    }
    memcpy(one, p, len);
    one[len] = '\0';
    const char *hp = skip_scheme(one);
    const char *colon = strrchr(hp, ':');
    int64_t port;
    if (!colon || colon == hp) {
      snprintf(err, errlen, "\"%s\" has no %s; accepted: " BAGUA_ENDPOINTS_ACCEPTED, one,
               colon ? "host" : "port");
      return BAGUA_ERR_INVALID_ARG;
    }
    snprintf(host, sizeof(host), "%.*s", (int)(colon - hp), hp);
    if (bagua__check_host(host, what, sizeof(what)) != BAGUA_OK) {
      snprintf(err, errlen, "\"%s\" has a malformed host; accepted: " BAGUA_ENDPOINTS_ACCEPTED,
               one);
      return BAGUA_ERR_INVALID_ARG;
    }
    if (parse_int(colon + 1, &port) != 0 || port < 1 || port > 65535) {
      snprintf(err, errlen,
               "\"%s\" has port \"%s\"; accepted: " BAGUA_ENDPOINTS_ACCEPTED
               " with PORT in [1, 65535]",
               one, colon + 1);
      return BAGUA_ERR_INVALID_ARG;
    }
    p += len;
    if (*p == '\0') return BAGUA_OK;
    p++; /* the comma; an empty entry after it is reported on the next turn */
  }
}

bagua_status_t bagua__endpoint_first(const char *endpoints, char *host, size_t hostlen,
                                     uint16_t *port, char *err, size_t errlen) {
  char one[256];
  /* Any scheme of the first entry is skipped (the etcd client adds http:// when there is
   * none); a "://" in a later entry belongs to that entry. */
  const char *ep = endpoints;
  size_t first = strcspn(endpoints, ",");
  for (size_t i = 0; i + 3 <= first; i++) {
    if (memcmp(endpoints + i, "://", 3) != 0) continue;
    ep = endpoints + i + 3;
    break;
  }
  size_t n = strcspn(ep, ",/");
  if (n == 0 || n >= sizeof(one)) {
    snprintf(err, errlen, "endpoint \"%.200s\" has %s; accepted: " BAGUA_ENDPOINTS_ACCEPTED,
             endpoints, n == 0 ? "no host" : "an entry that is too long");
    return BAGUA_ERR_INVALID_ARG;
  }
  memcpy(one, ep, n);
  one[n] = '\0';
  int64_t p = BAGUA_ETCD_DEFAULT_PORT;
  char *colon = strrchr(one, ':');
  if (colon) {
    if (parse_int(colon + 1, &p) != 0 || p < 1 || p > 65535) {
      snprintf(err, errlen,
               "endpoint \"%s\" has port \"%s\"; accepted: " BAGUA_ENDPOINTS_ACCEPTED
               " with PORT in [1, 65535]",
               one, colon + 1);
      return BAGUA_ERR_INVALID_ARG;
    }
    *colon = '\0';
  }
  if (!one[0]) {
    snprintf(err, errlen, "endpoint \"%.200s\" has no host; accepted: " BAGUA_ENDPOINTS_ACCEPTED,
             endpoints);
    return BAGUA_ERR_INVALID_ARG;
  }
  snprintf(host, hostlen, "%s", one);
  *port = (uint16_t)p;
  return BAGUA_OK;
}

void bagua__list_choices(const char *choices, char *out, size_t len) {
  size_t n = 0, words = 1;
  for (const char *p = choices; *p; p++) words += *p == '|';
  out[0] = '\0';
  for (const char *p = choices; *p && n + 1 < len;) {
    size_t w = strcspn(p, "|");
    const char *sep = --words == 0 ? "" : words == 1 ? " or " : ", ";
    int k = snprintf(out + n, len - n, "%.*s%s", (int)w, p, sep);
    if (k < 0) break;
    n += (size_t)k;
    p += w;
    if (*p == '|') p++;
  }
}

/* ASCII only: the C library's tolower() follows the locale, and a word must mean the same
 * bytes on every host. */
static int ascii_lower(unsigned char c) {
  return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

const char *bagua__choice_find(const char *choices, const char *text, size_t n) {
  if (n == 0) return NULL;
  for (const char *p = choices; *p;) {
    size_t w = strcspn(p, "|");
    if (w == n) {
      size_t i = 0;
      while (i < n && ascii_lower((unsigned char)p[i]) == ascii_lower((unsigned char)text[i])) i++;
      if (i == n) return p;
    }
    p += w;
    if (*p == '|') p++;
  }
  return NULL;
}

bagua_status_t bagua__choice_parse(const char *text, const char *choices, char *word,
                                   size_t wordlen, char *err, size_t errlen) {
  size_t n = strlen(text);
  const char *match = bagua__choice_find(choices, text, n);
  if (match && word && n >= wordlen) {
    /* The caller's buffer is too small for a word of its own list: a bug, said as such. */
    snprintf(err, errlen, "\"%s\" does not fit the caller's %zu-byte buffer; accepted: %zu bytes",
             text, wordlen, n + 1);
    return BAGUA_ERR_INVALID_ARG;
  }
  if (match) {
    if (word) snprintf(word, wordlen, "%.*s", (int)n, match);
    return BAGUA_OK;
  }
  char list[256];
  bagua__list_choices(choices, list, sizeof(list));
  if (!*text)
    snprintf(err, errlen, "the value is empty; accepted: %s", list);
  else
    snprintf(err, errlen, "\"%s\" is invalid; accepted: %s", text, list);
  return BAGUA_ERR_INVALID_ARG;
}

bagua_status_t bagua__check_choice(const char *text, const char *choices, char *err,
                                   size_t errlen) {
  return bagua__choice_parse(text, choices, NULL, 0, err, errlen);
}

bagua_status_t bagua__std_mask(const char *text, int local_rank, int *mask, int *any, char *err,
                               size_t errlen) {
  int m = 0, a = 0;
  const char *p = text;
  if (p[0] >= '0' && p[0] <= '3' && !p[1]) {
    m = a = p[0] - '0';
  } else {
    if (!*p) goto bad;
    while (*p) {
      if (*p < '0' || *p > '9') goto bad;
      long r = 0;
      while (*p >= '0' && *p <= '9' && r < 1000000) r = r * 10 + (*p++ - '0');
      if (*p++ != ':' || *p < '0' || *p > '3') goto bad;
      int v = *p++ - '0';
      a |= v;
      if (r == local_rank) m = v;
      if (*p == ',' && p[1]) {
        p++;
      } else if (*p) {
        goto bad;
      }
    }
  }
  if (mask) *mask = m;
  if (any) *any = a != 0;
  return BAGUA_OK;
bad:
  snprintf(err, errlen, "\"%.100s\"; accepted: %s", text, BAGUA_STD_ACCEPTED);
  return BAGUA_ERR_INVALID_ARG;
}
