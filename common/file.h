/*
 * Files a person names on a command line or in a setting (a secret file, an INI file, a
 * hostfile, a log file) and files the library maps into memory.
 *
 * bagua__open_regular() opens such a file without ever blocking: a FIFO named where a regular
 * file is expected would otherwise hold open() until some writer appears, and a device or a
 * directory would be read as if it were the file. It opens with O_NONBLOCK, checks with
 * fstat() that it got a regular file, and then clears O_NONBLOCK, so the caller reads and
 * writes as usual.
 *
 * bagua__reserve_space() gives a file its blocks before it is mapped: a store into a mapped
 * page the file system cannot back (a full disk, a full tmpfs) raises SIGBUS, which kills the
 * process; reserving first turns that into an error the caller reports, naming the path.
 *
 * Threading: both are plain system calls on the caller's descriptors, safe from any thread.
 * Nothing here logs; failures are described in `err`, or returned as an errno value.
 */
#ifndef BAGUA_COMMON_FILE_H
#define BAGUA_COMMON_FILE_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Opens `path` with `flags` (O_CLOEXEC is added; O_CREAT takes `mode`) and returns the
 * descriptor, blocking, of a regular file. Returns -1 with errno set and "<path>: <what is
 * wrong>" in `err` (`errlen` > 0) when it cannot be opened, or when it is a FIFO, a socket, a
 * device or a directory (errno EINVAL or EISDIR then); the caller adds the flag and what it
 * accepts.
 */
int bagua__open_regular(const char *path, int flags, mode_t mode, char *err, size_t errlen);

/* A word for the kind of file `st_mode` names ("a FIFO", "a directory", "a character
 * device", ...), for messages. */
const char *bagua__file_kind(mode_t st_mode);

/*
 * Allocates the blocks of bytes [0, len) of the file open on `fd` (extending it to `len`
 * bytes when it is shorter), so that stores into a shared mapping of that range cannot fault.
 * Returns 0, or an errno value (ENOSPC: the file system is full). File systems without
 * fallocate get the range written with zeros instead.
 */
int bagua__reserve_space(int fd, off_t len);

#endif
