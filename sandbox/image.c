/* The image cache (sandbox/image.h): CACHE/images/<hex>/{rootfs,config.json} are complete entries, renamed into
 * place only once every layer was applied and checked and the file system synced; CACHE/locks/<hex>.lock is held
 * exclusively by the one process unpacking <hex> and shared by every process that has <hex> open; CACHE/tmp holds
 * unpacks and archives in progress, each with its maker's lock (sandbox/source.c), so that what a killed maker
 * left is swept by the next unpacker and never mistaken for an entry. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/image.h"
#include "sandbox/internal.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

struct lt_image {
  char *ref, *rootfs;
  int rootfs_fd; /* O_PATH: what boxes stack their writable layer on, and host-side reads resolve in */
  int lock;      /* shared, on locks/<hex>.lock */
  lt_image_config_t cfg;
};

unsigned lt__box_host_uid(void) { return geteuid() == 0 ? LT__NOBODY : (unsigned)geteuid(); }
unsigned lt__box_host_gid(void) { return geteuid() == 0 ? LT__NOBODY : (unsigned)getegid(); }

/* type: F_RDLCK, F_WRLCK or F_UNLCK; waits. */
static int set_lock(int fd, short type) {
  struct flock l = {.l_type = type, .l_whence = SEEK_SET};
  int r;
  while ((r = fcntl(fd, F_OFD_SETLKW, &l)) < 0 && errno == EINTR) {}
  return r;
}

/* ---- unpacking -------------------------------------------------------------------- */

static int check_layer(const lt__source_t *s, const lt__blob_t *b, const char *raw_hex) {
  if (strcmp(b->digest + 7, raw_hex) == 0 || (b->alt[0] && strcmp(b->alt + 7, raw_hex) == 0)) return 0;
  return lt_error_set(LT_ECORRUPT, "%s: layer %s: digest mismatch (its bytes hash to sha256:%s)", s->ref, b->digest,
                      raw_hex);
}

