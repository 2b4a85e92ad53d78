/* The one loop numpy cannot vectorise: where each pcap record starts.
 *
 * walk(buf, big_endian, out) -> (count, end): from byte 8 of `buf` (the caplen field of the
 * first record header), writes to the int64 buffer `out` the offset of every record's caplen
 * field while it lies within the buffer (p <= len - 8), stepping caplen + 16 bytes; returns
 * how many it wrote and the offset after the last one. Same result as read._walk_python.
 * `out` must hold len(buf) / 16 + 1 entries. Plain C, no numpy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *walk(PyObject *self, PyObject *args)
{
    Py_buffer buf, out;
    int big;
    if (!PyArg_ParseTuple(args, "y*pw*", &buf, &big, &out))
        return NULL;
    const unsigned char *b = (const unsigned char *)buf.buf;
    int64_t *o = (int64_t *)out.buf;
    Py_ssize_t n = buf.len, cap = out.len / (Py_ssize_t)sizeof(int64_t), k = 0;
    int64_t p = 8, lim = (int64_t)n - 8;
    Py_BEGIN_ALLOW_THREADS
    while (p <= lim && k < cap) {
        const unsigned char *q = b + p;
        uint32_t cl = big ? ((uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3])
                          : ((uint32_t)q[3] << 24 | (uint32_t)q[2] << 16 | (uint32_t)q[1] << 8 | q[0]);
        o[k++] = p;
        p += (int64_t)cl + 16;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&out);
    if (p <= lim) {
        PyErr_SetString(PyExc_ValueError, "output buffer too small");
        return NULL;
    }
    return Py_BuildValue("nL", k, (long long)p);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Offsets of the caplen fields of the pcap records in a buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
