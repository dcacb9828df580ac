/* Logging: levels, timestamps, component tags; text or JSON lines on stderr. */
#ifndef LT_UTIL_LOG_H
#define LT_UTIL_LOG_H

#include <stdio.h>

typedef enum { LT_LOG_DEBUG = 0, LT_LOG_INFO, LT_LOG_WARN, LT_LOG_ERROR, LT_LOG_OFF } lt_log_level;
typedef enum { LT_LOG_TEXT = 0, LT_LOG_JSON } lt_log_format;

void lt_log_set_level(lt_log_level level);
lt_log_level lt_log_get_level(void);
void lt_log_set_format(lt_log_format fmt);
/* Parses "debug|info|warn|error|off"; returns -1 if unknown. */
int lt_log_level_parse(const char *s);
/* Tag added to every record of this process (e.g. "worker-3"). */
void lt_log_set_process(const char *name);

void lt_log(lt_log_level level, const char *component, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define LT_DEBUG(comp, ...)                                                          \
  do {                                                                               \
    if (lt_log_get_level() <= LT_LOG_DEBUG) lt_log(LT_LOG_DEBUG, comp, __VA_ARGS__); \
  } while (0)
#define LT_INFO(comp, ...) lt_log(LT_LOG_INFO, comp, __VA_ARGS__)
#define LT_WARN(comp, ...) lt_log(LT_LOG_WARN, comp, __VA_ARGS__)
#define LT_ERROR(comp, ...) lt_log(LT_LOG_ERROR, comp, __VA_ARGS__)

#endif
