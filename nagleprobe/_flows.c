/* flows._sequence_space in one compiled pass per direction (same results, tested against
 * the numpy version in tests/test_flows_compiled.py).
 *
 * sequence_space(ob, g, by_dir, seq, ack, flags, payload,
 *                seq_rel, ack_rel, end, sent_before, new_data, retrans, keepalive)
 *
 * Rows are visited in (flow, direction, time) order: the i-th is decoded row ob[i] (of the
 * uint32 seq and ack, uint16 flags and int32 payload columns), its direction group is g[i]
 * (flow * 2 + dir, ascending) and its row in flow order is by_dir[i]; every output (int64,
 * or bool as one byte) is written at that row. Per direction: sequence numbers relative to
 * its ISN (0 at its SYN, else 1 at its first seen segment) and unwrapped across 2**32; ACK
 * numbers relative to the peer's ISN, unwrapped along the rows that carry ACK (-1 without
 * it); end = seq + payload + SYN + FIN; sent_before = the highest end sent earlier (0 if
 * none); and the classification new data / retransmission / keep-alive.
 * Plain C, no numpy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FIN 0x01
#define SYN 0x02
#define RST 0x04
#define ACK 0x10

#define NIN 7
#define NOUT 7

static PyObject *sequence_space(PyObject *self, PyObject *args)
{
    Py_buffer b[NIN + NOUT];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*w*w*w*w*w*w*", &b[0], &b[1], &b[2], &b[3],
                          &b[4], &b[5], &b[6], &b[7], &b[8], &b[9], &b[10], &b[11], &b[12],
                          &b[13]))
        return NULL;
    Py_ssize_t n = b[0].len / 8, m = b[3].len / 4;
    static const Py_ssize_t size[NIN + NOUT] = {8, 8, 8, 4, 4, 2, 4, 8, 8, 8, 8, 1, 1, 1};
    int ok = b[4].len == m * 4 && b[5].len == m * 2 && b[6].len == m * 4;
    for (int j = 0; j < NIN + NOUT; j++)
        if (j < 3 || j >= NIN)
            ok &= b[j].len == n * size[j];
    const int64_t *ob = b[0].buf, *g = b[1].buf, *by_dir = b[2].buf;
    const uint32_t *seq = b[3].buf, *ack = b[4].buf;
    const uint16_t *flags = b[5].buf;
    const int32_t *payload = b[6].buf;
    int64_t *seq_rel = b[7].buf, *ack_rel = b[8].buf, *end = b[9].buf, *sent = b[10].buf;
    uint8_t *new_data = b[11].buf, *retrans = b[12].buf, *keepalive = b[13].buf;
    int64_t groups = 0;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        ok &= ob[i] >= 0 && ob[i] < m && by_dir[i] >= 0 && by_dir[i] < n && g[i] >= 0
              && (i == 0 || g[i] >= g[i - 1]);
        if (ok)
            groups = g[i] + 1;
    }
    groups += groups & 1; /* both directions of the last flow */
    int64_t *isn = ok ? PyMem_Calloc((size_t)groups + 1, sizeof(int64_t)) : NULL;
    uint8_t *has_dir = ok ? PyMem_Calloc((size_t)groups + 1, 1) : NULL;
    if (!ok || !isn || !has_dir) {
        PyMem_Free(isn);
        PyMem_Free(has_dir);
        for (int j = 0; j < NIN + NOUT; j++)
            PyBuffer_Release(&b[j]);
        if (ok)
            return PyErr_NoMemory();
        PyErr_SetString(PyExc_ValueError, "sequence_space: inconsistent columns");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    /* sequence space of each direction, and its ISN */
    int64_t acc = 0, top = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t r = ob[i];
        uint16_t f = flags[r];
        if (i == 0 || g[i] != g[i - 1]) {
            int64_t anchor = (f & SYN) ? 0 : 1;
            acc = anchor;
            top = 0;
            isn[g[i]] = ((int64_t)seq[r] - anchor) & 0xFFFFFFFFLL;
            has_dir[g[i]] = 1;
        } else {
            acc += (int32_t)(seq[r] - seq[ob[i - 1]]);
        }
        int64_t pay = payload[r];
        int64_t e = acc + pay + ((f & SYN) != 0) + ((f & FIN) != 0);
        int64_t w = by_dir[i];
        int ka = pay <= 1 && acc == top - 1 && !(f & (SYN | FIN | RST));
        seq_rel[w] = acc;
        end[w] = e;
        sent[w] = top;
        new_data[w] = pay > 0 && acc >= top;
        keepalive[w] = (uint8_t)ka;
        retrans[w] = pay > 0 && acc < top && !ka;
        if (e > top)
            top = e;
    }
    /* ACK numbers, relative to the peer's ISN, along the rows carrying ACK */
    int64_t run = 0, cur = -1;
    uint32_t last = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t r = ob[i];
        if (!(flags[r] & ACK)) {
            ack_rel[by_dir[i]] = -1;
            continue;
        }
        if (g[i] != cur) {
            int64_t peer = g[i] ^ 1, raw = ack[r];
            int64_t base = has_dir[peer] ? isn[peer] : (raw - 1) & 0xFFFFFFFFLL;
            run = (int32_t)(uint32_t)(raw - base);
            cur = g[i];
        } else {
            run += (int32_t)(ack[r] - last);
        }
        last = ack[r];
        ack_rel[by_dir[i]] = run;
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(isn);
    PyMem_Free(has_dir);
    for (int j = 0; j < NIN + NOUT; j++)
        PyBuffer_Release(&b[j]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"sequence_space", sequence_space, METH_VARARGS,
     "Relative, unwrapped seq/ack and classification of every segment, per direction."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_flows", NULL, -1, methods};

PyMODINIT_FUNC PyInit__flows(void) { return PyModule_Create(&module); }
