/* The Prometheus text exposition (format 0.0.4) on a libuv loop: GET /metrics answers with its owner's live
 * samples, then the latest value of every gauge set with lt_prom_set.  A gauge's name becomes a family that
 * promtool accepts: the owner's prefix, every other character than [A-Za-z0-9] as _, and a unit suffix as the
 * base unit Prometheus wants, its value scaled to it (_ms → _seconds, _mb → _bytes, _per_s → _per_second). */
#ifndef LT_NET_PROM_H
#define LT_NET_PROM_H

#include <uv.h>

#include "util/buf.h"

typedef struct lt_prom lt_prom_t;

/* At each scrape, before the gauges: the owner's own samples, written with lt_prom_sample. */
typedef void (*lt_prom_fill_fn)(lt_buf_t *b, void *ud);

/* Listens on host:port (0: any free port); prefix starts every gauge's family ("longtail_"). */
int lt_prom_listen(uv_loop_t *loop, const char *host, int port, const char *prefix, lt_prom_fill_fn fill, void *ud,
                   lt_prom_t **out);
int lt_prom_port(const lt_prom_t *p);
/* One sample of `family` with its HELP and TYPE ("gauge", "counter") lines. */
void lt_prom_sample(lt_buf_t *b, const char *family, const char *type, const char *help, double v);
/* The latest value of gauge `name`; with label_key, of its sample label_key="label" (characters that would end
 * the label become _). */
void lt_prom_set(lt_prom_t *p, const char *name, const char *label_key, const char *label, double v);
/* Stops listening; frees on the loop. */
void lt_prom_close(lt_prom_t *p);

#endif
