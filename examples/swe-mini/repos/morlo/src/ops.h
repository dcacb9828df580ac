/* morlo: the integer helpers of src/ops.c */
#ifndef OPS_H
#define OPS_H
int twice(int v);
int sum_all(const int *a, int num);
#endif
