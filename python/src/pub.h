/*
 * Publishers and their loans, for the files that use them: publisher.c (ferry.Publisher),
 * loan.c (ferry.Loan) and gpu_pub.c (a GpuPublisher publishes through a Publisher).
 */
#ifndef FERRY_PY_PUB_H
#define FERRY_PY_PUB_H

#include "export.h"
#include "util.h"

struct pyf_loan;

typedef struct pyf_pub {
    PyObject_HEAD pyf_child link;
    ferry_publisher *pub; /* NULL once destroyed (link.closed: closed) */
    PyThread_type_lock lock;
    pyf_kind kind;
    char *topic;
    char *type_name;
    struct pyf_loan *loans; /* every Loan object alive */
    PyObject *owner;        /* borrowed: the GpuPublisher that publishes through it, or NULL; set
                             * until that one's ferry object is destroyed */
    pyf_child *owner_link;  /* the owner's link (its closed flag) */
} pyf_pub;
PYF_CHILD_OBJECT(pyf_pub);

/* Lets the publisher's lock go, then finishes what its closing left to the lock's holder: the
 * publisher itself, or its closed GpuPublisher. */
static inline void pyf_pub_unlock(pyf_pub *p)
{
    pyf_endpoint_unlock(p->lock, &p->link, p->owner, p->owner_link);
}

enum { PYF_LOAN_HELD = 0, PYF_LOAN_PUBLISHED = 1, PYF_LOAN_RELEASED = 2 };

/* A Loan: a writable buffer over what a ferry loan call gave. */
typedef struct pyf_loan {
    PyObject_HEAD pyf_pub *pub; /* a strong reference */
    struct pyf_loan *prev, *next;
    pyf_kind kind;
    int state; /* PYF_LOAN_* */
    Py_ssize_t exports;
    void *payload;
    size_t size;
    union {
        ferry_image img;
        ferry_pointcloud pc;
        ferry_tensor t;
    } u;
    pyf_geom geom;
} pyf_loan;

/* publisher.c */
PyObject *pyf_pub_new(pyf_node *node, PyObject *args, PyObject *kwargs);
/* Raises BusyError when the publisher publishes through a GpuPublisher. */
bool pyf_pub_own(pyf_pub *p, const char *what);

/* loan.c */
/* A Loan of p's of kind over geometry g (taken over: cleared on failure too), in p's list; the
 * caller sets what the ferry loan call gave (u, payload, size). */
pyf_loan *pyf_loan_new(pyf_pub *p, pyf_kind kind, pyf_geom *g);

#endif
