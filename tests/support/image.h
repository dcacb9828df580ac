/* Test images written as OCI image layouts with libarchive: no network, no tools, a few milliseconds.  The
 * shared one (lt_test_busybox_image) is Debian's busybox-static with its applets, built once per machine and reused
 * by every test that needs an image root (sandbox/, envs/swe); tests that need their own layers (whiteouts, a
 * corrupt blob, an entry writing "../") write them with lt_test_oci_write over lt_test_busybox_layer. */
#ifndef LT_TESTS_IMAGE_H
#define LT_TESTS_IMAGE_H

#include <stddef.h>

typedef struct {
  const char *path; /* as stored in the tar ("etc/passwd", "a/.wh.b", "../x": taken as written) */
  char type;        /* 'f' file, 'F' file copied from the host path in data, 'd' directory, 'l' symlink,
                       'h' hard link, 'p' fifo, 'c' character device (major 1, minor 3: /dev/null's) */
  int mode;         /* permission bits (setuid included); 0: 0644 for files, 0755 for directories */
  const char *data; /* 'f': the content (len bytes; strlen when len is 0); 'F': the host file; 'l'/'h': the target */
  size_t len;
} lt_test_entry_t;

typedef struct {
  const lt_test_entry_t *entries;
  int n;
  const char *compression; /* NULL: a plain tar; "gzip" or "zstd" */
} lt_test_layer_t;

/* Writes an OCI image layout at dir (created): the layers in order, one manifest with the ref name `tag`, and a
 * config whose "config" object is config_json (e.g. {"Env":["A=1"],"WorkingDir":"/w","User":"1000"}; NULL: {}).
 * 0, or -1 with a message on stderr.  digest (may be NULL, 72 bytes): the manifest's "sha256:<hex>". */
int lt_test_oci_write(const char *dir, const char *tag, const lt_test_layer_t *layers, int n, const char *config_json,
                      char *digest);
/* The base layer: /bin/busybox with each applet a symlink to it in /bin, /etc/passwd (root, user 1000), /etc/group,
 * /tmp (1777), /root, /home/user. */
lt_test_layer_t lt_test_busybox_layer(void);
/* "oci:DIR:latest" of the busybox layer alone with Env PATH, built once under $TMPDIR/longtail-test-images and
 * reused (by every test process); NULL (message on stderr) when /bin/busybox is not a static busybox. */
const char *lt_test_busybox_image(void);

#endif
