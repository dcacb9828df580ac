/* ZeroMQ CURVE on the daemon–worker link: key files, socket options and the
 * ZAP handler that admits only the listed worker keys (RFC 27/ZAP: the daemon's
 * context asks inproc://zeromq.zap.01 about every CURVE handshake). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include "net/curve.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"

/* The next key line of a key file (blank lines and # comments skipped), trimmed; 0 at the end. */
static int next_key_line(FILE *f, char *line, size_t n) {
  while (fgets(line, (int)n, f)) {
    char *s = line + strspn(line, " \t");
    s[strcspn(s, " \t\r\n")] = 0;
    if (*s && *s != '#') {
      memmove(line, s, strlen(s) + 1);
      return 1;
    }
  }
  return 0;
}

int lt_curve_read_key(const char *path, const char *what, char z85[41]) {
  FILE *f = fopen(path, "re");
  if (!f) return lt_error_set(LT_ECONFIG, "%s: cannot read %s: %s", what, path, strerror(errno));
  char line[256];
  int found = next_key_line(f, line, sizeof line);
  fclose(f);
  if (!found) return lt_error_set(LT_ECONFIG, "%s: %s is empty", what, path);
  uint8_t bin[32];
  if (strlen(line) != 40 || !zmq_z85_decode(bin, line))
    return lt_error_set(LT_ECONFIG, "%s: %s does not hold a CURVE key (40 Z85 characters, as `longtail keygen` writes)",
                        what, path);
  memcpy(z85, line, 41);
  return 0;
}

int lt_curve_keys_add(lt_curve_keys_t *k, const char *z85, const char *what, const char *where) {
  uint8_t bin[32];
  if (strlen(z85) != 40 || !zmq_z85_decode(bin, z85))
    return lt_error_set(LT_ECONFIG, "%s: %s: '%.50s' is not a CURVE public key", what, where, z85);
  uint8_t(*nk)[32] = realloc(k->keys, sizeof *nk * (size_t)(k->n + 1));
  if (!nk) return lt_error_set(LT_ENOMEM, "out of memory");
  k->keys = nk;
  memcpy(k->keys[k->n++], bin, 32);
  return 0;
}

int lt_curve_load_keys(const char *path, const char *what, lt_curve_keys_t *k) {
  struct stat st;
  if (stat(path, &st) != 0) return lt_error_set(LT_ECONFIG, "%s: cannot read %s: %s", what, path, strerror(errno));
  int rc = 0;
  if (S_ISDIR(st.st_mode)) { /* a directory of NAME.pub files */
    DIR *d = opendir(path);
    if (!d) return lt_error_set(LT_ECONFIG, "%s: cannot open %s: %s", what, path, strerror(errno));
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
      size_t l = strlen(e->d_name);
      if (l < 5 || strcmp(e->d_name + l - 4, ".pub")) continue;
      char p[4200], z[41];
      snprintf(p, sizeof p, "%s/%s", path, e->d_name);
      if ((rc = lt_curve_read_key(p, what, z)) == 0) rc = lt_curve_keys_add(k, z, what, p);
    }
    closedir(d);
  } else { /* one key per line */
    FILE *f = fopen(path, "re");
    if (!f) return lt_error_set(LT_ECONFIG, "%s: cannot read %s: %s", what, path, strerror(errno));
    char line[256];
    while (rc == 0 && next_key_line(f, line, sizeof line)) rc = lt_curve_keys_add(k, line, what, path);
    fclose(f);
  }
  if (rc == 0 && k->n == 0) rc = lt_error_set(LT_ECONFIG, "%s: %s lists no key", what, path);
  return rc;
}

void lt_curve_keys_free(lt_curve_keys_t *k) {
  free(k->keys);
  k->keys = NULL;
  k->n = 0;
}

int lt_zsock_curve_server(lt_zsock_t *z, const char *secret_z85) {
  void *s = lt_zsock_handle(z);
  int one = 1;
  if (zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
      zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, secret_z85, 40) != 0 ||
      zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, "longtail", 8) != 0)
    return lt_error_set(LT_EUNSUPP, "CURVE server: %s (is libzmq built with CURVE?)", zmq_strerror(zmq_errno()));
  return 0;
}

int lt_zsock_curve_client(lt_zsock_t *z, const char *server_pub, const char *pub, const char *sec) {
  void *s = lt_zsock_handle(z);
  if (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_pub, 40) != 0 ||
      zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40) != 0 || zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40) != 0)
    return lt_error_set(LT_EUNSUPP, "CURVE client: %s (is libzmq built with CURVE?)", zmq_strerror(zmq_errno()));
  return 0;
}

/* ---- the ZAP handler ---- */

struct lt_zap {
  lt_zsock_t *z;
  lt_curve_keys_t keys;
};

