/*
 * How samples and loans are exported (export.c): the geometry of their arrays for the buffer
 * protocol, and DLPack capsules.
 */
#ifndef FERRY_PY_EXPORT_H
#define FERRY_PY_EXPORT_H

#include "util.h"

/* How an exported buffer looks: shape and strides in bytes, a struct-module format, and the
 * DLPack data type of its elements (dl_bits 0 when it has none). */
typedef struct pyf_geom {
    void *buf;
    Py_ssize_t len;
    Py_ssize_t itemsize;
    int ndim;
    Py_ssize_t shape[FERRY_TENSOR_DIMS_MAX];
    Py_ssize_t strides[FERRY_TENSOR_DIMS_MAX];
    char *format;          /* heap copy, freed with the geometry */
    const char *no_buffer; /* why the buffer protocol is refused (bfloat16), or NULL */
    uint8_t dl_code, dl_bits;
    bool big_endian;
} pyf_geom;

/* What a taken sample or frame is to its user and to what reads it: held until the user lets it
 * go, then pending while an export (an array, memoryview, DLPack tensor or view) still reads
 * it, released (given back) once none does. */
enum { PYF_HELD = 0, PYF_PENDING = 1, PYF_RELEASED = 2 };
typedef struct pyf_hold {
    int state;
    Py_ssize_t exports;
} pyf_hold;

/* The user lets go: true when it goes back now, false when an export still reads it (it goes
 * when the last does) or it was let go already. */
static inline bool pyf_hold_let_go(pyf_hold *h)
{
    if (h->state != PYF_HELD)
        return false;
    if (h->exports == 0)
        return true;
    h->state = PYF_PENDING;
    return false;
}

/* An export ends: true when it was the last over a pending one, which goes back now. */
static inline bool pyf_hold_unexport(pyf_hold *h)
{
    return --h->exports == 0 && h->state == PYF_PENDING;
}

/* Its owner closes: true (marked released) when it goes back now, false when an export still
 * reads it (pending until the last goes). */
static inline bool pyf_hold_close(pyf_hold *h)
{
    if (h->exports > 0) {
        h->state = PYF_PENDING;
        return false;
    }
    h->state = PYF_RELEASED;
    return true;
}

/* The geometry of a payload of len bytes, of an image (its pixels), of a point cloud (a struct
 * format when its fields can be written in one, else rows of point_step bytes) and of a tensor;
 * false with an exception. pyf_geom_clear frees what they allocated. */
bool pyf_geom_bytes(pyf_geom *g, void *buf, size_t len);
bool pyf_geom_image(pyf_geom *g, void *buf, const ferry_image_header *h,
                    const ferry_image_layout *l);
bool pyf_geom_cloud(pyf_geom *g, void *buf, const ferry_pointcloud_header *h);
bool pyf_geom_tensor(pyf_geom *g, void *buf, const ferry_tensor_header *h);
void pyf_geom_clear(pyf_geom *g);
/* A getbuffer slot's work: fills view over g for owner, or -1 with BufferError. */
int pyf_geom_export(const pyf_geom *g, PyObject *owner, Py_buffer *view, int flags, bool readonly);
/* A point cloud's fields as [(name, offset, datatype, count)]. */
PyObject *pyf_fields_get(const ferry_point_field *fields, uint32_t n);
/* t over data on device: a tensor header's elements (h), or else n bytes; shape and strides
 * are the caller's (FERRY_TENSOR_DIMS_MAX each), which t's point to. */
void pyf_dl_describe(ferry_dl_tensor *t, void *data, ferry_dl_device device,
                     const ferry_tensor_header *h, size_t n, int64_t *shape, int64_t *strides);
/* Parses __dlpack__'s keywords: refuses copy=True and any device but device; *stream is the
 * stream argument (borrowed, Py_None when absent), *versioned whether max_version >= (1, 0). */
bool pyf_dlpack_args(PyObject *args, PyObject *kwargs, ferry_dl_device device, PyObject **stream,
                     bool *versioned);
/* A DLPack capsule over desc (shape and strides copied): "dltensor_versioned" when versioned
 * (flagged read-only unless writable), else "dltensor". It holds a reference to owner; its
 * deleter calls unexport(owner) with the GIL held, once. The caller counts the export on
 * success. */
PyObject *pyf_dlpack_capsule(PyObject *owner, void (*unexport)(PyObject *owner), bool versioned,
                             bool writable, const ferry_dl_tensor *desc);

#endif
