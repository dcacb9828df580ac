/* Test images (tests/support/image.h): tar layers and an OCI image layout written with libarchive. */
#include "tests/support/image.h"

#include <archive.h>
#include <archive_entry.h>
#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/fs.h"
#include "util/sha256.h"

#define MTIME 1700000000 /* fixed: the same layers give the same digests */

static la_ssize_t buf_write(struct archive *a, void *ud, const void *p, size_t n) {
  lt_buf_append(ud, p, n);
  return (la_ssize_t)n;
}

static int fail(const char *what, const char *detail) {
  fprintf(stderr, "test image: %s: %s\n", what, detail ? detail : strerror(errno));
  return -1;
}

static int add_entry(struct archive *a, const lt_test_entry_t *e) {
  struct archive_entry *ae = archive_entry_new();
  char *host = NULL;
  size_t len = e->type == 'f' ? (e->len ? e->len : strlen(e->data ? e->data : "")) : 0;
  const char *data = e->data;
  if (e->type == 'F') {
    if (lt_fs_read_file(e->data, 256u << 20, &host, &len) < 0) return fail(e->data, "cannot read");
    data = host;
  }
  archive_entry_set_pathname(ae, e->path);
  archive_entry_set_mtime(ae, MTIME, 0);
  archive_entry_set_uid(ae, 0);
  archive_entry_set_gid(ae, 0);
  int dir = e->type == 'd';
  archive_entry_set_perm(ae, (mode_t)(e->mode ? e->mode : dir ? 0755 : 0644));
  switch (e->type) {
  case 'd': archive_entry_set_filetype(ae, AE_IFDIR); break;
  case 'l': archive_entry_set_filetype(ae, AE_IFLNK), archive_entry_set_symlink(ae, e->data); break;
  case 'h': archive_entry_set_filetype(ae, AE_IFREG), archive_entry_set_hardlink(ae, e->data); break;
  case 'p': archive_entry_set_filetype(ae, AE_IFIFO); break;
  case 'c':
    archive_entry_set_filetype(ae, AE_IFCHR), archive_entry_set_rdevmajor(ae, 1), archive_entry_set_rdevminor(ae, 3);
    break;
  default: archive_entry_set_filetype(ae, AE_IFREG), archive_entry_set_size(ae, (la_int64_t)len); break;
  }
  int rc = archive_write_header(a, ae) == ARCHIVE_OK ? 0 : fail(e->path, archive_error_string(a));
  if (rc == 0 && len && archive_write_data(a, data, len) != (la_ssize_t)len)
    rc = fail(e->path, archive_error_string(a));
  archive_entry_free(ae);
  free(host);
  return rc;
}

/* The layer as a tar (diff_id: its SHA-256), and as stored (compressed as asked). */
static int write_layer(const lt_test_layer_t *l, lt_buf_t *tar, lt_buf_t *blob) {
  struct archive *a = archive_write_new();
  int rc = archive_write_set_format_pax_restricted(a) == ARCHIVE_OK && archive_write_add_filter_none(a) == ARCHIVE_OK &&
                   archive_write_set_bytes_in_last_block(a, 1) == ARCHIVE_OK &&
                   archive_write_open(a, tar, NULL, buf_write, NULL) == ARCHIVE_OK
               ? 0
               : fail("tar", archive_error_string(a));
  for (int i = 0; rc == 0 && i < l->n; i++) rc = add_entry(a, &l->entries[i]);
  if (archive_write_close(a) != ARCHIVE_OK && rc == 0) rc = fail("tar", archive_error_string(a));
  archive_write_free(a);
  if (rc < 0 || lt_buf_ok(tar) < 0) return -1;
  if (!l->compression) {
    lt_buf_append(blob, tar->data, tar->len);
    return lt_buf_ok(blob);
  }
  a = archive_write_new();
  int f = strcmp(l->compression, "zstd") == 0 ? archive_write_add_filter_zstd(a) : archive_write_add_filter_gzip(a);
  struct archive_entry *ae = archive_entry_new();
  archive_entry_set_pathname(ae, "layer");
  archive_entry_set_filetype(ae, AE_IFREG);
  archive_entry_set_size(ae, (la_int64_t)tar->len);
  rc = f == ARCHIVE_OK && archive_write_set_format_raw(a) == ARCHIVE_OK &&
               archive_write_set_bytes_in_last_block(a, 1) == ARCHIVE_OK &&
               archive_write_open(a, blob, NULL, buf_write, NULL) == ARCHIVE_OK &&
               archive_write_header(a, ae) == ARCHIVE_OK &&
               archive_write_data(a, tar->data, tar->len) == (la_ssize_t)tar->len &&
               archive_write_close(a) == ARCHIVE_OK
           ? 0
           : fail(l->compression, archive_error_string(a));
  archive_entry_free(ae);
  archive_write_free(a);
  return rc < 0 ? -1 : lt_buf_ok(blob);
}