static void on_zap(lt_zsock_t *z, const lt_frame_t *f, int n, void *ud) {
  lt_zap_t *h = ud;
  /* version, request id, domain, address, identity, mechanism, credentials... */
  int ok = 0;
  char addr[64] = "?";
  if (n >= 6) snprintf(addr, sizeof addr, "%.*s", (int)(f[3].len < 63 ? f[3].len : 63), (const char *)f[3].data);
  if (n >= 7 && f[5].len == 5 && !memcmp(f[5].data, "CURVE", 5) && f[6].len == 32)
    for (int i = 0; i < h->keys.n && !ok; i++) ok = !memcmp(h->keys.keys[i], f[6].data, 32);
  if (!ok) {
    char key[41] = "";
    if (n >= 7 && f[6].len == 32) zmq_z85_encode(key, f[6].data, 32);
    LT_WARN("curve", "refused a worker from %s: %s%s", addr, key[0] ? "unknown key " : "no CURVE key", key);
  }
  static const char v[] = "1.0";
  lt_frame_t r[6] = {{(void *)v, 3, 0},
                     {n >= 2 ? f[1].data : (void *)"", n >= 2 ? f[1].len : 0, 0},
                     {ok ? "200" : "400", 3, 0},
                     {ok ? "OK" : "unknown worker key", ok ? 2u : 18u, 0},
                     {"", 0, 0},
                     {"", 0, 0}};
  lt_zsock_send(z, r, 6);
}

int lt_zap_start(uv_loop_t *loop, void *ctx, lt_curve_keys_t *keys, lt_zap_t **out) {
  *out = NULL;
  lt_zap_t *h = calloc(1, sizeof *h);
  if (!h) return lt_error_set(LT_ENOMEM, "out of memory");
  int rc = lt_zsock_open(loop, ctx, ZMQ_REP, &h->z);
  if (rc == 0 && zmq_bind(lt_zsock_handle(h->z), "inproc://zeromq.zap.01") != 0)
    rc = lt_error_set(LT_ESYS, "ZAP handler: cannot bind inproc://zeromq.zap.01: %s", zmq_strerror(zmq_errno()));
  if (rc == 0) rc = lt_zsock_start(h->z, on_zap, h);
  if (rc < 0) {
    if (h->z) lt_zsock_close(h->z, NULL, NULL);
    free(h);
    return rc;
  }
  h->keys = *keys; /* taken over */
  memset(keys, 0, sizeof *keys);
  *out = h;
  return 0;
}

void lt_zap_close(lt_zap_t *h) {
  if (!h) return;
  lt_zsock_close(h->z, NULL, NULL);
  lt_curve_keys_free(&h->keys);
  free(h);
}

int lt_curve_serve(uv_loop_t *loop, void *ctx, const char *secret_path, const char *client_keys, const char *local_dir,
                   char secret[41], lt_zap_t **zap) {
  if (!zmq_has("curve")) return lt_error_set(LT_EUNSUPP, "transport.curve: this libzmq was built without CURVE");
  if (!*secret_path)
    return lt_error_set(
        LT_ECONFIG,
        "transport.server_secret_key: required with transport.curve (make one with `longtail keygen --out daemon`)");
  int rc = lt_curve_read_key(secret_path, "transport.server_secret_key", secret);
  lt_curve_keys_t keys = {0};
  if (rc == 0 && *client_keys) rc = lt_curve_load_keys(client_keys, "transport.client_keys", &keys);
  else if (rc == 0 && !local_dir)
    rc = lt_error_set(
        LT_ECONFIG,
        "transport.client_keys: required with transport.curve and no local workers (the workers' .pub files)");
  char p[4300], pub[41], lpub[41], lsec[41], line[64];
  if (rc == 0 && zmq_curve_public(pub, secret) != 0)
    rc = lt_error_set(LT_ECONFIG, "transport.server_secret_key: not a secret key");
  if (rc == 0 && local_dir) { /* local workers get their own pair, admitted for this run only */
    if (zmq_curve_keypair(lpub, lsec) != 0)
      rc = lt_error_set(LT_ESYS, "zmq_curve_keypair: %s", zmq_strerror(zmq_errno()));
    if (rc == 0) rc = lt_curve_keys_add(&keys, lpub, "local workers", "this run's key pair");
    if (rc == 0) rc = lt_fs_mkdirs(local_dir, 0700);
    const char *files[][2] = {{"local-worker.key", lsec}, {"local-worker.pub", lpub}, {"server.pub", pub}};
    for (int i = 0; i < 3 && rc == 0; i++) {
      snprintf(p, sizeof p, "%s/%s", local_dir, files[i][0]);
      snprintf(line, sizeof line, "%s\n", files[i][1]);
      rc = lt_fs_write_atomic(p, line, strlen(line));
      if (rc == 0) chmod(p, 0600);
    }
  }
  if (rc == 0) rc = lt_zap_start(loop, ctx, &keys, zap);
  lt_curve_keys_free(&keys);
  return rc;
}
