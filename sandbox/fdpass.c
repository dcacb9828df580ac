/* File descriptors across the sandbox's Unix sockets (SCM_RIGHTS): the parent, the jail maker and the jails
 * all pass them the same way. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/internal.h"

int lt__send_fds(int sock, const void *p, size_t n, const int *fds, int nfds) {
  union {
    char c[CMSG_SPACE(LT__MAX_FDS * sizeof(int))];
    struct cmsghdr align;
  } u;
  if (nfds > LT__MAX_FDS) return -1;
  while (n) {
    struct iovec iov = {(void *)p, n};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
      m.msg_control = u.c, m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
      struct cmsghdr *h = CMSG_FIRSTHDR(&m);
      h->cmsg_level = SOL_SOCKET, h->cmsg_type = SCM_RIGHTS, h->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
      memcpy(CMSG_DATA(h), fds, (size_t)nfds * sizeof(int));
    }
    ssize_t w = sendmsg(sock, &m, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p = (const char *)p + w;
    n -= (size_t)w;
    nfds = 0;
  }
  return 0;
}

ssize_t lt__recv_fds(int sock, void *p, size_t n, int *fds, int maxfds, int *nfds) {
  union {
    char c[CMSG_SPACE(LT__MAX_FDS * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct iovec iov = {p, n};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.c, .msg_controllen = sizeof u.c};
  ssize_t got;
  while ((got = recvmsg(sock, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {}
  *nfds = 0;
  for (struct cmsghdr *h = got > 0 ? CMSG_FIRSTHDR(&m) : NULL; h; h = CMSG_NXTHDR(&m, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    int have = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int)), tmp[LT__MAX_FDS];
    if (have > LT__MAX_FDS) have = LT__MAX_FDS;
    memcpy(tmp, CMSG_DATA(h), (size_t)have * sizeof(int));
    for (int i = 0; i < have; i++) {
      if (*nfds < maxfds) fds[(*nfds)++] = tmp[i];
      else close(tmp[i]); /* more than the message may carry: not kept open by accident */
    }
  }
  return got;
}
