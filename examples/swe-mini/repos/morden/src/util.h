#ifndef UTIL_H
#define UTIL_H
int double(int v);
int dist0(int val);
#endif
