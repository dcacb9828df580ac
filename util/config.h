/* Job configuration: JSON files validated against a schema.
 *
 * Each layer owns a fragment of the schema (a table of lt_cfg_entry_t); the
 * binary hands the list of fragments to the loader.  Loading parses the file
 * (errors carry line and column), applies `--set path=value` overrides,
 * rejects unknown keys with a did-you-mean, type- and range-checks every value
 * and fills in defaults, so consumers read a complete tree. */
#ifndef LT_UTIL_CONFIG_H
#define LT_UTIL_CONFIG_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "util/buf.h"

typedef enum {
  LT_CFG_BOOL,
  LT_CFG_INT,
  LT_CFG_NUM,
  LT_CFG_STR,
  LT_CFG_PATH,        /* string naming a file or folder; relative: from the folder of the config file that sets it */
  LT_CFG_ENUM,        /* string, one of `choices` */
  LT_CFG_INT_OR_ENUM, /* integer, or a string in `choices` (e.g. max_staleness: "auto") */
  LT_CFG_NUM_LIST,    /* array of numbers */
  LT_CFG_STR_LIST,    /* array of strings */
  LT_CFG_MAP,         /* object keyed by names (1-64 letters, digits, '_', '-'; domains become Prometheus labels
                         and file names); children described by "<path>.*" entries */
  LT_CFG_JSON,        /* any JSON value, validated by its consumer */
  LT_CFG_REMOVED      /* a key no longer accepted: any value is refused with `doc`, which names what replaces it */
} lt_cfg_type;

typedef struct {
  const char *path; /* "learner.batch.trajectories"; a "*" segment matches any map key */
  lt_cfg_type type;
  const char *def;     /* default as JSON text, or NULL: no default (key is optional) */
  double min, max;     /* inclusive range for INT/NUM (and list elements); unused if min > max */
  const char *choices; /* "a|b|c" for ENUM and INT_OR_ENUM */
  const char *doc;     /* one line for docs/config.md */
} lt_cfg_entry_t;

typedef struct {
  const char *section; /* title in the docs */
  const char *doc;     /* paragraph in the docs */
  const lt_cfg_entry_t *entries;
  int n;
} lt_cfg_schema_t;

#define LT_CFG_NORANGE 1, 0

typedef struct {
  cJSON *root; /* complete tree: file + overrides + defaults */
  const lt_cfg_schema_t *const *schemas;
  int nschemas;
  char source[512]; /* file the config came from ("" if none) */
} lt_config_t;

/* Loads `path` (NULL: only defaults and overrides).  `sets` are "a.b.c=value"
 * strings; value is parsed as JSON, and taken as a plain string when it does
 * not parse.  Errors: LT_EFORMAT (syntax, with line:col), LT_ECONFIG (schema),
 * LT_ENOENT/LT_EIO (file); the detail names the JSON path. */
int lt_config_load(lt_config_t *cfg, const char *path, const char *const *sets, int nsets,
                   const lt_cfg_schema_t *const *schemas, int nschemas);
/* Same from an in-memory JSON object (taken over by the config). */
int lt_config_from_json(lt_config_t *cfg, cJSON *root, const char *const *sets, int nsets,
                        const lt_cfg_schema_t *const *schemas, int nschemas);
void lt_config_free(lt_config_t *cfg);

/* Accessors for paths the schema declares with a default.  Asking for a path
 * the schema does not declare is a programming error: LT_ASSERT exits 70 naming the path
 * (the test suite reads every declared path). */
int64_t lt_config_int(const lt_config_t *cfg, const char *path);
double lt_config_num(const lt_config_t *cfg, const char *path);
int lt_config_bool(const lt_config_t *cfg, const char *path);
const char *lt_config_str(const lt_config_t *cfg, const char *path);
/* Raw node (maps, lists, optional keys, INT_OR_ENUM); NULL when absent. */
const cJSON *lt_config_get(const lt_config_t *cfg, const char *path);

/* The resolved configuration as pretty JSON (caller frees). */
char *lt_config_dump(const lt_config_t *cfg);
/* Markdown reference of all fragments (docs/config.md is generated from it). */
void lt_config_doc_markdown(const lt_cfg_schema_t *const *schemas, int nschemas, lt_buf_t *out);

/* Levenshtein distance, for did-you-mean suggestions elsewhere too. */
int lt_edit_distance(const char *a, const char *b);

#endif
