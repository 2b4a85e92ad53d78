/* Connection bookkeeping compiled: flows._sequence_space, flows._ack_links, the row
 * neighbours of Flows.before/after and the 4-tuple ids of stream, one pass each instead of
 * dozens of numpy passes (same results, tested against the numpy versions in
 * tests/test_flows_compiled.py and tests/test_stream.py).
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
#define MIX_MULTIPLIER 0x9E3779B97F4A7C15ULL /* the 4-tuple hash (tuples.mix) */
#define MIX_SHIFT 29

#define NIN 7
#define NOUT 7

/* Release the n argument buffers, then: raise MemoryError if `nomem`, else ValueError(`error`)
 * if `error`, else return None. */
static PyObject *done(Py_buffer *b, int n, int nomem, const char *error)
{
    for (int j = 0; j < n; j++)
        PyBuffer_Release(&b[j]);
    if (nomem)
        return PyErr_NoMemory();
    if (error) {
        PyErr_SetString(PyExc_ValueError, error);
        return NULL;
    }
    Py_RETURN_NONE;
}

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
        return done(b, NIN + NOUT, ok, "sequence_space: inconsistent columns");
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
    return done(b, NIN + NOUT, 0, NULL);
}

/* ack_links(by_dir, g, dgroup, ack, end, sent_before, ack_max, acked_by): flows._ack_links.
 * ack_max: the highest ACK (at least -1) each direction had sent up to and including the
 * row. acked_by: for rows opening new sequence space (end > sent_before), the first row, in
 * (direction group, time) order, of the other direction whose ack_max covers the row's end
 * (ack_max >= end), else -1: what the numpy version finds by binary search. Here one
 * pointer walks the peer's rows: a direction's new-space rows end ever higher (each ends
 * beyond everything sent before it) and its peer's ack_max never falls, so the pointer only
 * moves forward (it starts over should an end ever be lower, so any input gets the answer).
 * by_dir and g as for sequence_space; dgroup, ack, end, sent_before (int64, >= 0, as
 * sequence_space makes it) are in flow order, and so are the outputs. */
static PyObject *ack_links(PyObject *self, PyObject *args)
{
    Py_buffer b[8];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
                          &b[6], &b[7]))
        return NULL;
    Py_ssize_t n = b[0].len / 8;
    int ok = 1;
    for (int j = 0; j < 8; j++)
        ok &= b[j].len == n * 8;
    const int64_t *by_dir = b[0].buf, *g = b[1].buf, *dgroup = b[2].buf, *ack = b[3].buf,
                  *end = b[4].buf, *sent = b[5].buf;
    int64_t *ack_max = b[6].buf, *acked_by = b[7].buf;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok &= by_dir[i] >= 0 && by_dir[i] < n && g[i] >= 0 && (i == 0 || g[i] >= g[i - 1])
              && dgroup[by_dir[i]] == g[i];
    int64_t groups = n ? g[n - 1] + 2 : 1; /* room for the peer of the last group */
    Py_ssize_t *first = ok ? PyMem_Calloc((size_t)groups, sizeof(Py_ssize_t)) : NULL;
    Py_ssize_t *last = ok ? PyMem_Calloc((size_t)groups, sizeof(Py_ssize_t)) : NULL;
    if (!ok || !first || !last) {
        PyMem_Free(first);
        PyMem_Free(last);
        return done(b, 8, ok, "ack_links: inconsistent columns");
    }
    Py_BEGIN_ALLOW_THREADS
    int64_t top = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t r = by_dir[i], a = ack[r];
        if (i == 0 || g[i] != g[i - 1]) {
            top = -1;
            first[g[i]] = i;
        }
        last[g[i]] = i + 1;
        if (a > top)
            top = a;
        ack_max[r] = top;
    }
    Py_ssize_t at = 0, stop = 0;
    int64_t prev = 0; /* the end last looked for in this group */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t r = by_dir[i], e = end[r];
        acked_by[r] = -1;
        if (i == 0 || g[i] != g[i - 1]) {
            at = first[g[i] ^ 1];
            stop = last[g[i] ^ 1];
            prev = INT64_MIN;
        }
        if (e <= sent[r])
            continue;
        if (e < prev) /* rows before `at` were only known to be below prev */
            at = first[g[i] ^ 1];
        prev = e;
        while (at < stop && ack_max[by_dir[at]] < e)
            at++;
        if (at < stop)
            acked_by[r] = by_dir[at];
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(first);
    PyMem_Free(last);
    return done(b, 8, 0, NULL);
}

