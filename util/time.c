/* Clocks (util/time.h). */
#include "util/time.h"

#include <errno.h>
#include <time.h>

uint64_t lt_time_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double lt_time_mono_s(void) { return (double)lt_time_mono_ns() * 1e-9; }

int64_t lt_time_mono_ms(void) { return (int64_t)(lt_time_mono_ns() / 1000000); }

int64_t lt_time_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void lt_time_sleep_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}
