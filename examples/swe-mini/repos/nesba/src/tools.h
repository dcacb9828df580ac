#ifndef TOOLS_H
#define TOOLS_H
int succ(int v);
int magnitude(int z);
#endif
