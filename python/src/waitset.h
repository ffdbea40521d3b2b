/*
 * WaitSets (waitset.c), for the Node that makes them.
 */
#ifndef FERRY_PY_WAITSET_H
#define FERRY_PY_WAITSET_H

#include "util.h"

/* Node.waitset(). */
PyObject *pyf_waitset_new(pyf_node *node);

#endif
