#ifndef OPS_H
#define OPS_H
int negate(int v);
int absval(int v);
#endif
