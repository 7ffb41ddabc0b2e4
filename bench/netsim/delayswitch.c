/*
 * netsim-delayswitch: a userspace switch that adds latency to the links of an emulated cluster
 * (bench/netsim/netsim.sh --delay). This kernel has neither the netem qdisc nor fq, so tc cannot
 * delay packets; this program does it instead.
 *
 *   netsim-delayswitch --ns NS1,NS2,... [--prefix 198.18.0] [--delay-ms 0] [--rate 1gbit]
 *                      [--mtu 9000] [--queue-bytes N] [--ready-file PATH]
 *
 * For host I (the I-th name of --ns, a namespace under /var/run/netns as `ip netns add` makes
 * them) it creates a TUN device eth0 inside that namespace, with address PREFIX.I/24, the MTU
 * and the link up. It then reads the IPv4 packets every host sends and delivers each one to the
 * host that owns its destination address, after:
 *   1. the sending host's link has serialised it at the rate (one clock per host, its egress),
 *   2. the switch port towards the destination has serialised it at the rate (one clock per
 *      host, its ingress), so two senders to one receiver share the receiver's rate, and
 *   3. the one-way delay has passed.
 * A packet that would wait behind more than --queue-bytes at either port is dropped (drop-tail),
 * as a switch or a qdisc with a byte limit would drop it. The default limit is the larger of
 * 1 MiB and twice the bandwidth-delay product (rate x round-trip time).
 *
 * One thread relays every packet (ppoll, a read, a copy, a write), so its CPU time bounds the
 * rate it can carry. TUN devices have no offloads on these kernels: every packet is at most the
 * MTU. The 9000-byte default (jumbo frames) keeps 1 Gbit/s at about 14 000 data packets a
 * second; 1500 would be six times as many. On the 2-vCPU development machine the switch used
 * 40-50 % of one vCPU at 1 Gbit/s (kernel time in its TUN reads and writes included), and
 * carried about 0.9-1.1 GB/s one way at most (docs/results/2026-11-26-net-plugin-delay.md).
 *
 * It runs at a real-time priority (SCHED_FIFO 10) where it may, so that busy hosts on the same
 * CPUs do not hold packets back; the counters it prints at exit say how late packets left.
 *
 * When every device is up, it writes its pid to --ready-file (atomically, through a rename). It
 * stops on SIGTERM or SIGINT and prints its counters to stderr. The TUN devices are not
 * persistent: they disappear with the process. Exit status: 0 after a signal, 1 on a system
 * error, 2 on a bad argument.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_HOSTS 254 /* PREFIX.1 .. PREFIX.254 */
#define READ_BATCH 32 /* packets read from one host per wake-up, so no host starves another */
#define IFNAME "eth0"

/* A packet on its way to a host. Each host's packets are due in the order they were queued,
 * because the host's ingress clock only moves forward and the delay is the same for all. */
typedef struct pkt {
  struct pkt *next;
  uint64_t due_ns; /* when the destination receives it */
  uint32_t len;
  unsigned char data[];
} pkt_t;

typedef struct {
  const char *ns;
  int fd;
  uint64_t egress_ns;  /* when the host's own link finishes serialising what it has sent */
  uint64_t ingress_ns; /* when the switch port towards the host finishes what it has queued */
  pkt_t *head, *tail;
  uint64_t sent_pkts, sent_bytes, recv_pkts, recv_bytes, drop_egress, drop_ingress;
} host_t;

static host_t hosts[MAX_HOSTS];
static int nhosts;
static unsigned char prefix[3] = {198, 18, 0};
static uint64_t rate_bps = 1000000000ull, delay_ns, queue_bytes;
static uint64_t queue_ns; /* queue_bytes at the rate: the longest wait a port may have queued */
static int mtu = 9000;
static uint64_t drop_unknown, drop_not_ipv4, write_errors;
/* How late packets leave the switch against their due time: a switch short of CPU adds delay
 * and jitter that the model does not ask for, and these show it. */
static uint64_t late_sum_ns, late_max_ns, late_1ms, delivered;
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
  stop_signal = sig;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t serialise_ns(uint64_t bytes) {
  return bytes * 8000000000ull / rate_bps;
}