/* The five uint64 words naming a row's unordered 4-tuple (the lower endpoint's address
 * hi, lo, the higher's hi, lo, then tunnel << 32 | lower port << 16 | higher port;
 * endpoints compared as (hi, lo, port)), as tuples.tuple_words makes them; returns whether
 * the row travels from the lower endpoint. */
static inline int tuple_words(uint64_t shi, uint64_t slo, uint64_t dhi, uint64_t dlo,
                              uint16_t sp, uint16_t dp, uint32_t tun, uint64_t v[5])
{
    int low = shi < dhi || (shi == dhi && (slo < dlo || (slo == dlo && sp <= dp)));
    v[0] = low ? shi : dhi;
    v[1] = low ? slo : dlo;
    v[2] = low ? dhi : shi;
    v[3] = low ? dlo : slo;
    v[4] = (uint64_t)tun << 32 | (low ? ((uint64_t)sp << 16 | dp) : ((uint64_t)dp << 16 | sp));
    return low;
}

static inline uint64_t mix(const uint64_t v[5])
{
    uint64_t h = 0;
    for (int j = 0; j < 5; j++) {
        h ^= v[j];
        h *= MIX_MULTIPLIER;
        h ^= h >> MIX_SHIFT;
    }
    return h;
}

/* Slot of the tuple `v` in the table, or of the empty slot where it belongs. */
static inline int64_t probe(const int64_t *slots, int64_t mask, const uint64_t *words,
                            const uint64_t v[5])
{
    int64_t at = (int64_t)(mix(v) & (uint64_t)mask);
    while (slots[at] >= 0 && memcmp(words + slots[at] * 5, v, 5 * sizeof(uint64_t)) != 0)
        at = (at + 1) & mask;
    return at;
}

/* tuple_ids(src_hi, src_lo, dst_hi, dst_lo, sport, dport, tunnel, slots, words, count, tid,
 * from_low[, first]) -> count: each row's 4-tuple id (in its tunnel: uint32 tunnel numbers,
 * 0 for none), the tuples numbered by first appearance, and whether the row travels from
 * the tuple's lower endpoint (and in `first`, int64, the row where each new tuple first
 * appears, in id order). The ids live in a hash table
 * kept by the caller: `slots` (int64, -1 where empty, a power of two entries, at least
 * twice the tuples it will hold) over `words` (uint64, five per id, room for `count` and
 * every row). Tuples are compared by their words, so ids never mix two tuples. Returns the
 * number of tuples, new ones added. */
static PyObject *tuple_ids(PyObject *self, PyObject *args)
{
    Py_buffer b[12];
    Py_ssize_t count;
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*w*nw*w*|w*", &b[0], &b[1], &b[2], &b[3],
                          &b[4], &b[5], &b[11], &b[6], &b[7], &count, &b[8], &b[9], &b[10]))
        return NULL;
    Py_ssize_t n = b[0].len / 8, nslots = b[6].len / 8;
    static const Py_ssize_t size[12] = {8, 8, 8, 8, 2, 2, 0, 0, 8, 1, 0, 4};
    int ok = count >= 0 && nslots > 0 && (nslots & (nslots - 1)) == 0
             && nslots >= 2 * (count + n) && b[7].len >= (count + n) * 40;
    for (int j = 0; j < 12; j++)
        if (size[j])
            ok &= b[j].len == n * size[j];
    ok &= b[10].buf == NULL || b[10].len == n * 8;
    if (!ok)
        return done(b, 12, 0, "tuple_ids: inconsistent columns or table");
    const uint64_t *shi = b[0].buf, *slo = b[1].buf, *dhi = b[2].buf, *dlo = b[3].buf;
    const uint16_t *sp = b[4].buf, *dp = b[5].buf;
    const uint32_t *tun = b[11].buf;
    int64_t *slots = b[6].buf, *tid = b[8].buf;
    uint64_t *words = b[7].buf;
    uint8_t *from_low = b[9].buf;
    int64_t *first = b[10].buf;
    Py_ssize_t before = count;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t v[5];
        from_low[i] = (uint8_t)tuple_words(shi[i], slo[i], dhi[i], dlo[i], sp[i], dp[i],
                                           tun[i], v);
        int64_t at = probe(slots, nslots - 1, words, v);
        if (slots[at] < 0) {
            memcpy(words + count * 5, v, sizeof v);
            if (first)
                first[count - before] = i;
            slots[at] = count++;
        }
        tid[i] = slots[at];
    }
    Py_END_ALLOW_THREADS
    for (int j = 0; j < 12; j++)
        PyBuffer_Release(&b[j]);
    return PyLong_FromSsize_t(count);
}

