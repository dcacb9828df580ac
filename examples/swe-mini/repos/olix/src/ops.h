#ifndef OPS_H
#define OPS_H
int half(int v);
int sum(const int *a, int num);
#endif