static _Noreturn void bad_arg(const char *flag, const char *value, const char *accepted) {
  fprintf(stderr, "netsim-delayswitch: %s \"%s\": accepted %s\n", flag, value, accepted);
  exit(2);
}

/* A decimal number with an optional fraction, e.g. "25" or "0.5"; -1 when it is not one. */
static double parse_decimal(const char *s) {
  char *end;
  /* Digits and one point only: strtod() alone would also take "1e3", "0x10" or "inf". */
  if (!*s || !strchr("0123456789", s[0]) || strspn(s, "0123456789.") != strlen(s)) return -1;
  double v = strtod(s, &end);
  return *end ? -1 : v;
}

static uint64_t parse_rate(const char *s) {
  const char *accepted = "a number with kbit, mbit or gbit, from 1kbit to 1000gbit (e.g. 1gbit)";
  char num[32];
  size_t n = strspn(s, "0123456789.");
  if (n == 0 || n >= sizeof(num)) bad_arg("--rate", s, accepted);
  memcpy(num, s, n);
  num[n] = 0;
  double v = parse_decimal(num), unit = 0;
  if (strcmp(s + n, "kbit") == 0) unit = 1e3;
  if (strcmp(s + n, "mbit") == 0) unit = 1e6;
  if (strcmp(s + n, "gbit") == 0) unit = 1e9;
  if (v < 0 || unit == 0 || v * unit < 1e3 || v * unit > 1e12) bad_arg("--rate", s, accepted);
  return (uint64_t)(v * unit);
}

/* A byte count, optionally with K, M or G (powers of 1024). */
static uint64_t parse_bytes(const char *flag, const char *s, uint64_t lo, uint64_t hi,
                            const char *accepted) {
  char *end;
  if (!*s || !strchr("0123456789", s[0])) bad_arg(flag, s, accepted);
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
  if (shift) end++;
  if (errno || *end || v > (hi >> shift) || (v << shift) < lo) bad_arg(flag, s, accepted);
  return (uint64_t)v << shift;
}

/* The names are cut out of a copy: argv stays as it was, so `ps` and netsim.sh (which checks
 * a pid's command line before it stops a switch) see the list as given. */
static char *ns_names;

static void parse_ns_list(const char *list) {
  const char *accepted =
      "1 to 254 comma-separated names of /var/run/netns (letters, digits, "
      "'_', '-', '.'; not \".\" or \"..\")";
  const char *chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.";
  free(ns_names);
  char *rest = ns_names = strdup(list);
  if (!ns_names) exit(1);
  nhosts = 0;
  for (char *n; (n = strsep(&rest, ","));) {
    size_t len = strlen(n);
    if (nhosts == MAX_HOSTS || len == 0 || len > 64 || strspn(n, chars) != len ||
        strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
      bad_arg("--ns", list, accepted);
    hosts[nhosts++].ns = n;
  }
}

static void parse_args(int argc, char **argv, const char **ready_file) {
  const char *queue = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fprintf(stderr,
              "usage: netsim-delayswitch --ns NS1,NS2,... [--prefix 198.18.0] [--delay-ms 0] "
              "[--rate 1gbit] [--mtu 9000] [--queue-bytes N] [--ready-file PATH]\n");
      exit(0);
    }
    if (strcmp(a, "--ns") && strcmp(a, "--prefix") && strcmp(a, "--delay-ms") &&
        strcmp(a, "--rate") && strcmp(a, "--mtu") && strcmp(a, "--queue-bytes") &&
        strcmp(a, "--ready-file"))
      bad_arg("argument", a,
              "--ns, --prefix, --delay-ms, --rate, --mtu, --queue-bytes, "
              "--ready-file, --help");
    if (i + 1 == argc) bad_arg(a, "", "a value after the flag");
    const char *v = argv[++i];
    if (strcmp(a, "--ns") == 0) {
      parse_ns_list(v);
    } else if (strcmp(a, "--prefix") == 0) {
      unsigned o[3];
      char tail;
      if (sscanf(v, "%3u.%3u.%3u%c", &o[0], &o[1], &o[2], &tail) != 3 || o[0] > 255 || o[1] > 255 ||
          o[2] > 255 || !strchr("0123456789", v[0]))
        bad_arg(a, v, "the first three octets of an IPv4 address (e.g. 198.18.0)");
      for (int k = 0; k < 3; k++) prefix[k] = (unsigned char)o[k];
    } else if (strcmp(a, "--delay-ms") == 0) {
      double d = parse_decimal(v);
      if (d < 0 || d > 10000) bad_arg(a, v, "a number of milliseconds from 0 to 10000");
      delay_ns = (uint64_t)(d * 1e6 + 0.5);
    } else if (strcmp(a, "--rate") == 0) {
      rate_bps = parse_rate(v);
    } else if (strcmp(a, "--mtu") == 0) {
      mtu = (int)parse_bytes(a, v, 576, 65535, "a whole number of bytes from 576 to 65535");
    } else if (strcmp(a, "--queue-bytes") == 0) {
      queue = v; /* checked below, once the MTU is known */
    } else {
      *ready_file = v;
    }
  }
  if (nhosts == 0) bad_arg("--ns", "", "1 to 254 comma-separated namespace names (required)");
  if (queue) {
    queue_bytes = parse_bytes("--queue-bytes", queue, (uint64_t)mtu, 1ull << 30,
                              "a byte count (K, M, G allowed) from the MTU to 1G");
  } else {
    /* Twice the bandwidth-delay product keeps a loss-based TCP from seeing drops before it
     * has filled the pipe; 1 MiB covers the bursts of short links. */
    uint64_t bdp = rate_bps / 8 * (2 * delay_ns) / 1000000000ull;
    queue_bytes = 2 * bdp > (1u << 20) ? 2 * bdp : (1u << 20);
  }
  queue_ns = serialise_ns(queue_bytes);
}

