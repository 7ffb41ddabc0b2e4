/*
 * Host lists: --hosts h1:2,h2:2, --hostfile FILE and the [hosts] section all end up here.
 *
 * Each entry starts one agent. A host listed twice gets two agents (two emulated nodes), which
 * is how the tests run multi-node jobs on one machine.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/file.h"
#include "launch.h"

#define HOSTS_ACCEPTED "HOST[:NPROC][,HOST[:NPROC]...] with NPROC in [1, 4096]"
#define HOSTFILE_ACCEPTED \
  "one \"HOST[:NPROC]\" or \"HOST slots=NPROC\" per line, NPROC in [1, 4096], # comments"

/* Checks a host name for an entry: no separators, no blanks, not empty. */
int bagua__launch_check_host_name(const char *name, char *err, size_t errlen) {
  if (!*name) {
    snprintf(err, errlen, "the host name is empty");
    return -1;
  }
  /* ssh (and most remote commands) would read it as an option, e.g. -oProxyCommand=... */
  if (*name == '-') {
    snprintf(err, errlen, "host name \"%s\" starts with '-'", name);
    return -1;
  }
  for (const char *p = name; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (isalnum(c) || c == '.' || c == '-' || c == '_') continue;
    if (isprint(c))
      snprintf(err, errlen, "host name \"%s\" contains '%c'", name, c);
    else
      snprintf(err, errlen, "host name contains byte 0x%02x", c);
    return -1;
  }
  return 0;
}

int bagua__launch_check_slots(const char *text, int *out, char *err, size_t errlen) {
  /* strtol skips leading blanks; we do not, so a blank first character ends the number
   * right there (end == text), as does an empty text. */
  char *end = (char *)text;
  errno = 0;
  long v = (*text && !isspace((unsigned char)*text)) ? strtol(text, &end, 10) : 0;
  if (end == text || errno != 0 || *end != '\0') {
    snprintf(err, errlen, "slot count \"%s\" is not an integer", text);
    return -1;
  }
  if (v < 1 || v > LAUNCH_MAX_NPROC) {
    snprintf(err, errlen, "slot count %ld is out of range", v);
    return -1;
  }
  *out = (int)v;
  return 0;
}

int bagua__launch_add_host(bagua__launch_layer_t *l, const char *name, const char *nproc,
                           const bagua__launch_origin_t *origin, char *err, size_t errlen) {
  int n = 0;
  if (bagua__launch_check_host_name(name, err, errlen) != 0) return -1;
  if (nproc && bagua__launch_check_slots(nproc, &n, err, errlen) != 0) return -1;
  bagua__launch_host_t *nh = realloc(l->hosts, sizeof(*nh) * (size_t)(l->nhosts + 1));
  if (!nh) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  l->hosts = nh;
  bagua__launch_host_t *h = &l->hosts[l->nhosts];
  memset(h, 0, sizeof(*h));
  h->name = strdup(name);
  if (!h->name) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  h->nproc = n;
  h->origin = *origin;
  l->nhosts++;
  l->hosts_set = 1;
  return 0;
}

/* Drops the hosts a failed parse added, so a layer never holds half a list. */
static void drop_hosts(bagua__launch_layer_t *l, int keep) {
  for (int i = keep; i < l->nhosts; i++) free(l->hosts[i].name);
  l->nhosts = keep;
  if (keep == 0) l->hosts_set = 0;
}

int bagua__launch_parse_hosts(const char *text, bagua__launch_layer_t *l, char *err,
                              size_t errlen) {
  bagua__launch_origin_t origin;
  bagua__launch_origin_set(&origin, LO_FLAG, "--hosts");
  int keep = l->nhosts, index = 0;
  const char *p = text;
  char what[512];
  if (!*text) {
    snprintf(err, errlen, "the value is empty; accepted: " HOSTS_ACCEPTED);
    return -1;
  }
  for (;;) {
    size_t len = strcspn(p, ",");
    char entry[300];
    index++;
    if (len >= sizeof(entry)) {
      snprintf(err, errlen, "entry %d is longer than %zu characters; accepted: " HOSTS_ACCEPTED,
               index, sizeof(entry) - 1);
      goto fail;
    }
    memcpy(entry, p, len);
    entry[len] = '\0';
    if (len == 0) {
      snprintf(err, errlen, "entry %d is empty; accepted: " HOSTS_ACCEPTED, index);
      goto fail;
    }
    char *colon = strchr(entry, ':');
    if (colon) *colon = '\0';
    if (bagua__launch_add_host(l, entry, colon ? colon + 1 : NULL, &origin, what, sizeof(what)) !=
        0) {
      if (colon) *colon = ':';
      snprintf(err, errlen, "entry %d \"%s\": %s; accepted: " HOSTS_ACCEPTED, index, entry, what);
      goto fail;
    }
    p += len;
    if (!*p) break;
    p++;
  }
  l->hosts_origin = origin;
  return 0;
fail:
  drop_hosts(l, keep);
  return -1;
}

