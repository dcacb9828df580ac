/* holmar: the integer helpers of src/util.c */
#ifndef UTIL_H
#define UTIL_H
int succ(int v);
int max2(int price, int tax);
#endif