/* Creates host h's TUN device inside its namespace and configures it there. The fd keeps the
 * device in the namespace it was created in, so the caller can go back to its own afterwards. */
static int open_host(int i, int home_ns) {
  host_t *h = &hosts[i];
  char path[128];
  snprintf(path, sizeof(path), "/var/run/netns/%s", h->ns);
  int nsfd = open(path, O_RDONLY | O_CLOEXEC);
  if (nsfd < 0) {
    fprintf(stderr, "netsim-delayswitch: cannot open %s: %s (create it with `ip netns add %s`)\n",
            path, strerror(errno), h->ns);
    return -1;
  }
  int rc = setns(nsfd, CLONE_NEWNET);
  close(nsfd);
  if (rc != 0) {
    fprintf(stderr, "netsim-delayswitch: cannot enter %s: %s (this needs root)\n", path,
            strerror(errno));
    return -1;
  }
  int ok = 0, sock = -1;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof(ifr));
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", IFNAME);
  h->fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (h->fd < 0 || ioctl(h->fd, TUNSETIFF, &ifr) != 0) {
    fprintf(stderr, "netsim-delayswitch: cannot create TUN device %s in %s: %s\n", IFNAME, h->ns,
            strerror(errno));
    goto out;
  }
  /* The address, the MTU and the up flag are set here rather than by the script, so that the
   * ready file means the links are usable. */
  sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in *sa = (struct sockaddr_in *)&ifr.ifr_addr;
  const char *step = "socket";
  if (sock < 0) goto fail;
  step = "MTU";
  ifr.ifr_mtu = mtu;
  if (ioctl(sock, SIOCSIFMTU, &ifr) != 0) goto fail;
  step = "address";
  memset(sa, 0, sizeof(*sa));
  sa->sin_family = AF_INET;
  unsigned char addr[4] = {prefix[0], prefix[1], prefix[2], (unsigned char)(i + 1)};
  memcpy(&sa->sin_addr, addr, 4);
  if (ioctl(sock, SIOCSIFADDR, &ifr) != 0) goto fail;
  step = "netmask";
  sa->sin_addr.s_addr = htonl(0xffffff00u);
  if (ioctl(sock, SIOCSIFNETMASK, &ifr) != 0) goto fail;
  step = "up flag";
  if (ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) goto fail;
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(sock, SIOCSIFFLAGS, &ifr) != 0) goto fail;
  ok = 1;
  goto out;
