/* olix: the integer helpers of src/ops.c */
#ifndef OPS_H
#define OPS_H
int half(int v);
int sum(const int *a, int num);
#endif
