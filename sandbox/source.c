/* An image reference resolved to its config and layers (sandbox/image.h lists the transports).
 *
 * oci:DIR is read in place; oci-archive: and docker-archive: files are unpacked (as a layer is: nothing of them
 * lands outside their directory) into a temporary directory of the cache; a layout at an http(s) URL is
 * downloaded file by file as it is needed, an archive at one whole.  Every name taken from a manifest is checked
 * (a digest is "sha256:" and 64 hex digits, a path has no "..") before it is opened inside the layout. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <uv.h>

#include "net/http.h"
#include "sandbox/internal.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/sha256.h"

#define MAX_JSON (4u << 20) /* an index, manifest or config */

enum { SRC_OCI, SRC_OCI_ARCHIVE, SRC_DOCKER_ARCHIVE };

static int is_url(const char *p) { return strncmp(p, "http://", 7) == 0 || strncmp(p, "https://", 8) == 0; }

/* "TRANSPORT:PATH[:TAG]": the tag is what follows the last ':' after the last '/'. */
static int parse_ref(const char *ref, int *kind, char *path, size_t cap, char *tag, size_t tcap) {
  static const struct {
    const char *prefix;
    int kind;
  } t[] = {{"oci:", SRC_OCI}, {"oci-archive:", SRC_OCI_ARCHIVE}, {"docker-archive:", SRC_DOCKER_ARCHIVE}};
  const char *rest = NULL;
  for (size_t i = 0; i < sizeof t / sizeof t[0] && !rest; i++)
    if (strncmp(ref, t[i].prefix, strlen(t[i].prefix)) == 0) rest = ref + strlen(t[i].prefix), *kind = t[i].kind;
  if (!rest)
    return lt_error_set(LT_EUNSUPP,
                        "%s: unsupported transport (oci:DIR[:TAG], oci-archive:FILE[:TAG], docker-archive:FILE)", ref);
  const char *slash = strrchr(rest, '/'), *colon = strrchr(slash ? slash : rest, ':');
  size_t n = colon ? (size_t)(colon - rest) : strlen(rest);
  if (n == 0 || n >= cap) return lt_error_set(LT_EINVAL, "%s: no %s", ref, *kind == SRC_OCI ? "directory" : "file");
  memcpy(path, rest, n);
  path[n] = 0;
  snprintf(tag, tcap, "%s", colon ? colon + 1 : "");
  if (colon && *kind == SRC_DOCKER_ARCHIVE)
    return lt_error_set(LT_EUNSUPP, "%s: docker-archive:FILE takes no tag (the archive's one image is used)", ref);
  return 0;
}