fail:
  fprintf(stderr, "netsim-delayswitch: cannot set the %s of %s in %s: %s\n", step, IFNAME, h->ns,
          strerror(errno));
out:
  if (sock >= 0) close(sock);
  if (setns(home_ns, CLONE_NEWNET) != 0) {
    fprintf(stderr, "netsim-delayswitch: cannot return to its own namespace: %s\n",
            strerror(errno));
    ok = 0;
  }
  return ok ? 0 : -1;
}

/* Routes one packet host src has just sent (at time now) and queues it for its destination,
 * or drops it. */
static void forward(int src, const unsigned char *data, uint32_t len, uint64_t now) {
  if (len < 20 || data[0] >> 4 != 4) { /* IPv6 router solicitations and the like */
    drop_not_ipv4++;
    return;
  }
  const unsigned char *dst_addr = data + 16;
  int dst = dst_addr[3] - 1;
  if (memcmp(dst_addr, prefix, 3) != 0 || dst < 0 || dst >= nhosts) {
    drop_unknown++;
    return;
  }
  host_t *s = &hosts[src], *d = &hosts[dst];
  uint64_t ser = serialise_ns(len), qlimit = queue_ns;
  s->sent_pkts++;
  s->sent_bytes += len;
  /* The host's link: the packet starts when the link is free, and is lost when the backlog
   * before it is over the limit. A TUN device takes packets as fast as they are written, so
   * this queue is what a qdisc on a real host's slower NIC would hold. */
  uint64_t start = s->egress_ns > now ? s->egress_ns : now;
  if (start - now > qlimit) {
    s->drop_egress++;
    return;
  }
  s->egress_ns = start + ser;
  /* The switch port towards the destination, from the moment the last bit has arrived. */
  uint64_t arrived = s->egress_ns;
  uint64_t istart = d->ingress_ns > arrived ? d->ingress_ns : arrived;
  if (istart - arrived > qlimit) {
    d->drop_ingress++;
    return;
  }
  d->ingress_ns = istart + ser;
  pkt_t *p = malloc(sizeof(*p) + len);
  if (!p) {
    d->drop_ingress++;
    return;
  }
  p->next = NULL;
  p->due_ns = d->ingress_ns + delay_ns;
  p->len = len;
  memcpy(p->data, data, len);
  if (d->tail)
    d->tail->next = p;
  else
    d->head = p;
  d->tail = p;
}

/* Writes every packet that is due by now; returns the earliest time still pending, or 0. */
static uint64_t deliver(uint64_t now) {
  uint64_t next = 0;
  for (int i = 0; i < nhosts; i++) {
    host_t *h = &hosts[i];
    while (h->head && h->head->due_ns <= now) {
      pkt_t *p = h->head;
      h->head = p->next;
      if (!h->head) h->tail = NULL;
      uint64_t late = now - p->due_ns;
      late_sum_ns += late;
      late_max_ns = late > late_max_ns ? late : late_max_ns;
      late_1ms += late > 1000000;
      delivered++;
      /* A write to a TUN device hands the packet to the namespace's stack at once; it fails
       * only when the kernel is short of memory, which a real link would show as a loss. */
      if (write(h->fd, p->data, p->len) == (ssize_t)p->len) {
        h->recv_pkts++;
        h->recv_bytes += p->len;
      } else {
        write_errors++;
      }
      free(p);
    }
    if (h->head && (next == 0 || h->head->due_ns < next)) next = h->head->due_ns;
  }
  return next;
}

static void print_counters(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
               ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) * 1e-6;
  for (int i = 0; i < nhosts; i++) {
    host_t *h = &hosts[i];
    fprintf(stderr,
            "netsim-delayswitch: %s: sent %llu packets %llu bytes, received %llu packets %llu "
            "bytes, dropped %llu at its link, %llu at its switch port\n",
            h->ns, (unsigned long long)h->sent_pkts, (unsigned long long)h->sent_bytes,
            (unsigned long long)h->recv_pkts, (unsigned long long)h->recv_bytes,
            (unsigned long long)h->drop_egress, (unsigned long long)h->drop_ingress);
  }
  fprintf(stderr,
          "netsim-delayswitch: dropped %llu to unknown destinations, %llu not IPv4, %llu failed "
          "writes; %.2f s of CPU\n",
          (unsigned long long)drop_unknown, (unsigned long long)drop_not_ipv4,
          (unsigned long long)write_errors, cpu);
  fprintf(stderr,
          "netsim-delayswitch: packets left %.1f us after their due time on average, %.1f us at "
          "most; %llu more than 1 ms late\n",
          delivered ? (double)late_sum_ns / (double)delivered / 1e3 : 0.0,
          (double)late_max_ns / 1e3, (unsigned long long)late_1ms);
}

