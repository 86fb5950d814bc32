/* net.c -- addresses, descriptor passing and the clock of the wire protocol. Parsing an
 * address never looks a name up (it never blocks); a host name is resolved by getaddrinfo
 * when a client connects (on a thread, within the call's timeouts: ADR-092) or a server binds
 * (ADR-091). Descriptors travel only over Unix-domain sockets (spec §6.6); these two
 * calls are the only place the byte stream meets ancillary data. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "wire.h"

_Static_assert(sizeof(struct sockaddr_storage) <= sizeof(((WireAddress *)0)->storage),
               "WireAddress holds any socket address");

ssize_t hurray__wire_sendmsg(int sock, const struct iovec *iov, size_t n_iov, int fd) {
  union {
    struct cmsghdr align;
    char bytes[CMSG_SPACE(sizeof(int))];
  } control;
  struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = n_iov};
  if (fd >= 0) {
    memset(&control, 0, sizeof control);
    msg.msg_control = control.bytes;
    msg.msg_controllen = sizeof control.bytes;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

ssize_t hurray__wire_recvmsg(int sock, void *buf, size_t len, int *slot, bool *extra) {
  union {
    struct cmsghdr align;
    char bytes[CMSG_SPACE(4 * sizeof(int))];
  } control;
  struct iovec iov = {buf, len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.bytes,
                       .msg_controllen = sizeof control.bytes};
  ssize_t n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  if (msg.msg_flags & MSG_CTRUNC) *extra = true; /* the kernel closed what did not fit */
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (slot != NULL && *slot < 0) {
        *slot = fd;
      } else {
        close(fd);
        *extra = true;
      }
    }
  }
  return n;
}

int64_t hurray__wire_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int parse_port(const char *text, const char *p, uint16_t *port, HurrayError *error) {
  char *end = NULL;
  unsigned long v = *p ? strtoul(p, &end, 10) : 70000;
  if (*p < '0' || *p > '9' || *end != '\0' || v > 65535) {
    return hurray__fail(error, HURRAY_EINVAL, "address '%s': the port must be 0..65535", text);
  }
  *port = (uint16_t)v;
  return HURRAY_OK;
}

/* A host name as RFC 1123 spells one: labels of letters, digits and '-', joined by '.'. */
static bool valid_name(const char *host) {
  size_t n = strlen(host);
  if (n == 0 || n > WIRE_MAX_HOST || host[0] == '.' || host[0] == '-') return false;
  for (size_t i = 0; i < n; i++) {
    char ch = host[i];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || (ch == '.' && host[i + 1] != '.');
    if (!ok) return false;
  }
  return true;
}

