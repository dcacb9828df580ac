/* kelba: the integer helpers of src/core.c */
#ifndef CORE_H
#define CORE_H
int half(int v);
int greater(int p, int q);
#endif