/* Trims blanks at both ends in place. */
static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

int bagua__launch_read_hostfile(const char *path, bagua__launch_layer_t *l, char *err,
                                size_t errlen) {
  char opened[600];
  /* Opened without blocking: a FIFO would hold bagua-launch in open(). */
  int fd = bagua__open_regular(path, O_RDONLY, 0, opened, sizeof(opened));
  FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
  if (!f) {
    int e = errno;
    if (fd >= 0) close(fd);
    /* EINVAL and EISDIR: it opened, but is no regular file (`opened` says what it is). */
    if (e == EINVAL || e == EISDIR)
      snprintf(err, errlen, "%s; accepted: a readable regular file with " HOSTFILE_ACCEPTED,
               opened);
    else
      snprintf(
          err, errlen,
          "%s: cannot open the hostfile: %s; accepted: a readable file with " HOSTFILE_ACCEPTED,
          path, strerror(e));
    return -1;
  }
  int keep = l->nhosts, lineno = 0, rc = -1;
  char *line = NULL;
  size_t cap = 0;
  char what[512];
  while (getline(&line, &cap, f) >= 0) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *s = trim(line);
    if (!*s) continue;
    bagua__launch_origin_t origin;
    bagua__launch_origin_set(&origin, LO_FLAG, "%s:%d", path, lineno);
    /* "host slots=N" (MPI and DeepSpeed hostfiles) or "host[:N]". */
    char *name = s, *nproc = NULL;
    char *blank = s + strcspn(s, " \t");
    if (*blank) {
      *blank = '\0';
      char *rest = trim(blank + 1);
      if (strncmp(rest, "slots=", 6) != 0 || strpbrk(rest, " \t")) {
        snprintf(err, errlen, "%s:%d: \"%s\" is not understood; accepted: " HOSTFILE_ACCEPTED, path,
                 lineno, rest);
        goto out;
      }
      nproc = rest + 6;
    } else {
      char *colon = strchr(s, ':');
      if (colon) {
        *colon = '\0';
        nproc = colon + 1;
      }
    }
    if (bagua__launch_add_host(l, name, nproc, &origin, what, sizeof(what)) != 0) {
      snprintf(err, errlen, "%s:%d: %s; accepted: " HOSTFILE_ACCEPTED, path, lineno, what);
      goto out;
    }
  }
  if (ferror(f)) {
    snprintf(err, errlen, "%s: cannot read the hostfile: %s", path, strerror(errno));
    goto out;
  }
  if (l->nhosts == keep) {
    snprintf(err, errlen, "%s: the hostfile lists no hosts; accepted: " HOSTFILE_ACCEPTED, path);
    goto out;
  }
  bagua__launch_origin_set(&l->hosts_origin, LO_FLAG, "--hostfile %s", path);
  rc = 0;
out:
  if (rc != 0) drop_hosts(l, keep);
  free(line);
  fclose(f);
  return rc;
}

int bagua__launch_host_is_local(const char *name) {
  if (strcmp(name, "localhost") == 0 || strcmp(name, "localhost.localdomain") == 0 ||
      strncmp(name, "127.", 4) == 0 || strcmp(name, "::1") == 0)
    return 1;
  char self[256];
  if (gethostname(self, sizeof(self)) == 0) {
    self[sizeof(self) - 1] = '\0';
    if (strcmp(name, self) == 0) return 1;
    /* "node1" matches "node1.cluster.example" and the other way round. */
    size_t a = strcspn(name, "."), b = strcspn(self, ".");
    if (a == b && strncmp(name, self, a) == 0 && (name[a] == '\0' || self[b] == '\0')) return 1;
  }
  /* One of this machine's own IPv4 addresses. */
  struct in_addr want;
  if (inet_pton(AF_INET, name, &want) != 1) return 0;
  struct ifaddrs *ifs = NULL;
  int found = 0;
  if (getifaddrs(&ifs) != 0) return 0;
  for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    found = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == want.s_addr;
  }
  freeifaddrs(ifs);
  return found;
}
