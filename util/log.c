/* Logging (util/log.h): levels, timestamps, component tags; text or JSON lines on stderr. */
#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "util/json.h"

static lt_log_level g_level = LT_LOG_INFO;
static lt_log_format g_format = LT_LOG_TEXT;
static char g_process[64];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *level_names[] = {"debug", "info", "warn", "error", "off"};

void lt_log_set_level(lt_log_level level) { g_level = level; }
lt_log_level lt_log_get_level(void) { return g_level; }
void lt_log_set_format(lt_log_format fmt) { g_format = fmt; }

void lt_log_set_process(const char *name) { snprintf(g_process, sizeof g_process, "%s", name ? name : ""); }

int lt_log_level_parse(const char *s) {
  for (int i = 0; i <= LT_LOG_OFF; i++)
    if (strcmp(s, level_names[i]) == 0) return i;
  return -1;
}

void lt_log(lt_log_level level, const char *component, const char *fmt, ...) {
  if (level < g_level || level >= LT_LOG_OFF) return;
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);

  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char when[40];
  snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
           tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);

  FILE *out = stderr;
  pthread_mutex_lock(&g_lock);
  if (g_format == LT_LOG_JSON) {
    lt_buf_t b = {0};
    lt_buf_printf(&b, "{\"ts\":\"%s\",\"level\":\"%s\",\"component\":", when, level_names[level]);
    lt_json_quote(&b, component ? component : "");
    if (g_process[0]) {
      lt_buf_puts(&b, ",\"process\":");
      lt_json_quote(&b, g_process);
    }
    lt_buf_puts(&b, ",\"msg\":");
    lt_json_quote(&b, msg);
    lt_buf_puts(&b, "}\n");
    if (b.data) fwrite(b.data, 1, b.len, out);
    lt_buf_free(&b);
  } else {
    fprintf(out, "%s %-5s [%s%s%s] %s\n", when, level_names[level], g_process, g_process[0] ? "/" : "",
            component ? component : "", msg);
  }
  fflush(out);
  pthread_mutex_unlock(&g_lock);
}
