/* alba: the integer helpers of src/ops.c */
#ifndef OPS_H
#define OPS_H
int negate(int v);
int absval(int v);
#endif