static int write_ready_file(const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
    fprintf(stderr, "netsim-delayswitch: cannot write the ready file %s: %s\n", path,
            strerror(errno));
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *ready_file = NULL;
  parse_args(argc, argv, &ready_file);

  /* The signals are blocked except inside ppoll(), so a SIGTERM can only end the wait, never
   * interrupt a half-done step, and none is lost between the check and the wait. */
  sigset_t block, waitmask;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigprocmask(SIG_BLOCK, &block, &waitmask);
  sigdelset(&waitmask, SIGTERM);
  sigdelset(&waitmask, SIGINT);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  /* The default timer slack (50 us) would add up to one 9000-byte packet time at 1 Gbit/s to
   * every wake-up; 1 us keeps the delivery times close to the model. */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  /* The hosts' processes share this machine's CPUs, and some poll (NCCL's proxy thread and
   * netplugin-bench spin with sched_yield). At normal priority they delayed packets by up to
   * 45 ms on 2 vCPUs (average 0.3 ms); with a real-time priority the switch runs when a packet
   * is due (average 22 us late). It sleeps in ppoll() otherwise, so this costs no extra CPU. */
  struct sched_param sp = {.sched_priority = 10};
  if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0)
    fprintf(stderr,
            "netsim-delayswitch: no real-time priority (%s): packets may leave late when the "
            "CPUs are busy (the counters at exit say how late)\n",
            strerror(errno));

  int status = 1, started = 0;
  struct pollfd pfd[MAX_HOSTS];
  unsigned char *buf = malloc(65536);
  int home_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  for (int i = 0; i < nhosts; i++) hosts[i].fd = -1;
  if (!buf || home_ns < 0) {
    fprintf(stderr, "netsim-delayswitch: cannot start: %s\n", strerror(errno));
    goto out;
  }
  for (int i = 0; i < nhosts; i++) {
    if (open_host(i, home_ns) != 0) goto out;
    pfd[i].fd = hosts[i].fd;
    pfd[i].events = POLLIN;
  }
  if (ready_file && write_ready_file(ready_file) != 0) goto out;
  started = 1;

  while (!stop_signal) {
    uint64_t now = now_ns(), next = deliver(now);
    struct timespec ts, *timeout = NULL;
    if (next) {
      uint64_t wait = next > now ? next - now : 0;
      ts.tv_sec = (time_t)(wait / 1000000000ull);
      ts.tv_nsec = (long)(wait % 1000000000ull);
      timeout = &ts;
    }
    int n = ppoll(pfd, (nfds_t)nhosts, timeout, &waitmask);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      fprintf(stderr, "netsim-delayswitch: ppoll: %s\n", strerror(errno));
      goto out;
    }
    now = now_ns();
    for (int i = 0; i < nhosts && n > 0; i++) {
      if (!pfd[i].revents) continue;
      for (int k = 0; k < READ_BATCH; k++) {
        ssize_t len = read(hosts[i].fd, buf, 65536);
        if (len < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (len < 0) {
          fprintf(stderr, "netsim-delayswitch: reading %s of %s: %s\n", IFNAME, hosts[i].ns,
                  strerror(errno));
          goto out;
        }
        forward(i, buf, (uint32_t)len, now);
      }
    }
  }
  status = 0;
out:
  if (started) print_counters();
  for (int i = 0; i < nhosts; i++) {
    while (hosts[i].head) {
      pkt_t *p = hosts[i].head;
      hosts[i].head = p->next;
      free(p);
    }
    if (hosts[i].fd >= 0) close(hosts[i].fd);
  }
  if (home_ns >= 0) close(home_ns);
  if (ready_file) unlink(ready_file);
  free(buf);
  free(ns_names);
  return status;
}
