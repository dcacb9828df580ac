#ifndef CORE_H
#define CORE_H
int negate(int v);
int magnitude(int x);
#endif