/* Stores a blob under dir/blobs/sha256/ and gives its digest. */
static int put_blob(const char *dir, const void *p, size_t n, char digest[72]) {
  char hex[65], path[4096];
  lt_sha256_buf(p, n, hex);
  snprintf(digest, 72, "sha256:%s", hex);
  snprintf(path, sizeof path, "%s/blobs/sha256/%s", dir, hex);
  return lt_fs_write_atomic(path, p, n) == 0 ? 0 : fail(path, "cannot write");
}

static const char *host_arch(void) {
  static struct utsname u;
  if (uname(&u) != 0) return "amd64";
  return strcmp(u.machine, "aarch64") == 0 ? "arm64" : strcmp(u.machine, "x86_64") == 0 ? "amd64" : u.machine;
}

int lt_test_oci_write(const char *dir, const char *tag, const lt_test_layer_t *layers, int n, const char *config_json,
                      char *digest) {
  char blobs[4096], d[72];
  snprintf(blobs, sizeof blobs, "%s/blobs/sha256", dir);
  if (lt_fs_mkdirs(blobs, 0755) < 0) return fail(blobs, NULL);
  lt_buf_t layers_json = {0}, diff_ids = {0}, doc = {0};
  int rc = 0;
  for (int i = 0; rc == 0 && i < n; i++) {
    lt_buf_t tar = {0}, blob = {0};
    char hex[65];
    rc = write_layer(&layers[i], &tar, &blob);
    if (rc == 0) rc = put_blob(dir, blob.data, blob.len, d);
    if (rc == 0) {
      lt_sha256_buf(tar.data, tar.len, hex);
      const char *c = layers[i].compression;
      lt_buf_printf(&layers_json,
                    "%s{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar%s%s\",\"digest\":\"%s\",\"size\":%zu}",
                    i ? "," : "", c ? "+" : "", c ? c : "", d, blob.len);
      lt_buf_printf(&diff_ids, "%s\"sha256:%s\"", i ? "," : "", hex);
    }
    lt_buf_free(&tar);
    lt_buf_free(&blob);
  }
  char cfg_digest[72];
  lt_buf_printf(
      &doc,
      "{\"architecture\":\"%s\",\"os\":\"linux\",\"config\":%s,\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[%s]}}",
      host_arch(), config_json ? config_json : "{}", diff_ids.data ? diff_ids.data : "");
  if (rc == 0) rc = lt_buf_ok(&doc) == 0 ? put_blob(dir, doc.data, doc.len, cfg_digest) : -1;
  size_t cfg_len = doc.len;
  lt_buf_reset(&doc);
  lt_buf_printf(
      &doc,
      "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":"
      "\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\",\"size\":%zu},\"layers\":[%s]}",
      cfg_digest, cfg_len, layers_json.data ? layers_json.data : "");
  if (rc == 0) rc = lt_buf_ok(&doc) == 0 ? put_blob(dir, doc.data, doc.len, d) : -1;
  size_t man_len = doc.len;
  lt_buf_reset(&doc);
  lt_buf_printf(
      &doc,
      "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":"
      "\"%s\",\"size\":%zu,\"annotations\":{\"org.opencontainers.image.ref.name\":\"%s\"}}]}",
      d, man_len, tag);
  char path[4096];
  snprintf(path, sizeof path, "%s/index.json", dir);
  if (rc == 0 && (lt_buf_ok(&doc) < 0 || lt_fs_write_atomic(path, doc.data, doc.len) < 0))
    rc = fail(path, "cannot write");
  snprintf(path, sizeof path, "%s/oci-layout", dir);
  const char *layout = "{\"imageLayoutVersion\":\"1.0.0\"}";
  if (rc == 0 && lt_fs_write_atomic(path, layout, strlen(layout)) < 0) rc = fail(path, "cannot write");
  if (rc == 0 && digest) snprintf(digest, 72, "%s", d);
  lt_buf_free(&layers_json);
  lt_buf_free(&diff_ids);
  lt_buf_free(&doc);
  return rc;
}

