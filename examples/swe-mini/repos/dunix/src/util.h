/* dunix: the integer helpers of src/util.c */
#ifndef UTIL_H
#define UTIL_H
int triple(int v);
int add_up(const int *a, int len);
#endif