/* reslot(slots, words, count): put tuples 0..count-1 of `words` into the empty table
 * `slots` (to grow the table: same rules as tuple_ids). */
static PyObject *reslot(PyObject *self, PyObject *args)
{
    Py_buffer b[2];
    Py_ssize_t count;
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "w*y*n", &b[0], &b[1], &count))
        return NULL;
    Py_ssize_t nslots = b[0].len / 8;
    int64_t *slots = b[0].buf;
    const uint64_t *words = b[1].buf;
    int ok = count >= 0 && nslots > 0 && (nslots & (nslots - 1)) == 0 && nslots >= 2 * count
             && b[1].len >= count * 40;
    for (Py_ssize_t s = 0; ok && s < nslots; s++)
        ok &= slots[s] == -1;
    if (!ok)
        return done(b, 2, 0, "reslot: inconsistent table");
    for (Py_ssize_t t = 0; t < count; t++)
        slots[probe(slots, nslots - 1, words, words + t * 5)] = t;
    return done(b, 2, 0, NULL);
}

/* neighbours(flow, dir, has_data, data, after, same, other): for every row (rows sorted by
 * flow, then time), the nearest earlier row (later, with `after`) of its flow sent in the
 * same direction, and in the other direction; with `data`, among rows carrying payload
 * only; -1 if none. Flows.before / Flows.after without the compiled part find the same
 * rows from runs of directions. */
static PyObject *neighbours(PyObject *self, PyObject *args)
{
    Py_buffer b[5];
    int data, after;
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*ppw*w*", &b[0], &b[1], &b[2], &data, &after, &b[3],
                          &b[4]))
        return NULL;
    Py_ssize_t n = b[0].len / 8;
    int ok = b[1].len == n && b[2].len == n && b[3].len == n * 8 && b[4].len == n * 8;
    const int64_t *flow = b[0].buf;
    const uint8_t *dir = b[1].buf, *has = b[2].buf;
    int64_t *same = b[3].buf, *other = b[4].buf;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok &= dir[i] <= 1;
    if (!ok)
        return done(b, 5, 0, "neighbours: inconsistent columns");
    Py_BEGIN_ALLOW_THREADS
    int64_t last[2] = {-1, -1};
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = after ? n - 1 - k : k, prev = after ? i + 1 : i - 1;
        if (k == 0 || flow[i] != flow[prev])
            last[0] = last[1] = -1;
        same[i] = last[dir[i]];
        other[i] = last[dir[i] ^ 1];
        if (!data || has[i])
            last[dir[i]] = i;
    }
    Py_END_ALLOW_THREADS
    return done(b, 5, 0, NULL);
}

/* turn_stats(flow, dir, ts, payload, acked_by, quick_ns, typical, count, smallest, upper, late)
 * -> number of late rows: flows._turn_stats, the data -> ACK turnarounds that cannot hold a
 * delayed ACK, per direction group (flow * 2 + dir). Rows come in flow order (time order
 * within a flow). A sample is a row with payload whose first covering ACK (`acked_by`, -1
 * if none) came at or after it and either carries data or came within `quick_ns`. Per group:
 * how many samples, the smallest, and the sample at rank floor(3 * (k - 1) / 4) of its first
 * k <= `typical` samples sorted (capped at 2**32 - 1 ns). `late` gets the rows whose
 * turnaround is not such a sample (in row order). */
#define MAX_TYPICAL 64

static void turn_upper(int64_t *first, int64_t k, int64_t *out)
{
    for (int64_t a = 1; a < k; a++) { /* insertion sort: k is small */
        int64_t v = first[a], b = a - 1;
        while (b >= 0 && first[b] > v) {
            first[b + 1] = first[b];
            b--;
        }
        first[b + 1] = v;
    }
    *out = first[(3 * (k - 1)) / 4];
}

