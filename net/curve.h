/* ZeroMQ CURVE on the daemon-worker link: key files, socket options and the
 * ZAP handler that admits only the listed worker keys. */
#ifndef LT_NET_CURVE_H
#define LT_NET_CURVE_H

#include <stdint.h>
#include <uv.h>

#include "net/zsock.h"

typedef struct {
  uint8_t (*keys)[32];
  int n;
} lt_curve_keys_t;

/* A key file as `longtail keygen` writes it (the first non-comment line, 40
 * Z85 characters).  `what` names the config key in errors (LT_ECONFIG). */
int lt_curve_read_key(const char *path, const char *what, char z85[41]);
/* Allowed public keys: a file with one key per line, or a directory of *.pub. */
int lt_curve_load_keys(const char *path, const char *what, lt_curve_keys_t *k);
/* Appends a Z85 public key; `where` names its origin in errors. */
int lt_curve_keys_add(lt_curve_keys_t *k, const char *z85, const char *what, const char *where);
void lt_curve_keys_free(lt_curve_keys_t *k);
/* Socket options, before bind/connect. */
int lt_zsock_curve_server(lt_zsock_t *z, const char *secret_z85);
int lt_zsock_curve_client(lt_zsock_t *z, const char *server_pub, const char *pub, const char *sec);

/* The ZAP handler of a context: admits CURVE clients whose key is in `keys`
 * (taken over), refuses and logs the rest.  Start it before binding. */
typedef struct lt_zap lt_zap_t;
int lt_zap_start(uv_loop_t *loop, void *ctx, lt_curve_keys_t *keys, lt_zap_t **out);
void lt_zap_close(lt_zap_t *h);

/* A CURVE server's keys, checked before it listens, and its ZAP handler started: its secret key (read from
 * secret_path into secret), the worker keys it admits (client_keys: a file, or a folder of .pub; "" none), and,
 * with local_dir, a key pair made for the workers it starts itself, written there as local-worker.key and
 * local-worker.pub beside the server's server.pub (mode 0600), admitted for this run only.  Errors name the
 * transport.* keys. */
int lt_curve_serve(uv_loop_t *loop, void *ctx, const char *secret_path, const char *client_keys, const char *local_dir,
                   char secret[41], lt_zap_t **zap);

#endif
