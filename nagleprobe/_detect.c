/* The evidence chain of detect.py in one pass over the segments instead of dozens of numpy
 * passes (same results: tests/test_detect_compiled.py compares it with detect's numpy
 * version on every real capture and on random segment streams).
 *
 * chain(flow, dir, ts, payload, flags, seq, ack, end, sent_before, new_data, keepalive,
 *       window, ack_max, mss, rtt_to,
 *       released, ack_row, small_row, ack_delay, reaction, answered, proofs,
 *       lone_key, lone_delay) -> (stalls, lone ACKs)
 *
 * Inputs are Flows.seg columns, rows in (flow, time) order: int64 except dir (int8, as
 * uint8), flags and window (uint16) and new_data, keepalive (bool, one byte); mss and
 * rtt_to (int64) are indexed by flow * 2 + dir (rtt_to in ns, 0 if unknown). Outputs: the
 * stalls (rows of S2, A and S1, the ACK delay, the reaction, whether the peer answered; as
 * many entries as rows, the first `stalls` filled), Nagle-off proofs counted per flow * 2
 * + dir (zeroed here), and the lone-ACK delays (the data's direction, the delay less the
 * round trip; the first `lone ACKs` filled). Plain C, no numpy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FIN 0x01
#define SYN 0x02
#define RST 0x04
#define ACK 0x10

#define DELACK_MIN_NS 25e6
#define DELACK_MAX_NS 600e6
#define REACTION_SLACK_NS 2e6
#define ANSWER_NS 10000000

#define NIN 15
#define NOUT 9

typedef struct {
    const int64_t *flow, *ts, *pay, *seq, *ack, *end, *sent, *ack_max, *mss, *rtt;
    const uint8_t *dir, *new_data, *keepalive;
    const uint16_t *flags, *window;
} Seg;

/* detect.small: a partial segment (TSO: not a multiple of the MSS) */
static inline int small(const Seg *s, int64_t r)
{
    int64_t p = s->pay[r], m = s->mss[s->flow[r] * 2 + s->dir[r]];
    if (m < 1)
        m = 1;
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
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*y*y*y*y*y*w*w*w*w*w*w*w*w*w*", &b[0],
                          &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7], &b[8], &b[9],
                          &b[10], &b[11], &b[12], &b[13], &b[14], &b[15], &b[16], &b[17],
                          &b[18], &b[19], &b[20], &b[21], &b[22], &b[23]))
        return NULL;
    Py_ssize_t n = b[0].len / 8, keys = b[13].len / 8;
    /* item sizes; 0: per flow * 2 + dir (checked below) */
    static const Py_ssize_t size[NIN + NOUT] = {8, 1, 8, 8, 2, 8, 8, 8, 8, 1, 1, 2, 8, 0, 0,
                                                8, 8, 8, 8, 8, 1, 0, 8, 8};
    int ok = b[14].len == keys * 8 && b[21].len == keys * 8;
    for (int j = 0; j < NIN + NOUT; j++)
        if (size[j])
            ok &= b[j].len == n * size[j];
    Seg s = {b[0].buf, b[2].buf, b[3].buf, b[5].buf, b[6].buf, b[7].buf, b[8].buf, b[12].buf,
             b[13].buf, b[14].buf, b[1].buf, b[9].buf, b[10].buf, b[4].buf, b[11].buf};
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok &= s.dir[i] <= 1 && s.flow[i] >= 0 && s.flow[i] * 2 + 1 < keys
              && (i == 0 || s.flow[i] >= s.flow[i - 1]);
    int64_t *prev_same = ok ? PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t)) : NULL;
    if (!ok || !prev_same) {
        for (int j = 0; j < NIN + NOUT; j++)
            PyBuffer_Release(&b[j]);
        if (ok)
            return PyErr_NoMemory();
        PyErr_SetString(PyExc_ValueError, "chain: inconsistent columns");
        return NULL;
    }
    int64_t *released = b[15].buf, *ack_row = b[16].buf, *small_row = b[17].buf,
            *ack_delay = b[18].buf, *reaction = b[19].buf, *proofs = b[21].buf,
            *lone_key = b[22].buf, *lone_delay = b[23].buf;
    uint8_t *answered = b[20].buf;
    Py_ssize_t m = 0, lone = 0;
    Py_BEGIN_ALLOW_THREADS
    memset(proofs, 0, (size_t)keys * sizeof(int64_t));
    int64_t last[2] = {-1, -1}, last_data[2] = {-1, -1};
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i == 0 || s.flow[i] != s.flow[i - 1])
            last[0] = last[1] = last_data[0] = last_data[1] = -1;
        int d = s.dir[i];
        int64_t key = s.flow[i] * 2 + d, pay = s.pay[i];
        /* before(): the previous row of the flow in each direction, and with data */
        int64_t same = last[d], other = last[d ^ 1];
        int64_t data_same = last_data[d], data_other = last_data[d ^ 1];
        prev_same[i] = same;

        /* 1.-6. S2 = row i, A = other, S1 = data_same */
        if (s.new_data[i] && pay < s.mss[key]) {
            int64_t A = other, S1 = data_same;
            if (A >= 0 && S1 >= 0 && S1 < A && pure_ack(&s, A) && s.ack[A] == s.sent[i]
                && small(&s, S1) && s.end[S1] == s.ack[A]) {
                int64_t YA = prev_same[A];
                int64_t ack_prev = YA >= 0 ? s.ack_max[YA] : -1;
                int64_t to_sender = s.rtt[key], to_receiver = s.rtt[key ^ 1];
                int64_t delay = s.ts[A] - s.ts[S1] - to_receiver;
                int64_t react = s.ts[i] - s.ts[A];
                int64_t bound = to_sender
                                + (int64_t)(REACTION_SLACK_NS + 0.25 * (double)to_sender);
                double path = (double)(to_sender + to_receiver);
                if (s.ack[A] > ack_prev && (double)delay >= (path > DELACK_MIN_NS ? path : DELACK_MIN_NS)
                    && (double)delay <= DELACK_MAX_NS && react >= 0 && react <= bound
                    && s.window[A] != 0 && !(YA >= 0 && s.window[YA] == 0)) {
                    released[m] = i;
                    ack_row[m] = A;
                    small_row[m] = S1;
                    ack_delay[m] = delay;
                    reaction[m] = react;
                    m++;
                }
            }
        }

        /* Nagle off: a small new segment sent while an earlier small one was unacked */
        if (s.new_data[i] && !s.keepalive[i] && small(&s, i)) {
            int64_t p = data_same;
            int64_t seen = other >= 0 ? s.ack_max[other] : -1;
            if (p >= 0 && small(&s, p) && s.new_data[p] && s.end[p] == s.seq[i]
                && seen < s.end[p])
                proofs[key]++;
        }

        /* the receiver's ACK of a lone small segment */
        if (pay == 0 && (s.flags[i] & (SYN | FIN | RST | ACK)) == ACK) {
            int64_t D = data_other;
            int64_t own_prev = same >= 0 ? s.ack_max[same] : -1;
            if (D >= 0 && small(&s, D) && s.ack[i] >= s.end[D] && own_prev <= s.seq[D]
                && s.ack[i] > own_prev && same < D) {
                lone_key[lone] = key ^ 1;
                lone_delay[lone] = s.ts[i] - s.ts[D] - s.rtt[key];
                lone++;
            }
        }
        last[d] = i;
        if (pay > 0)
            last_data[d] = i;
    }
    /* answered: the peer's data comes next after S2 (before X's), within the round trip
     * plus ANSWER_NS. The walk to the next data row passes only rows without data, and
     * S2 rows carry data, so all the walks together pass each row at most once. */
    for (Py_ssize_t k = 0; k < m; k++) {
        int64_t r = released[k], next = -1;
        for (Py_ssize_t j = r + 1; j < n && s.flow[j] == s.flow[r]; j++)
            if (s.pay[j] > 0) {
                next = j;
                break;
            }
        int64_t key = s.flow[r] * 2 + s.dir[r];
        answered[k] = next >= 0 && s.dir[next] != s.dir[r]
                      && s.ts[next] - s.ts[r] <= s.rtt[key ^ 1] + ANSWER_NS;
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(prev_same);
    for (int j = 0; j < NIN + NOUT; j++)
        PyBuffer_Release(&b[j]);
    return Py_BuildValue("nn", m, lone);
}

static PyMethodDef methods[] = {
    {"chain", chain, METH_VARARGS,
     "The stalls, Nagle-off proofs and lone-ACK delays of every segment, in one pass."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_detect", NULL, -1, methods};

PyMODINIT_FUNC PyInit__detect(void) { return PyModule_Create(&module); }