/* Into a temporary directory of cache/tmp, then renamed to `entry`: only ever whole. */
static int unpack(lt__source_t *s, const char *cache, const char *entry) {
  char tmpdir[4200], t[4200], p[4300], what[4400];
  snprintf(tmpdir, sizeof tmpdir, "%s/tmp", cache);
  lt__tmp_sweep(tmpdir);
  int lock = -1, root = -1, rc = lt__tmp_make(tmpdir, "img", t, sizeof t, &lock);
  if (rc < 0) return lt_error_wrap(rc, "%s", s->ref);
  int own = geteuid() == 0;
  unsigned uid = lt__box_host_uid(), gid = lt__box_host_gid();
  char *cfg = NULL;
  size_t cfg_len = 0;
  lt__dirmode_t dirs = {0};
  snprintf(p, sizeof p, "%s/rootfs", t);
  if (mkdir(p, 0755) != 0 || (own && chown(p, uid, gid) != 0) || (root = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
    rc = lt_error_set(lt_error_from_errno(errno), "%s: %s", p, strerror(errno));
  if (rc == 0) rc = lt__source_read(s, &s->config, "config", 4u << 20, &cfg, &cfg_len);
  snprintf(p, sizeof p, "%s/config.json", t);
  if (rc == 0) rc = lt_fs_write_atomic(p, cfg, cfg_len);
  for (int i = 0; rc == 0 && i < s->nlayers; i++) {
    const lt__blob_t *b = &s->layers[i];
    snprintf(what, sizeof what, "%s: layer %s", s->ref, b->digest[0] ? b->digest : b->path);
    int fd = lt__source_blob(s, b);
    if (fd < 0) {
      rc = lt_error_wrap(fd, "layer %s", b->digest);
      break;
    }
    char hex[65];
    lt__layer_t l = {.fd = fd, .what = what, .chown = own, .uid = uid, .gid = gid};
    rc = lt__layer_apply(&l, root, &dirs, hex);
    close(fd);
    if (rc == 0) rc = check_layer(s, b, hex);
  }
  if (rc == 0 && lt__dirmode_apply(&dirs, root) != 0)
    rc = lt_error_set(LT_EIO, "%s: directory modes: %s", s->ref, strerror(errno));
  int rfd = root >= 0 ? openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (rc == 0 && (rfd < 0 || syncfs(rfd) != 0)) rc = lt_error_set(LT_EIO, "%s: sync: %s", t, strerror(errno));
  if (rc == 0 && rename(t, entry) != 0) rc = lt_error_set(lt_error_from_errno(errno), "%s: %s", entry, strerror(errno));
  if (rc == 0) lt_fs_sync_parent(entry);
  if (rfd >= 0) close(rfd);
  if (root >= 0) close(root);
  lt__dirmode_free(&dirs);
  free(cfg);
  lt__tmp_drop(rc == 0 ? NULL : t, lock);
  if (rc == 0) {
    snprintf(p, sizeof p, "%s.lock", t);
    unlink(p);
  }
  return rc;
}

/* ---- the config --------------------------------------------------------------------- */

static char **str_array(const cJSON *a, const cJSON *b) {
  int n = cJSON_GetArraySize(a) + cJSON_GetArraySize(b), k = 0;
  char **v = calloc((size_t)n + 1, sizeof *v);
  const cJSON *arrs[] = {a, b}, *e;
  for (int i = 0; v && i < 2; i++) {
    cJSON_ArrayForEach(e, arrs[i]) {
      if (cJSON_IsString(e) && !(v[k++] = strdup(e->valuestring))) {
        for (int j = 0; j < k; j++) free(v[j]);
        free(v);
        return NULL;
      }
    }
  }
  return v;
}

static void free_strv(char **v) {
  for (char **p = v; p && *p; p++) free(*p);
  free(v);
}

/* NAME or number in the image's passwd/group file: its id (and, for passwd, the primary group and home); -1 if
 * absent. */
static long lookup_id(int root, const char *file, const char *name, long *group, char *home, size_t hcap) {
  char *text = NULL;
  size_t len;
  long id = -1;
  if (lt__read_in(root, file, 4u << 20, &text, &len) < 0) {
    lt_error_clear();
    return -1;
  }
  char *numend;
  long num = strtol(name, &numend, 10);
  int numeric = *name && !*numend;
  for (char *line = strtok(text, "\n"); line && id < 0; line = strtok(NULL, "\n")) {
    char *f[7] = {0};
    int nf = 0;
    for (char *s = line; nf < 7 && s; nf++) {
      f[nf] = s;
      s = strchr(s, ':');
      if (s) *s++ = 0;
    }
    if (nf < 3) continue;
    long uid = strtol(f[2], NULL, 10);
    if (numeric ? uid == num : strcmp(f[0], name) == 0) {
      id = uid;
      if (group && nf >= 4) *group = strtol(f[3], NULL, 10);
      if (home && nf >= 6 && f[5][0] == '/') snprintf(home, hcap, "%s", f[5]);
    }
  }
  free(text);
  return id;
}

/* User "" | "user" | "user:group" (names or numbers) to ids, through the image's /etc/passwd and /etc/group. */
static int map_user(lt_image_t *img, char *home, size_t hcap) {
  char u[256], *g;
  snprintf(u, sizeof u, "%s", img->cfg.user);
  if ((g = strchr(u, ':'))) *g++ = 0;
  long uid = 0, gid = 0;
  char *end;
  if (u[0]) {
    long n = strtol(u, &end, 10);
    uid = lookup_id(img->rootfs_fd, "/etc/passwd", u, &gid, home, hcap);
    if (uid < 0 && !*end && n >= 0) uid = n, gid = 0;
    else if (uid < 0)
      return lt_error_set(LT_EFORMAT, "%s: User '%s' is not in the image's /etc/passwd", img->ref, img->cfg.user);
  }
  if (g && *g) {
    long n = strtol(g, &end, 10);
    gid = lookup_id(img->rootfs_fd, "/etc/group", g, NULL, NULL, 0);
    if (gid < 0 && !*end && n >= 0) gid = n;
    else if (gid < 0)
      return lt_error_set(LT_EFORMAT, "%s: group '%s' of User is not in the image's /etc/group", img->ref, g);
  }
  if (uid > 65535 || gid > 65535)
    return lt_error_set(LT_EUNSUPP, "%s: User '%s' maps to ids past 65535", img->ref, img->cfg.user);
  img->cfg.uid = (int)uid, img->cfg.gid = (int)gid;
  return 0;
}

/* PATH and HOME where the image names none, as docker does. */
static int add_default_env(lt_image_t *img, const char *home) {
  int n = 0, path = 0, has_home = 0;
  for (char **e = img->cfg.env; *e; e++, n++) {
    path |= strncmp(*e, "PATH=", 5) == 0;
    has_home |= strncmp(*e, "HOME=", 5) == 0;
  }
  char **v = realloc(img->cfg.env, (size_t)(n + 3) * sizeof *v);
  if (!v) return lt_error_set(LT_ENOMEM, "%s: out of memory", img->ref);
  img->cfg.env = v;
  if (!path && !(v[n++] = strdup("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"))) n--;
  if (!has_home && (v[n] = malloc(strlen(home) + 6))) sprintf(v[n++], "HOME=%s", home);
  v[n] = NULL;
  return 0;
}

static int load_config(lt_image_t *img, const char *entry) {
  char p[4300];
  cJSON *doc = NULL;
  snprintf(p, sizeof p, "%s/config.json", entry);
  int rc = lt_json_parse_file(p, &doc);
  if (rc < 0) return lt_error_wrap(rc, "%s", img->ref);
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(doc, "config");
  const cJSON *wd = cJSON_GetObjectItemCaseSensitive(c, "WorkingDir"),
              *user = cJSON_GetObjectItemCaseSensitive(c, "User");
  img->cfg.env = str_array(cJSON_GetObjectItemCaseSensitive(c, "Env"), NULL);
  img->cfg.cmd =
      str_array(cJSON_GetObjectItemCaseSensitive(c, "Entrypoint"), cJSON_GetObjectItemCaseSensitive(c, "Cmd"));
  img->cfg.workdir = strdup(cJSON_IsString(wd) && wd->valuestring[0] == '/' ? wd->valuestring : "/");
  img->cfg.user = strdup(cJSON_IsString(user) ? user->valuestring : "");
  cJSON_Delete(doc);
  if (!img->cfg.env || !img->cfg.cmd || !img->cfg.workdir || !img->cfg.user)
    return lt_error_set(LT_ENOMEM, "%s: out of memory", img->ref);
  char home[512] = "";
  rc = map_user(img, home, sizeof home);
  if (rc < 0) return rc;
  char id[24];
  snprintf(id, sizeof id, "%d", img->cfg.uid);
  if (!home[0]) lookup_id(img->rootfs_fd, "/etc/passwd", id, NULL, home, sizeof home);
  if (!home[0]) snprintf(home, sizeof home, "/");
  return add_default_env(img, home);
}

/* ---- the API --------------------------------------------------------------------------- */

int lt_image_open(const char *cache_dir, const char *ref, lt_image_t **out) {
  *out = NULL;
  lt_image_t *img = calloc(1, sizeof *img);
  if (!img || !(img->ref = strdup(ref))) {
    free(img);
    return lt_error_set(LT_ENOMEM, "%s: out of memory", ref);
  }
  img->rootfs_fd = img->lock = -1;
  char locks[4200], lp[4400], entry[4400], root[4500];
  snprintf(locks, sizeof locks, "%s/locks", cache_dir);
  lt__source_t src;
  int rc = lt_fs_mkdirs(cache_dir, 0700);
  if (rc == 0) rc = lt_fs_mkdirs(locks, 0700);
  if (rc == 0) rc = lt__source_open(cache_dir, ref, &src);
  else rc = lt_error_wrap(rc, "%s: the image cache", ref);
  if (rc < 0) {
    lt_image_close(img);
    return rc;
  }
  snprintf(img->cfg.digest, sizeof img->cfg.digest, "%s", src.key);
  snprintf(lp, sizeof lp, "%s/%s.lock", locks, src.key + 7);
  snprintf(entry, sizeof entry, "%s/images/%s", cache_dir, src.key + 7);
  snprintf(root, sizeof root, "%s/rootfs", entry);
  img->lock = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (img->lock < 0 || set_lock(img->lock, F_RDLCK) != 0)
    rc = lt_error_set(LT_EIO, "%s: %s: %s", ref, lp, strerror(errno));
  if (rc == 0 && !lt_fs_is_dir(root)) {
    /* Our shared lock goes before the exclusive one is asked for: two openers upgrading at once would wait on
     * each other.  Whoever gets it first unpacks; the others find the entry when their turn comes. */
    char images[4300];
    snprintf(images, sizeof images, "%s/images", cache_dir);
    if (set_lock(img->lock, F_UNLCK) != 0 || set_lock(img->lock, F_WRLCK) != 0)
      rc = lt_error_set(LT_EIO, "%s: %s: %s", ref, lp, strerror(errno));
    else if ((rc = lt_fs_mkdirs(images, 0700)) == 0 && !lt_fs_is_dir(root)) rc = unpack(&src, cache_dir, entry);
    if (rc == 0 && set_lock(img->lock, F_RDLCK) != 0) rc = lt_error_set(LT_EIO, "%s: %s: %s", ref, lp, strerror(errno));
  }
  lt__source_close(&src);
  if (rc == 0 && (!(img->rootfs = strdup(root)) || (img->rootfs_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0))
    rc = lt_error_set(LT_EIO, "%s: %s: %s", ref, root, strerror(errno));
  if (rc == 0) rc = load_config(img, entry);
  if (rc < 0) {
    lt_image_close(img);
    return rc;
  }
  *out = img;
  return 0;
}

void lt_image_close(lt_image_t *img) {
  if (!img) return;
  if (img->rootfs_fd >= 0) close(img->rootfs_fd);
  if (img->lock >= 0) close(img->lock); /* the kernel drops the shared lock with its descriptor */
  free_strv(img->cfg.env);
  free_strv(img->cfg.cmd);
  free(img->cfg.workdir);
  free(img->cfg.user);
  free(img->ref);
  free(img->rootfs);
  free(img);
}

const lt_image_config_t *lt_image_config(const lt_image_t *img) { return &img->cfg; }
const char *lt_image_ref(const lt_image_t *img) { return img->ref; }
const char *lt_image_rootfs(const lt_image_t *img) { return img->rootfs; }
int lt__image_rootfs_fd(const lt_image_t *img) { return img->rootfs_fd; }

int lt__read_in(int root, const char *path, size_t max, char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  while (*path == '/') path++;
  int fd = lt__openat_in(root, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
  if (fd < 0) return lt_error_set(lt_error_from_errno(errno), "/%s: %s", path, strerror(errno));
  struct stat st;
  int rc = 0;
  if (fstat(fd, &st) != 0) rc = lt_error_set(LT_EIO, "/%s: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode)) rc = lt_error_set(LT_EINVAL, "/%s: not a regular file", path);
  else if ((size_t)st.st_size > max)
    rc = lt_error_set(LT_ERANGE, "/%s: %lld bytes (at most %zu)", path, (long long)st.st_size, max);
  char *buf = rc == 0 ? malloc((size_t)st.st_size + 1) : NULL;
  if (rc == 0 && !buf) rc = lt_error_set(LT_ENOMEM, "/%s: out of memory", path);
  size_t got = 0;
  while (rc == 0 && got < (size_t)st.st_size) {
    ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) rc = lt_error_set(LT_EIO, "/%s: %s", path, strerror(errno));
    if (n <= 0) break; /* shrank while read: what is there */
    got += (size_t)n;
  }
  close(fd);
  if (rc < 0) {
    free(buf);
    return rc;
  }
  buf[got] = 0;
  *out = buf;
  *len = got;
  return 0;
}

int lt_image_read_file(const lt_image_t *img, const char *path, size_t max, char **out, size_t *len) {
  int rc = lt__read_in(img->rootfs_fd, path, max, out, len);
  return rc < 0 ? lt_error_wrap(rc, "%s", img->ref) : 0;
}
