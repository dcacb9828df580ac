/* alix: the integer helpers of src/util.c */
#ifndef UTIL_H
#define UTIL_H
int half(int v);
int greater(int first, int second);
#endif