static PyObject *turn_stats(PyObject *self, PyObject *args)
{
    Py_buffer b[9];
    long long quick;
    int typical;
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*Liw*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4],
                          &quick, &typical, &b[5], &b[6], &b[7], &b[8]))
        return NULL;
    Py_ssize_t n = b[0].len / 8, groups = b[5].len / 8;
    int ok = b[1].len == n && b[2].len == n * 8 && b[3].len == n * 8 && b[4].len == n * 8
             && b[6].len == groups * 8 && b[7].len == groups * 8 && b[8].len == n * 8
             && typical > 0 && typical <= MAX_TYPICAL;
    const int64_t *flow = b[0].buf, *ts = b[2].buf, *payload = b[3].buf, *by = b[4].buf;
    const uint8_t *dir = b[1].buf;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok &= dir[i] <= 1 && flow[i] >= 0 && 2 * flow[i] + 1 < groups && by[i] < n
              && (i == 0 || flow[i] >= flow[i - 1]);
    if (!ok)
        return done(b, 9, 0, "turn_stats: inconsistent columns");
    int64_t *count = b[5].buf, *smallest = b[6].buf, *upper = b[7].buf, *late = b[8].buf;
    Py_ssize_t nlate = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t first[2][MAX_TYPICAL];
    memset(count, 0, groups * 8);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t g = 2 * flow[i] + dir[i];
        if (by[i] >= 0 && payload[i] > 0) {
            int64_t turn = ts[by[i]] - ts[i];
            if (turn >= 0 && (payload[by[i]] > 0 || turn < quick)) {
                int64_t k = count[g]++;
                smallest[g] = k == 0 || turn < smallest[g] ? turn : smallest[g];
                if (k < typical)
                    first[dir[i]][k] = turn < 4294967295LL ? turn : 4294967295LL;
            } else if (turn >= 0) {
                late[nlate++] = i;
            }
        }
        if (i == n - 1 || flow[i + 1] != flow[i]) /* the flow's last row: its two groups */
            for (int d = 0; d < 2; d++) {
                int64_t h = 2 * flow[i] + d;
                if (count[h])
                    turn_upper(first[d], count[h] < typical ? count[h] : typical, &upper[h]);
            }
    }
    Py_END_ALLOW_THREADS
    for (int j = 0; j < 9; j++)
        PyBuffer_Release(&b[j]);
    return PyLong_FromSsize_t(nlate);
}

static PyMethodDef methods[] = {
    {"neighbours", neighbours, METH_VARARGS,
     "Nearest earlier (or later) row of each row's flow in the same and the other direction."},
    {"tuple_ids", tuple_ids, METH_VARARGS,
     "Ids (by first appearance) and direction of each row's unordered 4-tuple."},
    {"reslot", reslot, METH_VARARGS, "Fill an empty 4-tuple table from its words."},
    {"sequence_space", sequence_space, METH_VARARGS,
     "Relative, unwrapped seq/ack and classification of every segment, per direction."},
    {"turn_stats", turn_stats, METH_VARARGS,
     "Per direction, the data -> ACK turnarounds that cannot hold a delayed ACK."},
    {"ack_links", ack_links, METH_VARARGS,
     "Running highest ACK per direction, and the first ACK covering each new segment."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_flows", NULL, -1, methods};

/* The constants nagleprobe/flows.py writes too, exported for tests/test_constants.py to pin
 * them equal. */
PyMODINIT_FUNC PyInit__flows(void)
{
    PyObject *m = PyModule_Create(&module), *mul;
    if (m == NULL)
        return NULL;
    mul = PyLong_FromUnsignedLongLong(MIX_MULTIPLIER);
    if (PyModule_AddIntConstant(m, "FIN", FIN) < 0 || PyModule_AddIntConstant(m, "SYN", SYN) < 0
        || PyModule_AddIntConstant(m, "RST", RST) < 0 || PyModule_AddIntConstant(m, "ACK", ACK) < 0
        || PyModule_AddIntConstant(m, "MIX_SHIFT", MIX_SHIFT) < 0
        || PyModule_AddObjectRef(m, "MIX_MULTIPLIER", mul) < 0) {
        Py_XDECREF(mul);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(mul);
    return m;
}
