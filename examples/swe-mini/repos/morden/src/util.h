/* morden: the integer helpers of src/util.c */
#ifndef UTIL_H
#define UTIL_H
int twice(int v);
int dist0(int val);
#endif
