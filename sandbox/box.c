/* Boxes (sandbox/image.h): stubs until implemented. */
#include "sandbox/image.h"
#include "util/error.h"

#define TODO(what) lt_error_set(LT_EUNSUPP, "sandbox: %s is not implemented yet", what)

int lt_box_create(lt_image_t *img, const lt_sandbox_limits_t *l, lt_box_t **out) {
  *out = NULL;
  return TODO("lt_box_create");
}
void lt_box_destroy(lt_box_t *b) {}
lt_image_t *lt_box_image(const lt_box_t *b) { return NULL; }
int lt_box_exec(lt_box_t *b, const lt_sandbox_job_t *job, lt_sandbox_result_t *res) { return TODO("lt_box_exec"); }
int lt_box_spawn(lt_box_t *b, const lt_sandbox_job_t *job, const lt_box_spawn_opts_t *o, lt_box_proc_t **out) {
  *out = NULL;
  return TODO("lt_box_spawn");
}
int lt_box_proc_stdin(const lt_box_proc_t *p) { return -1; }
int lt_box_proc_stdout(const lt_box_proc_t *p) { return -1; }
int lt_box_proc_stderr(const lt_box_proc_t *p) { return -1; }
void lt_box_proc_close_stdin(lt_box_proc_t *p) {}
int lt_box_proc_kill(lt_box_proc_t *p, int sig, int descendants) { return TODO("lt_box_proc_kill"); }
int lt_box_proc_wait(lt_box_proc_t *p, double timeout_s, int *wstatus) { return TODO("lt_box_proc_wait"); }
void lt_box_proc_free(lt_box_proc_t *p) {}
int lt_box_read_file(lt_box_t *b, const char *path, size_t max, char **out, size_t *len) {
  return TODO("lt_box_read_file");
}
int lt_box_write_file(lt_box_t *b, const char *path, const void *data, size_t len, int mode) {
  return TODO("lt_box_write_file");
}
int lt_box_changes(lt_box_t *b, const char *dir, lt_box_change_t **out, int *n) {
  *out = NULL;
  *n = 0;
  return TODO("lt_box_changes");
}
void lt_box_changes_free(lt_box_change_t *c, int n) {}
int lt_box_pool_create(lt_image_t *img, const lt_sandbox_limits_t *l, int size, lt_box_pool_t **out) {
  *out = NULL;
  return TODO("lt_box_pool_create");
}
int lt_box_pool_take(lt_box_pool_t *p, lt_box_t **out) {
  *out = NULL;
  return TODO("lt_box_pool_take");
}
void lt_box_pool_free(lt_box_pool_t *p) {}