static int valid_digest(const char *d) {
  if (!d || strncmp(d, "sha256:", 7) != 0 || strlen(d) != 71) return 0;
  for (const char *p = d + 7; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return 0;
  return 1;
}

static int blob_from_digest(const char *ref, const char *what, const char *digest, lt__blob_t *b) {
  if (!valid_digest(digest))
    return lt_error_set(LT_EFORMAT, "%s: %s: digest '%s' is not sha256:<64 hex>", ref, what, digest ? digest : "");
  snprintf(b->digest, sizeof b->digest, "%s", digest);
  snprintf(b->path, sizeof b->path, "blobs/sha256/%s", digest + 7);
  return 0;
}

/* ---- temporary directories ------------------------------------------------------- */

int lt__tmp_make(const char *dir, const char *prefix, char *path, size_t cap, int *lock) {
  static unsigned counter;
  char lp[4200];
  int rc = lt_fs_mkdirs(dir, 0700);
  if (rc < 0) return rc;
  for (int tries = 0; tries < 100; tries++) {
    snprintf(path, cap, "%s/%s-%d-%u", dir, prefix, (int)getpid(), __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    snprintf(lp, sizeof lp, "%s.lock", path);
    if ((rc = lt_fs_lock(lp, lock)) < 0) return rc;
    if (mkdir(path, 0700) == 0) return 0;
    int e = errno;
    lt__tmp_drop(NULL, *lock);
    if (e != EEXIST) return lt_error_set(lt_error_from_errno(e), "%s: %s", path, strerror(e));
  }
  return lt_error_set(LT_EIO, "%s: no free temporary name", dir);
}

void lt__tmp_drop(const char *path, int lock) {
  if (path && path[0]) {
    char lp[4200];
    lt_fs_remove_tree(path);
    snprintf(lp, sizeof lp, "%s.lock", path);
    unlink(lp);
  }
  if (lock >= 0) close(lock);
}

void lt__tmp_sweep(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char lp[4200], p[4200];
  for (struct dirent *e; (e = readdir(d));) {
    size_t n = strlen(e->d_name);
    if (n < 6 || strcmp(e->d_name + n - 5, ".lock") != 0) continue;
    snprintf(lp, sizeof lp, "%s/%s", dir, e->d_name);
    int fd;
    if (lt_fs_lock(lp, &fd) < 0) continue; /* its maker is alive */
    snprintf(p, sizeof p, "%s/%.*s", dir, (int)(n - 5), e->d_name);
    lt__tmp_drop(p, fd);
  }
  lt_error_clear();
  closedir(d);
}

/* ---- HTTP: one blocking download on a private loop ------------------------------ */

typedef struct {
  int rc, done;
  char err[512];
} dl_t;

static void dl_done(int rc, long status, const char *body, size_t len, const char *err, void *ud) {
  dl_t *d = ud;
  d->rc = rc;
  d->done = 1;
  if (rc < 0) snprintf(d->err, sizeof d->err, "%s", err ? err : lt_strerror(rc));
}

static int download(const char *url, const char *to) {
  uv_loop_t loop;
  lt_httpc_t *c = NULL;
  dl_t d = {0};
  if (uv_loop_init(&loop) != 0) return lt_error_set(LT_ESYS, "%s: cannot make a loop", url);
  int rc = lt_httpc_create(&loop, &c);
  lt_httpc_opts_t o = {.out_path = to, .timeout_ms = 600000, .retries = 3, .backoff_ms = 500};
  if (rc == 0) rc = lt_httpc_request(c, url, NULL, &o, dl_done, &d, NULL);
  while (rc == 0 && !d.done) uv_run(&loop, UV_RUN_ONCE);
  if (c) lt_httpc_close(c, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  if (rc < 0) return rc;
  return d.rc < 0 ? lt_error_set(d.rc, "%s: %s", url, d.err) : 0;
}

/* ---- opening blobs -------------------------------------------------------------- */

static int clean_rel(const char *p) {
  if (!p || !*p || *p == '/' || strlen(p) >= sizeof((lt__blob_t *)0)->path) return 0;
  for (const char *s = p; *s;) {
    size_t n = strcspn(s, "/");
    if (n == 2 && s[0] == '.' && s[1] == '.') return 0;
    s += n;
    while (*s == '/') s++;
  }
  return 1;
}

static int unpack_pass(lt__source_t *s, int64_t split);

/* A file of the layout: downloaded first where the layout is a URL, the rest of an archive unpacked first where it
 * is one of the files the open left in it. */
int lt__source_blob(lt__source_t *s, const lt__blob_t *b) {
  int fd = lt__openat_in(s->dir_fd, b->path, O_RDONLY, 0);
  if (fd < 0 && s->archive[0] && !s->archive_whole && errno == ENOENT) {
    int rc = unpack_pass(s, -(int64_t)MAX_JSON);
    if (rc < 0) return rc;
    s->archive_whole = 1;
    fd = lt__openat_in(s->dir_fd, b->path, O_RDONLY, 0);
  }
  if (fd < 0 && s->url[0] && errno == ENOENT) {
    char url[4400], to[8400], dir[8400];
    snprintf(url, sizeof url, "%s/%s", s->url, b->path);
    snprintf(to, sizeof to, "%s/%s", s->tmp, b->path);
    snprintf(dir, sizeof dir, "%s", to);
    *strrchr(dir, '/') = 0;
    int rc = lt_fs_mkdirs(dir, 0700);
    if (rc == 0) rc = download(url, to);
    if (rc < 0) return lt_error_wrap(rc, "%s", s->ref);
    fd = lt__openat_in(s->dir_fd, b->path, O_RDONLY, 0);
  }
  if (fd < 0) return lt_error_set(lt_error_from_errno(errno), "%s: %s: %s", s->ref, b->path, strerror(errno));
  return fd;
}

static int read_fd(int fd, size_t max, char **out, size_t *len) {
  lt_buf_t b = {0};
  char tmp[65536];
  for (;;) {
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return lt_buf_free(&b), -1;
    if (n == 0) break;
    lt_buf_append(&b, tmp, (size_t)n);
    if (b.len > max) return lt_buf_free(&b), errno = EFBIG, -1;
  }
  if (lt_buf_ok(&b) < 0) return errno = ENOMEM, -1;
  *len = b.len;
  *out = lt_buf_take(&b);
  return 0;
}

int lt__source_read(lt__source_t *s, const lt__blob_t *b, const char *what, size_t max, char **out, size_t *len) {
  *out = NULL;
  int fd = lt__source_blob(s, b);
  if (fd < 0) return fd;
  int r = read_fd(fd, max, out, len);
  int e = errno;
  close(fd);
  if (r < 0)
    return lt_error_set(e == EFBIG ? LT_ERANGE : LT_EIO, "%s: %s %s: %s", s->ref, what, b->digest,
                        e == EFBIG ? "too large" : strerror(e));
  char hex[65];
  lt_sha256_buf(*out, *len, hex);
  if (b->digest[0] && strcmp(hex, b->digest + 7) != 0) {
    free(*out);
    *out = NULL;
    return lt_error_set(LT_ECORRUPT, "%s: %s %s: digest mismatch (its bytes hash to sha256:%s)", s->ref, what,
                        b->digest, hex);
  }
  return 0;
}

static int read_json(lt__source_t *s, const lt__blob_t *b, const char *what, cJSON **out) {
  char *text;
  size_t len;
  int rc = lt__source_read(s, b, what, MAX_JSON, &text, &len);
  if (rc < 0) return rc;
  rc = lt_json_parse(text, len, what, out);
  free(text);
  return rc < 0 ? lt_error_wrap(LT_EFORMAT, "%s", s->ref) : 0;
}

/* ---- OCI layouts ---------------------------------------------------------------- */

static const char *host_arch(void) {
  static char arch[64];
  if (!arch[0]) {
    struct utsname u;
    const char *a = uname(&u) != 0                      ? "amd64"
                    : strcmp(u.machine, "x86_64") == 0  ? "amd64"
                    : strcmp(u.machine, "aarch64") == 0 ? "arm64"
                                                        : u.machine;
    snprintf(arch, sizeof arch, "%s", a);
  }
  return arch;
}

static const char *str_at(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int is_index(const cJSON *desc, const cJSON *doc) {
  const char *mt = str_at(desc, "mediaType");
  if (mt) return strstr(mt, "image.index") || strstr(mt, "manifest.list");
  return doc && cJSON_GetObjectItemCaseSensitive(doc, "manifests") != NULL;
}

/* The descriptor of `index` to follow: the one named `tag`, or the host's platform, or the only one. */
static const cJSON *pick(lt__source_t *s, const cJSON *index, const char *tag, int nested) {
  const cJSON *ms = cJSON_GetObjectItemCaseSensitive(index, "manifests"), *m, *found = NULL;
  int n = 0;
  cJSON_ArrayForEach(m, ms) {
    n++;
    const cJSON *ann = cJSON_GetObjectItemCaseSensitive(m, "annotations"),
                *pl = cJSON_GetObjectItemCaseSensitive(m, "platform");
    const char *name = str_at(ann, "org.opencontainers.image.ref.name");
    if (!nested && tag[0]) {
      size_t nl = name ? strlen(name) : 0, tl = strlen(tag);
      if (name && (strcmp(name, tag) == 0 || (nl > tl && name[nl - tl - 1] == ':' && strcmp(name + nl - tl, tag) == 0)))
        return m;
    } else if (nested && pl) {
      const char *os = str_at(pl, "os"), *arch = str_at(pl, "architecture");
      if (os && arch && strcmp(os, "linux") == 0 && strcmp(arch, host_arch()) == 0 && !found) found = m;
    }
  }
  if (found) return found;
  if (!nested && tag[0]) return lt_error_set(LT_ENOENT, "%s: no manifest tagged '%s' in index.json", s->ref, tag), NULL;
  if (n == 1) return cJSON_GetArrayItem(ms, 0);
  if (nested)
    lt_error_set(LT_ENOENT, "%s: no manifest for this host's platform (linux/%s) in the image index", s->ref,
                 host_arch());
  else lt_error_set(LT_ENOENT, "%s: index.json holds %d manifests: name one with :TAG", s->ref, n);
  return NULL;
}

static int accept_layer(lt__source_t *s, const char *mt, const char *digest) {
  if (!mt) return 0;
  if (strstr(mt, "encrypted"))
    return lt_error_set(LT_EUNSUPP, "%s: layer %s: encrypted layers are not supported", s->ref, digest);
  static const char *const ok[] = {"application/vnd.oci.image.layer.", "application/vnd.docker.image.rootfs."};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    if (strncmp(mt, ok[i], strlen(ok[i])) == 0 && strstr(mt, ".tar")) return 0;
  return lt_error_set(LT_EUNSUPP, "%s: layer %s: unsupported media type '%s'", s->ref, digest, mt);
}

static int take_layers(lt__source_t *s, const cJSON *arr, int oci) {
  int n = cJSON_GetArraySize(arr);
  if (!cJSON_IsArray(arr)) return lt_error_set(LT_EFORMAT, "%s: the manifest has no layers array", s->ref);
  if (!(s->layers = calloc((size_t)(n ? n : 1), sizeof *s->layers)))
    return lt_error_set(LT_ENOMEM, "%s: out of memory", s->ref);
  const cJSON *l;
  int rc = 0;
  cJSON_ArrayForEach(l, arr) {
    lt__blob_t *b = &s->layers[s->nlayers];
    if (oci) {
      const char *d = str_at(l, "digest");
      if ((rc = blob_from_digest(s->ref, "layer", d, b)) < 0 || (rc = accept_layer(s, str_at(l, "mediaType"), d)) < 0)
        return rc;
    } else {
      const char *p = cJSON_IsString(l) ? l->valuestring : NULL;
      if (!clean_rel(p))
        return lt_error_set(LT_EFORMAT, "%s: manifest.json: layer path '%s' is not inside the archive", s->ref,
                            p ? p : "");
      snprintf(b->path, sizeof b->path, "%s", p);
      const char *hex = strncmp(p, "blobs/sha256/", 13) == 0 ? p + 13 : NULL;
      if (hex) snprintf(b->alt, sizeof b->alt, "sha256:%s", hex);
    }
    s->nlayers++;
  }
  return 0;
}

static int open_oci(lt__source_t *s, const char *tag) {
  lt__blob_t idx = {.path = "index.json"};
  cJSON *index = NULL, *doc = NULL;
  int rc = read_json(s, &idx, "index.json", &index);
  const cJSON *desc = rc == 0 ? pick(s, index, tag, 0) : NULL;
  lt__blob_t man;
  for (int depth = 0; rc == 0; depth++) {
    if (!desc) {
      rc = LT_ENOENT;
      break;
    }
    if ((rc = blob_from_digest(s->ref, "manifest", str_at(desc, "digest"), &man)) < 0 ||
        (rc = read_json(s, &man, "manifest", &doc)) < 0)
      break;
    if (!is_index(desc, doc)) break;
    if (depth == 2) {
      rc = lt_error_set(LT_EFORMAT, "%s: image indexes nested too deep", s->ref);
      break;
    }
    cJSON_Delete(index);
    index = doc, doc = NULL;
    desc = pick(s, index, tag, 1);
  }
  if (rc == 0) {
    snprintf(s->key, sizeof s->key, "%s", man.digest);
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(doc, "config");
    rc = blob_from_digest(s->ref, "config", str_at(cfg, "digest"), &s->config);
  }
  if (rc == 0) rc = take_layers(s, cJSON_GetObjectItemCaseSensitive(doc, "layers"), 1);
  cJSON_Delete(index);
  cJSON_Delete(doc);
  return rc;
}

/* ---- Docker archives ------------------------------------------------------------ */

static int open_docker(lt__source_t *s) {
  lt__blob_t mf = {.path = "manifest.json"};
  cJSON *m = NULL, *cfg = NULL;
  int rc = read_json(s, &mf, "manifest.json", &m);
  if (rc < 0) return rc;
  const cJSON *img = cJSON_GetArrayItem(m, 0);
  if (cJSON_GetArraySize(m) != 1 || !cJSON_IsObject(img))
    rc = lt_error_set(LT_EFORMAT, "%s: manifest.json must list exactly one image (it lists %d)", s->ref,
                      cJSON_GetArraySize(m));
  const char *cp = rc == 0 ? str_at(img, "Config") : NULL;
  if (rc == 0 && !clean_rel(cp))
    rc = lt_error_set(LT_EFORMAT, "%s: manifest.json: Config '%s' is not inside the archive", s->ref, cp ? cp : "");
  if (rc == 0) {
    snprintf(s->config.path, sizeof s->config.path, "%s", cp);
    /* The config's digest is the image's ID; where its name says it ("<hex>.json", "blobs/sha256/<hex>"), it is checked */
    const char *base = strrchr(cp, '/') ? strrchr(cp, '/') + 1 : cp;
    char d[80];
    snprintf(d, sizeof d, "sha256:%.64s", base);
    if (valid_digest(d) && (strlen(base) == 64 || strcmp(base + 64, ".json") == 0))
      snprintf(s->config.digest, sizeof s->config.digest, "%s", d);
    char *text;
    size_t len;
    if ((rc = lt__source_read(s, &s->config, "config", MAX_JSON, &text, &len)) == 0) {
      char hex[65];
      lt_sha256_buf(text, len, hex);
      snprintf(s->key, sizeof s->key, "sha256:%s", hex);
      rc = lt_json_parse(text, len, "config", &cfg) < 0 ? lt_error_wrap(LT_EFORMAT, "%s", s->ref) : 0;
      free(text);
    }
  }
  if (rc == 0) rc = take_layers(s, cJSON_GetObjectItemCaseSensitive(img, "Layers"), 0);
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cfg, "rootfs"), "diff_ids");
  if (rc == 0 && cJSON_GetArraySize(ids) != s->nlayers)
    rc = lt_error_set(LT_EFORMAT, "%s: %d layers but %d diff_ids in the config", s->ref, s->nlayers,
                      cJSON_GetArraySize(ids));
  for (int i = 0; rc == 0 && i < s->nlayers; i++) {
    const cJSON *id = cJSON_GetArrayItem(ids, i);
    if (!valid_digest(cJSON_IsString(id) ? id->valuestring : NULL))
      rc = lt_error_set(LT_EFORMAT, "%s: diff_id %d is not sha256:<64 hex>", s->ref, i);
    else snprintf(s->layers[i].digest, sizeof s->layers[i].digest, "%s", id->valuestring);
  }
  cJSON_Delete(m);
  cJSON_Delete(cfg);
  return rc;
}

/* ---- the source ------------------------------------------------------------------ */

/* One pass over the archive into tmp/layout (lt__layer_t.split). */
static int unpack_pass(lt__source_t *s, int64_t split) {
  int fd = open(s->archive, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return lt_error_set(lt_error_from_errno(errno), "%s: %s: %s", s->ref, s->archive, strerror(errno));
  char what[4300], hex[65];
  snprintf(what, sizeof what, "%s: the archive", s->ref);
  lt__layer_t l = {.fd = fd, .what = what, .split = split};
  int rc = lt__layer_apply(&l, s->dir_fd, NULL, hex);
  close(fd);
  return rc;
}

/* An archive (a local file, or downloaded from a URL into tmp): its index, manifests and configs (and any other
 * file of at most MAX_JSON bytes) unpacked into tmp/layout; its layers wait for lt__source_blob. */
static int unpack_archive(lt__source_t *s, const char *file) {
  char layout[4200];
  if (is_url(file)) {
    snprintf(s->archive, sizeof s->archive, "%s/archive", s->tmp);
    int rc = download(file, s->archive);
    if (rc < 0) return lt_error_wrap(rc, "%s", s->ref);
  } else if (snprintf(s->archive, sizeof s->archive, "%s", file) >= (int)sizeof s->archive) {
    return lt_error_set(LT_EINVAL, "%s: the archive's path is too long", s->ref);
  }
  snprintf(layout, sizeof layout, "%s/layout", s->tmp);
  int rc = lt_fs_mkdirs(layout, 0700);
  if (rc < 0) return rc;
  if ((s->dir_fd = open(layout, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
    return lt_error_set(LT_EIO, "%s: %s", layout, strerror(errno));
  return unpack_pass(s, MAX_JSON);
}

int lt__source_open(const char *cache_dir, const char *ref, lt__source_t *s) {
  memset(s, 0, sizeof *s);
  s->ref = ref;
  s->dir_fd = s->tmp_lock = -1;
  int kind = SRC_OCI;
  char path[4096], tag[256], tmpdir[4200];
  int rc = parse_ref(ref, &kind, path, sizeof path, tag, sizeof tag);
  if (rc < 0) return rc;
  snprintf(tmpdir, sizeof tmpdir, "%s/tmp", cache_dir);
  if ((kind != SRC_OCI || is_url(path)) && (rc = lt__tmp_make(tmpdir, "src", s->tmp, sizeof s->tmp, &s->tmp_lock)) < 0)
    return lt_error_wrap(rc, "%s", ref);
  if (kind == SRC_OCI && is_url(path)) {
    snprintf(s->url, sizeof s->url, "%.*s", (int)strcspn(path, "?#"), path);
    while (strlen(s->url) > 1 && s->url[strlen(s->url) - 1] == '/') s->url[strlen(s->url) - 1] = 0;
    s->dir_fd = open(s->tmp, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (s->dir_fd < 0) rc = lt_error_set(LT_EIO, "%s: %s", s->tmp, strerror(errno));
  } else if (kind == SRC_OCI) {
    s->dir_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (s->dir_fd < 0) rc = lt_error_set(lt_error_from_errno(errno), "%s: %s: %s", ref, path, strerror(errno));
  } else {
    rc = unpack_archive(s, path);
  }
  if (rc == 0) rc = kind == SRC_DOCKER_ARCHIVE ? open_docker(s) : open_oci(s, tag);
  if (rc < 0) lt__source_close(s);
  return rc;
}

void lt__source_close(lt__source_t *s) {
  if (s->dir_fd >= 0) close(s->dir_fd);
  if (s->tmp[0] || s->tmp_lock >= 0) lt__tmp_drop(s->tmp, s->tmp_lock);
  free(s->layers);
  s->layers = NULL;
  s->dir_fd = s->tmp_lock = -1;
  s->tmp[0] = 0;
}