int hurray__wire_address_parse(const char *text, WireAddress *out, HurrayError *error) {
  if (text == NULL) return hurray__fail(error, HURRAY_EINVAL, "address is NULL");
  memset(out, 0, sizeof *out);
  const char *s = text;
  if (strncmp(s, "unix:", 5) == 0 || strncmp(s, "hurray+unix://", 14) == 0) {
    const char *path = strncmp(s, "unix:", 5) == 0 ? s + 5 : s + 14;
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof un.sun_path) {
      return hurray__fail(error, HURRAY_EINVAL, "address '%s': a socket path of 1..%zu bytes",
                          text, sizeof un.sun_path - 1);
    }
    memcpy(un.sun_path, path, n);
    memcpy(out->storage, &un, sizeof un);
    out->family = AF_UNIX;
    out->length = (uint32_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    return HURRAY_OK;
  }
  if (strncmp(s, "hurray://", 9) == 0) {
    s += 9;
  } else if (strncmp(s, "hurrays://", 10) == 0) {
    s += 10;
    out->tls = true;
  }
  char host[WIRE_MAX_HOST + 1];
  const char *port_text = NULL;
  if (*s == '[') {
    const char *close = strchr(s, ']');
    if (close == NULL || close[1] != ':' || (size_t)(close - s - 1) >= sizeof host) {
      return hurray__fail(error, HURRAY_EINVAL, "address '%s': expected [IPV6]:PORT", text);
    }
    memcpy(host, s + 1, (size_t)(close - s - 1));
    host[close - s - 1] = '\0';
    port_text = close + 2;
  } else {
    const char *colon = strrchr(s, ':');
    if (colon == NULL || (size_t)(colon - s) >= sizeof host || strchr(s, ':') != colon) {
      return hurray__fail(error, HURRAY_EINVAL, "address '%s': expected HOST:PORT", text);
    }
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    port_text = colon + 1;
  }
  int status = parse_port(text, port_text, &out->port, error);
  if (status != HURRAY_OK) return status;
  memcpy(out->host, host, sizeof host);
  struct sockaddr_in in4 = {.sin_family = AF_INET, .sin_port = htons(out->port)};
  struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(out->port)};
  if (inet_pton(AF_INET, host, &in4.sin_addr) == 1) {
    memcpy(out->storage, &in4, sizeof in4);
    out->family = AF_INET;
    out->length = sizeof in4;
  } else if (inet_pton(AF_INET6, host, &in6.sin6_addr) == 1) {
    memcpy(out->storage, &in6, sizeof in6);
    out->family = AF_INET6;
    out->length = sizeof in6;
  } else if (*s == '[' || !valid_name(host)) {
    return hurray__fail(error, HURRAY_EINVAL,
                        "address '%s': '%s' is neither a numeric IPv4/IPv6 address nor a host "
                        "name (letters, digits, '-' and '.')",
                        text, host);
  } else {
    out->family = AF_UNSPEC;
    out->named = true;
  }
  return HURRAY_OK;
}

/* A lookup on a thread of its own, shared by it and the caller until both let go. */
typedef struct Lookup {
  pthread_mutex_t lock;
  pthread_cond_t done_cond;
  int refs;
  bool done;
  int rc, err;
  char host[WIRE_MAX_HOST + 1], port[8];
  struct addrinfo hints;
  struct addrinfo *found;
} Lookup;

static void lookup_release(Lookup *l) {
  pthread_mutex_lock(&l->lock);
  int left = --l->refs;
  pthread_mutex_unlock(&l->lock);
  if (left > 0) return;
  if (l->found != NULL) freeaddrinfo(l->found);
  pthread_mutex_destroy(&l->lock);
  pthread_cond_destroy(&l->done_cond);
  free(l);
}

static void *lookup_main(void *arg) {
  Lookup *l = arg;
  struct addrinfo *found = NULL;
  int rc = getaddrinfo(l->host, l->port, &l->hints, &found);
  int err = errno;
  pthread_mutex_lock(&l->lock);
  l->rc = rc;
  l->err = err;
  l->found = found;
  l->done = true;
  pthread_cond_signal(&l->done_cond);
  pthread_mutex_unlock(&l->lock);
  lookup_release(l);
  return NULL;
}

/* getaddrinfo within `wait_ms` (ADR-092): HURRAY_ETIMEOUT once it has passed. */
static int lookup_within(const char *host, const char *port, const struct addrinfo *hints,
                         int64_t wait_ms, int *rc, int *err, struct addrinfo **found,
                         HurrayError *error) {
  Lookup *l = calloc(1, sizeof *l);
  if (l == NULL) return hurray__fail(error, HURRAY_ENOMEM, "out of memory");
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_mutex_init(&l->lock, NULL);
  pthread_cond_init(&l->done_cond, &attr);
  pthread_condattr_destroy(&attr);
  l->refs = 2;
  snprintf(l->host, sizeof l->host, "%s", host);
  snprintf(l->port, sizeof l->port, "%s", port);
  l->hints = *hints;
  pthread_t thread;
  if (pthread_create(&thread, NULL, lookup_main, l) != 0) {
    l->refs = 1;
    lookup_release(l);
    return hurray__fail(error, HURRAY_EIO, "cannot start a thread to resolve '%s'", host);
  }
  pthread_detach(thread);
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += (time_t)(wait_ms / 1000);
  until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&l->lock);
  while (!l->done && pthread_cond_timedwait(&l->done_cond, &l->lock, &until) == 0) {
  }
  bool done = l->done;
  if (done) {
    *rc = l->rc;
    *err = l->err;
    *found = l->found;
    l->found = NULL; /* the caller's now */
  }
  pthread_mutex_unlock(&l->lock);
  lookup_release(l);
  if (!done) {
    return hurray__fail(error, HURRAY_ETIMEOUT,
                        "resolving the host name '%s' took longer than %" PRId64 " ms", host,
                        wait_ms);
  }
  return HURRAY_OK;
}

