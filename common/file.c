/* Opening named files without blocking, and reserving space before a mapping (file.h). */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *bagua__file_kind(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

int bagua__open_regular(const char *path, int flags, mode_t mode, char *err, size_t errlen) {
  int fd;
  /* O_NONBLOCK makes open() of a FIFO return at once (for reading) or fail with ENXIO (for
   * writing, no reader) instead of waiting for the other end; on a regular file it changes
   * nothing, and it is cleared below before anyone reads. */
  do {
    fd = open(path, flags | O_CLOEXEC | O_NONBLOCK, mode);
  } while (fd < 0 && errno == EINTR);
  struct stat st;
  if (fd < 0) {
    int e = errno;
    /* A FIFO opened for writing with no reader: say what it is, not "no such device". */
    if (e == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) goto not_regular;
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
    errno = e;
    return -1;
  }
  if (fstat(fd, &st) != 0) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot stat it: %s", path, strerror(e));
    close(fd);
    errno = e;
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    goto not_regular;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int e = errno;
    snprintf(err, errlen, "%s: fcntl failed: %s", path, strerror(e));
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
not_regular:
  snprintf(err, errlen, "%s: it is %s, not a regular file", path, bagua__file_kind(st.st_mode));
  errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
  return -1;
}

int bagua__reserve_space(int fd, off_t len) {
  /* posix_fallocate returns the error number; it does not set errno. */
  int e;
  do {
    e = posix_fallocate(fd, 0, len);
  } while (e == EINTR);
  if (e != EOPNOTSUPP && e != EINVAL && e != ENOSYS) return e;
  /* No fallocate here (glibc emulates it, other C libraries may not): rewrite the range with
   * its own bytes (zeros past the end), which allocates every block of it just as well,
   * holes included, and changes no byte that is there. */
  char buf[4096];
  for (off_t off = 0; off < len;) {
    size_t n = (size_t)(len - off) < sizeof(buf) ? (size_t)(len - off) : sizeof(buf);
    ssize_t r = pread(fd, buf, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    memset(buf + r, 0, n - (size_t)r);
    ssize_t w = pwrite(fd, buf, n, off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    off += w;
  }
  return 0;
}
