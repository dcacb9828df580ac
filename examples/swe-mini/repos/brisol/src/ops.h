/* brisol: the integer helpers of src/ops.c */
#ifndef OPS_H
#define OPS_H
int half(int v);
int total(const int *a, int size);
#endif