int hurray__wire_address_resolve(const WireAddress *a, bool passive, int64_t wait_ms,
                                 WireAddress out[], size_t *n, HurrayError *error) {
  *n = 0;
  if (!a->named) {
    out[(*n)++] = *a;
    return HURRAY_OK;
  }
  char port[8];
  snprintf(port, sizeof port, "%u", a->port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)};
  struct addrinfo *found = NULL;
  int rc = 0, err = 0;
  if (wait_ms < 0) {
    rc = getaddrinfo(a->host, port, &hints, &found);
    err = errno;
  } else {
    int status = lookup_within(a->host, port, &hints, wait_ms, &rc, &err, &found, error);
    if (status != HURRAY_OK) return status;
  }
  if (rc != 0) {
    return hurray__fail(error, HURRAY_ECONNECTION, "cannot resolve the host name '%s': %s",
                        a->host, rc == EAI_SYSTEM ? strerror(err) : gai_strerror(rc));
  }
  for (const struct addrinfo *i = found; i != NULL && *n < WIRE_MAX_RESOLVED; i = i->ai_next) {
    if ((i->ai_family != AF_INET && i->ai_family != AF_INET6) ||
        i->ai_addrlen > sizeof out->storage) {
      continue;
    }
    WireAddress *r = &out[(*n)++];
    *r = *a;
    r->named = false;
    r->family = i->ai_family;
    r->length = (uint32_t)i->ai_addrlen;
    memset(r->storage, 0, sizeof r->storage);
    memcpy(r->storage, i->ai_addr, i->ai_addrlen);
  }
  if (found != NULL) freeaddrinfo(found);
  if (*n == 0) {
    return hurray__fail(error, HURRAY_ECONNECTION,
                        "the host name '%s' has no IPv4 or IPv6 stream address", a->host);
  }
  return HURRAY_OK;
}

bool hurray__wire_address_local(const WireAddress *a) {
  if (a->family == AF_UNIX) return true;
  if (a->family == AF_INET) {
    struct sockaddr_in in4;
    memcpy(&in4, a->storage, sizeof in4);
    return (ntohl(in4.sin_addr.s_addr) >> 24) == 127;
  }
  struct sockaddr_in6 in6;
  memcpy(&in6, a->storage, sizeof in6);
  const uint8_t *b = in6.sin6_addr.s6_addr;
  return IN6_IS_ADDR_LOOPBACK(&in6.sin6_addr) ||
         (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr) && b[12] == 127);
}

void hurray__wire_address_format(const WireAddress *a, char *out, size_t size) {
  char host[INET6_ADDRSTRLEN] = "";
  const char *scheme = a->tls ? "hurrays://" : "";
  if (a->named) {
    snprintf(out, size, "%s%s:%u", scheme, a->host, a->port);
  } else if (a->family == AF_UNIX) {
    struct sockaddr_un un;
    memcpy(&un, a->storage, sizeof un);
    snprintf(out, size, "unix:%s", un.sun_path);
  } else if (a->family == AF_INET) {
    struct sockaddr_in in4;
    memcpy(&in4, a->storage, sizeof in4);
    inet_ntop(AF_INET, &in4.sin_addr, host, sizeof host);
    snprintf(out, size, "%s%s:%u", scheme, host, ntohs(in4.sin_port));
  } else {
    struct sockaddr_in6 in6;
    memcpy(&in6, a->storage, sizeof in6);
    inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof host);
    snprintf(out, size, "%s[%s]:%u", scheme, host, ntohs(in6.sin6_port));
  }
}
