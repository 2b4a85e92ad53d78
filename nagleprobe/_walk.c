/* The one loop numpy cannot vectorise: where each pcap record starts (and, since it is
 * faster than numpy's gathers, reading header words at known offsets: u32_rows below).
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

/* The 32-bit word at q, in the file's byte order. */
static inline uint32_t word(const unsigned char *q, int big)
{
    return big ? ((uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3])
               : ((uint32_t)q[3] << 24 | (uint32_t)q[2] << 16 | (uint32_t)q[1] << 8 | q[0]);
}

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
        uint32_t cl = word(q, big);
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

/* walk_headers(buf, big_endian, start, frac_mul, offset, ts_ns, caplen, wirelen) -> (count,
 * end): walk's records from offset `start` (where a record header begins) and their header
 * fields, into four int64 buffers of equal size: where each header begins, its time
 * (seconds * 1e9 + fraction * frac_mul), captured and original length. Stops like walk, or
 * when the buffers are full; `end` is 8 bytes past the start of the next record. */
static PyObject *walk_headers(PyObject *self, PyObject *args)
{
    Py_buffer buf, b_off, b_ts, b_cl, b_wl;
    int big;
    Py_ssize_t start;
    long long mul;
    if (!PyArg_ParseTuple(args, "y*pnLw*w*w*w*", &buf, &big, &start, &mul, &b_off, &b_ts,
                          &b_cl, &b_wl))
        return NULL;
    const unsigned char *b = (const unsigned char *)buf.buf;
    int64_t *off = b_off.buf, *ts = b_ts.buf, *cl = b_cl.buf, *wl = b_wl.buf;
    Py_ssize_t n = buf.len, k = 0, cap = b_off.len / (Py_ssize_t)sizeof(int64_t);
    int ok = start >= 0 && b_ts.len == b_off.len && b_cl.len == b_off.len
             && b_wl.len == b_off.len;
    int64_t p = (int64_t)start + 8, lim = (int64_t)n - 8;
    Py_BEGIN_ALLOW_THREADS
    while (ok && p <= lim && k < cap) {
        const unsigned char *q = b + p;
        uint32_t c = word(q, big);
        off[k] = p - 8;
        ts[k] = (int64_t)word(q - 8, big) * 1000000000 + (int64_t)word(q - 4, big) * mul;
        cl[k] = c;
        wl[k] = word(q + 4, big);
        k++;
        p += (int64_t)c + 16;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&b_off);
    PyBuffer_Release(&b_ts);
    PyBuffer_Release(&b_cl);
    PyBuffer_Release(&b_wl);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "walk_headers: bad start or output buffers");
        return NULL;
    }
    return Py_BuildValue("nL", k, (long long)p);
}

/* walk_blocks(buf, pos, big_endian, max_block, out) -> (count, pos, blocks): from offset
 * `pos`, steps over the packet blocks (EPB, SPB, PB) that lie wholly in `buf`, writing their
 * offsets to `out`; stops before any other block, a block with an invalid length, one that
 * runs past the buffer or one whose trailing copy of its length differs (the caller handles
 * those). Returns how many offsets it wrote, where it stopped and how many blocks it passed.
 */
static PyObject *walk_blocks(PyObject *self, PyObject *args)
{
    Py_buffer buf, out;
    Py_ssize_t pos;
    int big;
    long long max_block;
    if (!PyArg_ParseTuple(args, "y*npLw*", &buf, &pos, &big, &max_block, &out))
        return NULL;
    const unsigned char *b = (const unsigned char *)buf.buf;
    int64_t *o = (int64_t *)out.buf;
    Py_ssize_t n = buf.len, cap = out.len / (Py_ssize_t)sizeof(int64_t), k = 0, blocks = 0;
    Py_BEGIN_ALLOW_THREADS
    while (pos >= 0 && pos + 8 <= n && k < cap) {
        const unsigned char *q = b + pos;
        uint32_t bt = word(q, big), bl = word(q + 4, big);
        if ((bt != 6 && bt != 3 && bt != 2) || bl < 12 || (bl & 3) || (long long)bl > max_block
            || pos + (Py_ssize_t)bl > n || word(q + bl - 4, big) != bl)
            break;
        o[k++] = pos;
        pos += bl;
        blocks++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&out);
    return Py_BuildValue("nnn", k, pos, blocks);
}

/* u32_rows(buf, idx, width, big_endian, out): read._u32_rows, the `width` consecutive 32-bit
 * words at each byte offset idx[i] (int64) of `buf`, into row i of the int64 buffer `out`
 * (n * width entries). IndexError if a row runs past the buffer (nothing is then promised
 * about `out`). */
static PyObject *u32_rows(PyObject *self, PyObject *args)
{
    Py_buffer buf, idx, out;
    int width, big;
    if (!PyArg_ParseTuple(args, "y*y*ipw*", &buf, &idx, &width, &big, &out))
        return NULL;
    const unsigned char *b = (const unsigned char *)buf.buf;
    const int64_t *at = (const int64_t *)idx.buf;
    int64_t *o = (int64_t *)out.buf;
    Py_ssize_t n = idx.len / (Py_ssize_t)sizeof(int64_t), len = buf.len;
    int ok = width > 0 && out.len == n * width * (Py_ssize_t)sizeof(int64_t);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        int64_t p = at[i];
        if (p < 0 || p > (int64_t)len - 4 * (int64_t)width) {
            ok = 0;
            break;
        }
        for (int j = 0; j < width; j++)
            o[i * width + j] = word(b + p + 4 * j, big);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&idx);
    PyBuffer_Release(&out);
    if (!ok) {
        PyErr_SetString(PyExc_IndexError, "u32_rows: a row runs past the buffer");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"walk_headers", walk_headers, METH_VARARGS, "The pcap records of a buffer and their headers."},
    {"u32_rows", u32_rows, METH_VARARGS, "32-bit words at given offsets of a buffer."},
    {"walk", walk, METH_VARARGS, "Offsets of the caplen fields of the pcap records in a buffer."},
    {"walk_blocks", walk_blocks, METH_VARARGS, "Offsets of the packet blocks of a pcapng buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