/* ---- the busybox image ---------------------------------------------------------- */

#define BUSYBOX "/bin/busybox"

static int is_static_elf(const char *path) {
  FILE *f = fopen(path, "rb");
  Elf64_Ehdr h;
  int ok = f && fread(&h, sizeof h, 1, f) == 1 && memcmp(h.e_ident, ELFMAG, SELFMAG) == 0 &&
           h.e_ident[EI_CLASS] == ELFCLASS64;
  for (int i = 0; ok && i < h.e_phnum; i++) {
    Elf64_Phdr p;
    ok = fseek(f, (long)(h.e_phoff + (Elf64_Off)i * h.e_phentsize), SEEK_SET) == 0 && fread(&p, sizeof p, 1, f) == 1 &&
         p.p_type != PT_INTERP;
  }
  if (f) fclose(f);
  return ok;
}

lt_test_layer_t lt_test_busybox_layer(void) {
  static lt_test_entry_t e[1024];
  static char names[512][64];
  static int n;
  if (n == 0) {
    static const lt_test_entry_t base[] = {
        {"bin", 'd', 0, NULL, 0},
        {"etc", 'd', 0, NULL, 0},
        {"tmp", 'd', 01777, NULL, 0},
        {"root", 'd', 0700, NULL, 0},
        {"home", 'd', 0, NULL, 0},
        {"home/user", 'd', 0, NULL, 0},
        {"bin/busybox", 'F', 0755, BUSYBOX, 0},
        {"etc/passwd", 'f', 0, "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n", 0},
        {"etc/group", 'f', 0, "root:x:0:\nuser:x:1000:\n", 0},
    };
    for (; n < (int)(sizeof base / sizeof base[0]); n++) e[n] = base[n];
    FILE *p = popen(BUSYBOX " --list", "r");
    char line[64];
    for (int k = 0; p && k < 512 && fgets(line, sizeof line, p);) {
      line[strcspn(line, "\n")] = 0;
      if (!line[0] || strcmp(line, "busybox") == 0) continue;
      snprintf(names[k], sizeof names[k], "bin/%s", line);
      e[n++] = (lt_test_entry_t){names[k++], 'l', 0777, "busybox", 0};
    }
    if (p) pclose(p);
  }
  return (lt_test_layer_t){e, n, NULL};
}

const char *lt_test_busybox_image(void) {
  static char ref[4200];
  if (ref[0]) return ref;
  if (!is_static_elf(BUSYBOX)) {
    fail(BUSYBOX, "not a static busybox (install Debian's busybox-static)");
    return NULL;
  }
  char hex[65], dir[4096], tmp[4200];
  if (lt_sha256_file(BUSYBOX, hex) < 0) return NULL;
  const char *t = getenv("TMPDIR");
  /* v1: this builder's version; a change to the layer or config below must bump it */
  snprintf(dir, sizeof dir, "%s/longtail-test-images/busybox-v1-%.16s", t && *t ? t : "/tmp", hex);
  snprintf(ref, sizeof ref, "oci:%s:latest", dir);
  char index[4200];
  snprintf(index, sizeof index, "%s/index.json", dir);
  if (lt_fs_exists(index)) return ref;
  snprintf(tmp, sizeof tmp, "%s.tmp-%d", dir, (int)getpid());
  lt_test_layer_t l = lt_test_busybox_layer();
  const char *cfg =
      "{\"Env\":[\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"],\"Cmd\":[\"/bin/sh\"]}";
  if (lt_test_oci_write(tmp, "latest", &l, 1, cfg, NULL) < 0) {
    lt_fs_remove_tree(tmp);
    ref[0] = 0;
    return NULL;
  }
  if (rename(tmp, dir) != 0) lt_fs_remove_tree(tmp); /* another test process was first: its image is the same */
  return ref;
}
