/* Clocks. */
#ifndef LT_UTIL_TIME_H
#define LT_UTIL_TIME_H

#include <stdint.h>

uint64_t lt_time_mono_ns(void); /* monotonic, for durations */
double lt_time_mono_s(void);
int64_t lt_time_mono_ms(void); /* monotonic milliseconds: deadlines, heartbeats, ages */
int64_t lt_time_wall_ms(void); /* Unix epoch milliseconds, for records */
void lt_time_sleep_ms(int64_t ms);

#endif
