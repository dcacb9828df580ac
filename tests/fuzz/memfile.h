/* Fuzz inputs as files for loaders that take a path: an anonymous memory file
 * reached through /proc/self/fd. */
#ifndef LT_TESTS_FUZZ_MEMFILE_H
#define LT_TESTS_FUZZ_MEMFILE_H

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* Writes data to a new memory file; its path in `path`; returns the fd (close it after). */
static inline int lt_fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t cap) {
  int fd = memfd_create("lt-fuzz", MFD_CLOEXEC);
  if (fd < 0) return -1;
  for (size_t off = 0; off < size;) {
    ssize_t w = write(fd, data + off, size - off);
    if (w <= 0) {
      close(fd);
      return -1;
    }
    off += (size_t)w;
  }
  snprintf(path, cap, "/proc/self/fd/%d", fd);
  return fd;
}

#endif
