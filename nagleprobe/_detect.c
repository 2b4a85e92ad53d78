/* The structural part of detect.py's evidence chain in one pass over the segments instead of
 * dozens of numpy passes (same results: tests/test_detect_compiled.py compares it with
 * detect's numpy version on every real capture and on random segment streams). Every
 * threshold (times, delays) is applied afterwards in detect.py, so none is copied here.
 *
 * chain(flow, dir, ts, payload, flags, seq, ack, end, sent_before, keepalive, new_data,
 *       ack_max, mss,
 *       released, ack_row, small_row, ya_row, answer, off_proofs, minshall_proofs,
 *       lone_row, lone_data) -> (coupled candidates, lone ACKs)
 *
 * Inputs are Flows.seg columns, rows in (flow, time) order: int64 except dir (int8, as
 * uint8), flags (uint16) and keepalive, new_data (bool, one byte); mss (int64) is indexed
 * by flow * 2 + dir. Outputs:
 *  - the coupled candidates: a data segment S2 smaller than its sender's MSS whose
 *    sender's peer last sent a pure ACK A that acknowledged new data, covering all the data
 *    sent before S2, which ended in S1 (rows of S2, A, S1, the peer's packet before A or
 *    -1, and the peer's next data row if it came before the sender's next data, else -1:
 *    the first `coupled` entries filled);
 *  - per flow * 2 + dir (zeroed here): small new segments sent while the previous segment,
 *    small, was unacknowledged (Nagle off), and while it was full-sized (not classic Nagle);
 *  - the pure ACKs of a lone segment (one that is not larger than the MSS, and the only
 *    data outstanding): their row and the data's row (the first `lone ACKs` filled).
 * Plain C, no numpy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_columns.h"

#define NIN 13
#define NOUT 9

typedef struct {
    const int64_t *flow, *ts, *pay, *seq, *ack, *end, *sent, *ack_max, *mss;
    const uint8_t *dir, *keepalive, *new_data;
    const uint16_t *flags;
} Seg;

static inline int64_t mss_of(const Seg *s, int64_t r)
{
    int64_t m = s->mss[s->flow[r] * 2 + s->dir[r]];
    return m < 1 ? 1 : m;
}

/* detect.small: a partial segment (TSO: not a multiple of the MSS) */
static inline int small(const Seg *s, int64_t r)
{
    int64_t p = s->pay[r], m = mss_of(s, r);
    return p > 0 && (p < m || (p > m && p % m != 0));
}

static inline int pure_ack(const Seg *s, int64_t r)
{
    return s->pay[r] == 0 && !(s->flags[r] & (SYN | FIN | RST)) && (s->flags[r] & ACK);
}

