#ifndef CORE_H
#define CORE_H
int half(int v);
int greater(int p, int q);
#endif
