/* The one loop numpy cannot vectorise: where each pcap record (pcapng block) starts; and
 * reading header words at known offsets in one pass, without numpy's temporaries.
 *
 * walk_headers: the pcap records of a buffer and their header fields (read._walk_python
 * plus numpy gathers without the compiled part). walk_blocks: the pcapng packet blocks.
 * u32_rows: read._u32_rows. Plain C, no numpy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_columns.h"

/* The 32-bit word at q, in the file's byte order. */
static inline uint32_t word(const unsigned char *q, int big)
{
    return big ? ((uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3])
               : ((uint32_t)q[3] << 24 | (uint32_t)q[2] << 16 | (uint32_t)q[1] << 8 | q[0]);
}

/* Release the n argument buffers; then raise `exc`(`error`) if `error`, else return `ok`. */
static PyObject *release_buffers(Py_buffer *b, int n, PyObject *exc, const char *error,
                                 PyObject *ok)
{
    for (int j = 0; j < n; j++)
        PyBuffer_Release(&b[j]);
    if (error) {
        Py_XDECREF(ok);
        PyErr_SetString(exc, error);
        return NULL;
    }
    return ok;
}

/* walk_headers(buf, big_endian, start, frac_mul, offset, ts_ns, caplen, wirelen[, frac_lim,
 *              caplim, anchor, has_anchor, window])
 * -> (count, end, first): walk's records from offset `start` (where a record header begins)
 * and their header fields, into four int64 buffers of equal size: where each header begins,
 * its time (seconds * 1e9 + fraction * frac_mul), captured and original length. Stops like
 * walk, or when the buffers are full; `end` is 8 bytes past the start of the next record;
 * `first` is the first walked record that is not plausible (-1: none): its time fraction is
 * frac_lim or more; and, with caplim >= 0 (read.CaptureReader._pcap_first_bad), its captured
 * length is over caplim or its original length, its original length is 0, or its time is
 * more than `window` ns before or after the latest time before it (`anchor` if has_anchor,
 * else the first record's, and the records' before it). */
static PyObject *walk_headers(PyObject *self, PyObject *args)
{
    Py_buffer b[5]; /* buf, then offset, ts_ns, caplen, wirelen */
    int big;
    Py_ssize_t start;
    long long mul, frac_lim = -1, caplim = -1, anchor = 0, window = 0;
    int has_anchor = 0;
    if (!PyArg_ParseTuple(args, "y*pnLw*w*w*w*|LLLpL", &b[0], &big, &start, &mul, &b[1], &b[2],
                          &b[3], &b[4], &frac_lim, &caplim, &anchor, &has_anchor, &window))
        return NULL;
    const unsigned char *buf = (const unsigned char *)b[0].buf;
    int64_t *off = b[1].buf, *ts = b[2].buf, *cl = b[3].buf, *wl = b[4].buf;
    Py_ssize_t k = 0, cap = b[1].len / (Py_ssize_t)sizeof(int64_t);
    int ok = start >= 0 && b[2].len == b[1].len && b[3].len == b[1].len && b[4].len == b[1].len;
    /* p: at the caplen field of the next record header; the fields after it must be in buf */
    int64_t p = (int64_t)start + PCAP_RECORD_CAPLEN;
    int64_t lim = (int64_t)b[0].len - (PCAP_RECORD_SIZE - PCAP_RECORD_CAPLEN);
    Py_ssize_t first = -1;
    int64_t prev = anchor; /* the latest time before the record */
    Py_BEGIN_ALLOW_THREADS
    while (ok && p <= lim && k < cap) {
        const unsigned char *h = buf + p - PCAP_RECORD_CAPLEN;
        uint32_t c = word(h + PCAP_RECORD_CAPLEN, big), frac = word(h + PCAP_RECORD_TS_FRAC, big);
        uint32_t w = word(h + PCAP_RECORD_WIRELEN, big);
        int64_t t = (int64_t)word(h + PCAP_RECORD_TS_SEC, big) * 1000000000 + (int64_t)frac * mul;
        if (first < 0) {
            int bad = frac_lim >= 0 && (long long)frac >= frac_lim;
            if (caplim >= 0) {
                if (k == 0 && !has_anchor)
                    prev = t;
                bad |= (long long)c > caplim || c > w || w == 0 || t < prev - window
                       || t > prev + window;
                prev = t > prev ? t : prev;
            }
            if (bad)
                first = k;
        }
        off[k] = p - PCAP_RECORD_CAPLEN;
        ts[k] = t;
        cl[k] = c;
        wl[k] = w;
        k++;
        p += (int64_t)c + PCAP_RECORD_SIZE;
    }
    Py_END_ALLOW_THREADS
    return release_buffers(b, 5, PyExc_ValueError,
                           ok ? NULL : "walk_headers: bad start or output buffers",
                           Py_BuildValue("nLn", k, (long long)p, first));
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
    while (pos >= 0 && pos + BLOCK_SIZE <= n && k < cap) {
        const unsigned char *q = b + pos;
        uint32_t bt = word(q + BLOCK_TYPE, big), bl = word(q + BLOCK_LENGTH, big);
        if ((bt != BT_EPB && bt != BT_SPB && bt != BT_PB) || bl < MIN_BLOCK_LEN || (bl & 3)
            || (long long)bl > max_block || pos + (Py_ssize_t)bl > n
            || word(q + bl - TRAILER_SIZE, big) != bl)
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
    Py_buffer b[3]; /* buf, idx, out */
    int width, big;
    if (!PyArg_ParseTuple(args, "y*y*ipw*", &b[0], &b[1], &width, &big, &b[2]))
        return NULL;
    const unsigned char *buf = (const unsigned char *)b[0].buf;
    const int64_t *at = (const int64_t *)b[1].buf;
    int64_t *o = (int64_t *)b[2].buf;
    Py_ssize_t n = b[1].len / (Py_ssize_t)sizeof(int64_t), len = b[0].len;
    int ok = width > 0 && b[2].len == n * width * (Py_ssize_t)sizeof(int64_t);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        int64_t p = at[i];
        if (p < 0 || p > (int64_t)len - 4 * (int64_t)width) {
            ok = 0;
            break;
        }
        for (int j = 0; j < width; j++)
            o[i * width + j] = word(buf + p + 4 * j, big);
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    return release_buffers(b, 3, PyExc_IndexError,
                           ok ? NULL : "u32_rows: a row runs past the buffer", Py_None);
}

static PyMethodDef methods[] = {
    {"walk_headers", walk_headers, METH_VARARGS, "The pcap records of a buffer and their headers."},
    {"u32_rows", u32_rows, METH_VARARGS, "32-bit words at given offsets of a buffer."},
    {"walk_blocks", walk_blocks, METH_VARARGS, "Offsets of the packet blocks of a pcapng buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