static PyObject *chain(PyObject *self, PyObject *args)
{
    Py_buffer b[NIN + NOUT];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*y*y*y*w*w*w*w*w*w*w*w*w*", &b[0], &b[1],
                          &b[2], &b[3], &b[4], &b[5], &b[6], &b[7], &b[8], &b[9], &b[10],
                          &b[11], &b[12], &b[13], &b[14], &b[15], &b[16], &b[17], &b[18],
                          &b[19], &b[20], &b[21]))
        return NULL;
    Py_ssize_t n = b[0].len / 8, keys = b[12].len / 8;
    /* item sizes; 0: per flow * 2 + dir (checked below) */
    static const Py_ssize_t size[NIN + NOUT] = {8, 1, 8, 8, 2, 8, 8, 8, 8, 1, 1, 8, 0,
                                                8, 8, 8, 8, 8, 0, 0, 8, 8};
    int ok = b[18].len == keys * 8 && b[19].len == keys * 8;
    for (int j = 0; j < NIN + NOUT; j++)
        if (size[j])
            ok &= b[j].len == n * size[j];
    Seg s = {b[0].buf, b[2].buf, b[3].buf, b[5].buf, b[6].buf, b[7].buf, b[8].buf, b[11].buf,
             b[12].buf, b[1].buf, b[9].buf, b[10].buf, b[4].buf};
    /* flows in order, so the first and last bound them all (bitwise: no branch per row) */
    int bad = n > 0 && (s.dir[0] > 1 || s.flow[0] < 0 || s.flow[n - 1] * 2 + 1 >= keys);
    for (Py_ssize_t i = 1; i < n; i++)
        bad |= (s.dir[i] > 1) | (s.flow[i] < s.flow[i - 1]);
    ok &= !bad;
    if (!ok) {
        for (int j = 0; j < NIN + NOUT; j++)
            PyBuffer_Release(&b[j]);
        PyErr_SetString(PyExc_ValueError, "chain: inconsistent columns");
        return NULL;
    }
    int64_t *released = b[13].buf, *ack_row = b[14].buf, *small_row = b[15].buf,
            *ya_row = b[16].buf, *off = b[18].buf, *minshall = b[19].buf,
            *lone_row = b[20].buf, *lone_data = b[21].buf, *answer = b[17].buf;
    Py_ssize_t m = 0, lone = 0;
    Py_BEGIN_ALLOW_THREADS
    memset(off, 0, (size_t)keys * sizeof(int64_t));
    memset(minshall, 0, (size_t)keys * sizeof(int64_t));
    /* per direction of the flow: its last row, the one before that, and its last data row */
    int64_t last[2] = {-1, -1}, before_last[2] = {-1, -1}, last_data[2] = {-1, -1};
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i == 0 || s.flow[i] != s.flow[i - 1])
            last[0] = last[1] = before_last[0] = before_last[1] = last_data[0] = last_data[1]
                = -1;
        int d = s.dir[i];
        int64_t key = s.flow[i] * 2 + d, pay = s.pay[i];
        /* before(): the previous row of the flow in each direction, and with data */
        int64_t same = last[d], other = last[d ^ 1];
        int64_t data_same = last_data[d], data_other = last_data[d ^ 1];

        /* coupled: S2 = row i, A = other, S1 = data_same */
        if (pay > 0 && !s.keepalive[i] && pay < s.mss[key]) {
            int64_t A = other, S1 = data_same;
            if (A >= 0 && S1 >= 0 && S1 < A && pure_ack(&s, A) && s.ack[A] == s.sent[i]
                && s.end[S1] == s.ack[A]) {
                int64_t YA = before_last[d ^ 1]; /* the peer's row before A */
                if (s.ack[A] > (YA >= 0 ? s.ack_max[YA] : -1)) {
                    released[m] = i;
                    ack_row[m] = A;
                    small_row[m] = S1;
                    ya_row[m] = YA;
                    m++;
                }
            }
        }

        /* a small new segment sent while the previous one was unacknowledged */
        if (s.new_data[i] && !s.keepalive[i] && small(&s, i)) {
            int64_t p = data_same;
            int64_t seen = other >= 0 ? s.ack_max[other] : -1;
            if (p >= 0 && s.new_data[p] && s.end[p] == s.seq[i] && seen < s.end[p]) {
                if (small(&s, p))
                    off[key]++;
                else
                    minshall[key]++;
            }
        }

        /* the receiver's ACK of a lone segment */
        if (pay == 0 && (s.flags[i] & (SYN | FIN | RST | ACK)) == ACK) {
            int64_t D = data_other;
            int64_t own_prev = same >= 0 ? s.ack_max[same] : -1;
            if (D >= 0 && s.pay[D] <= mss_of(&s, D) && s.ack[i] >= s.end[D]
                && own_prev <= s.seq[D] && s.ack[i] > own_prev && same < D) {
                lone_row[lone] = i;
                lone_data[lone] = D;
                lone++;
            }
        }
        before_last[d] = last[d];
        last[d] = i;
        if (pay > 0)
            last_data[d] = i;
    }
    /* answer: the peer's next data row after S2 if it comes before the sender's, else -1.
     * The walk to the
     * next data row passes only rows without data, and S2 rows carry data, so all the
     * walks together pass each row at most once. */
    for (Py_ssize_t k = 0; k < m; k++) {
        int64_t r = released[k], next = -1;
        for (Py_ssize_t j = r + 1; j < n && s.flow[j] == s.flow[r]; j++)
            if (s.pay[j] > 0) {
                next = j;
                break;
            }
        answer[k] = next >= 0 && s.dir[next] != s.dir[r] ? next : -1;
    }
    Py_END_ALLOW_THREADS
    for (int j = 0; j < NIN + NOUT; j++)
        PyBuffer_Release(&b[j]);
    return Py_BuildValue("nn", m, lone);
}

static PyMethodDef methods[] = {
    {"chain", chain, METH_VARARGS,
     "The coupled candidates, Nagle proofs and lone-segment ACKs of every segment, in one pass."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_detect", NULL, -1, methods};

PyMODINIT_FUNC PyInit__detect(void) { return PyModule_Create(&module); }
