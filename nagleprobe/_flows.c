/* Connection bookkeeping compiled: flows._segments (sequence space, classification and ACK
 * links of every segment, one pass per connection), the row neighbours of
 * Flows.before/after, the data -> ACK turnarounds, and the stream's per-tuple work (4-tuple
 * ids, tallies, placing and gathering each batch's rows: tuples.py), instead of dozens of
 * numpy passes each (same results, tested against the numpy versions in
 * tests/test_flows_compiled.py and tests/test_stream.py).
 * Plain C, no numpy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_columns.h"

#define NIN 7
#define NOUT 11
#define MASK32 0xFFFFFFFFLL

/* Release the n argument buffers, then: raise MemoryError if `nomem`, else ValueError(`error`)
 * if `error`, else return None. */
static PyObject *release_buffers(Py_buffer *b, int n, int nomem, const char *error)
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

/* One connection's rows [s, e) of segments (below). `inc_row`, `inc_ack`: room for e - s
 * entries from s on, where each direction lists the rows at which its running ACK rose
 * (direction 0 from s upwards, direction 1 from e - 1 downwards). */
static void connection(Py_ssize_t s, Py_ssize_t e, const int64_t *order, const uint8_t *dir,
                       const uint16_t *flags, const uint32_t *seq, const uint32_t *ack,
                       const int32_t *payload, int64_t *seq_rel, int64_t *ack_rel,
                       int64_t *end, int64_t *sent, uint8_t *new_data, uint8_t *retrans,
                       uint8_t *keepalive, int64_t *pay_out, int64_t *ack_max,
                       int64_t *acked_by, int64_t *maxpay, Py_ssize_t *inc_row,
                       int64_t *inc_ack)
{
    Py_ssize_t first[2] = {-1, -1};
    for (Py_ssize_t i = s; i < e && (first[0] < 0 || first[1] < 0); i++)
        if (first[dir[i]] < 0)
            first[dir[i]] = i;
    /* each direction's ISN in raw numbers: 0 at its SYN, else 1 at its first seen segment */
    int64_t anchor[2] = {1, 1}, isn[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        if (first[k] >= 0) {
            anchor[k] = (flags[first[k]] & SYN) ? 0 : 1;
            isn[k] = ((int64_t)seq[order[first[k]]] - anchor[k]) & MASK32;
        }
    int64_t acc[2] = {0, 0}, top[2] = {0, 0}, run[2] = {0, 0}, ack_top[2] = {-1, -1};
    int64_t most[2] = {0, 0}; /* the largest payload each way */
    uint32_t last_seq[2] = {0, 0}, last_ack[2] = {0, 0};
    int has_ack[2] = {0, 0};
    Py_ssize_t rises[2] = {0, 0};
    for (Py_ssize_t i = s; i < e; i++) {
        int k = dir[i];
        int64_t r = order[i];
        uint16_t f = flags[i];
        acc[k] = i == first[k] ? anchor[k] : acc[k] + (int32_t)(seq[r] - last_seq[k]);
        last_seq[k] = seq[r];
        int64_t pay = payload[r], a = acc[k];
        int64_t ev = a + pay + ((f & SYN) != 0) + ((f & FIN) != 0);
        int ka = pay <= 1 && a == top[k] - 1 && !(f & (SYN | FIN | RST));
        seq_rel[i] = a;
        end[i] = ev;
        sent[i] = top[k];
        new_data[i] = pay > 0 && a >= top[k];
        keepalive[i] = (uint8_t)ka;
        retrans[i] = pay > 0 && a < top[k] && !ka;
        if (ev > top[k])
            top[k] = ev;
        /* ACK numbers relative to the peer's ISN (or to the first ACK, less 1, without the
         * peer's rows), unwrapped along the rows carrying ACK */
        int64_t rel = -1;
        if (f & ACK) {
            if (!has_ack[k]) {
                int64_t base = first[k ^ 1] >= 0 ? isn[k ^ 1] : ((int64_t)ack[r] - 1) & MASK32;
                run[k] = (int32_t)(uint32_t)((int64_t)ack[r] - base);
                has_ack[k] = 1;
            } else {
                run[k] += (int32_t)(ack[r] - last_ack[k]);
            }
            last_ack[k] = ack[r];
            rel = run[k];
        }
        ack_rel[i] = rel;
        if (rel > ack_top[k]) {
            ack_top[k] = rel;
            Py_ssize_t at = k ? e - 1 - rises[1] : s + rises[0];
            rises[k]++;
            inc_row[at] = i;
            inc_ack[at] = rel;
        }
        ack_max[i] = ack_top[k];
        pay_out[i] = pay;
        if (pay > most[k])
            most[k] = pay;
    }
    maxpay[0] = most[0];
    maxpay[1] = most[1];
    /* acked_by: the first row of the other direction whose running ACK covers the end of
     * new sequence space: the row where that ACK rose to it. A direction's new-space rows
     * end ever higher, so each direction's pointer only moves forward. */
    Py_ssize_t ptr[2] = {0, 0};
    for (Py_ssize_t i = s; i < e; i++) {
        acked_by[i] = -1;
        if (end[i] <= sent[i])
            continue;
        int o = dir[i] ^ 1;
        while (ptr[o] < rises[o] && inc_ack[o ? e - 1 - ptr[o] : s + ptr[o]] < end[i])
            ptr[o]++;
        if (ptr[o] < rises[o])
            acked_by[i] = inc_row[o ? e - 1 - ptr[o] : s + ptr[o]];
    }
}

/* segments(order, fid, dir, flags, seq, ack, payload,
 *          seq_rel, ack_rel, end, sent_before, new_data, retrans, keepalive, payload_out,
 *          ack_max, acked_by, maxpay)
 *
 * flows._segments_numpy (sequence space, classification, ACK links) in one pass per
 * connection. Rows come in flow order (by flow, in time order within): row i is decoded row order[i] (int64) of flow
 * fid[i] (int64, ascending), in direction dir[i] (uint8, 0 or 1), with flags flags[i]
 * (uint16, already in flow order); seq, ack (uint32) and payload (int32) are the decoded
 * columns, read at order[i]. Every output is written at
 * row i: per direction, sequence numbers relative to its ISN (0 at its SYN, else 1 at its
 * first seen segment) and unwrapped across 2**32; ACK numbers relative to the peer's ISN,
 * unwrapped along the rows that carry ACK (-1 without it); end = seq + payload + SYN + FIN;
 * sent_before = the highest end sent earlier (0 if none); new data / retransmission /
 * keep-alive (one byte each); the payload (int64);
 * ack_max = the highest ACK (at least -1) the direction had sent up to and including the
 * row; acked_by = for rows opening new sequence space (end > sent_before), the first row of
 * the other direction whose ack_max covers the row's end, else -1. maxpay (int64, two per
 * flow: fid * 2 + dir) gets each direction's largest payload (0 for none). */
static PyObject *segments(PyObject *self, PyObject *args)
{
    Py_buffer b[NIN + NOUT];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*w*w*w*w*w*w*w*w*w*w*", &b[0], &b[1], &b[2],
                          &b[3], &b[4], &b[5], &b[6], &b[7], &b[8], &b[9], &b[10], &b[11],
                          &b[12], &b[13], &b[14], &b[15], &b[16], &b[17]))
        return NULL;
    /* item sizes; rows per buffer: n (flow order) or m (decoded rows) */
    static const Py_ssize_t size[NIN + NOUT] = {8, 8, 1, 2, 4, 4, 4, 8, 8, 8, 8, 1, 1, 1, 8, 8, 8};
    Py_ssize_t n = b[0].len / 8, m = b[4].len / 4, nflows = b[17].len / 16;
    int ok = b[17].len % 16 == 0;
    for (int j = 0; j < NIN + NOUT - 1; j++)
        ok &= b[j].len == (j >= 4 && j < NIN ? m : n) * size[j];
    const int64_t *order = b[0].buf, *fid = b[1].buf;
    const uint8_t *dir = b[2].buf;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok &= order[i] >= 0 && order[i] < m && dir[i] <= 1 && fid[i] >= 0 && fid[i] < nflows
              && (i == 0 || fid[i] >= fid[i - 1]);
    Py_ssize_t *inc_row = ok ? PyMem_Malloc(((size_t)n + 1) * sizeof(Py_ssize_t)) : NULL;
    int64_t *inc_ack = ok ? PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t)) : NULL;
    if (!ok || !inc_row || !inc_ack) {
        PyMem_Free(inc_row);
        PyMem_Free(inc_ack);
        return release_buffers(b, NIN + NOUT, ok, "segments: inconsistent columns");
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t s = 0, e; s < n; s = e) {
        for (e = s + 1; e < n && fid[e] == fid[s]; e++)
            ;
        connection(s, e, order, dir, b[3].buf, b[4].buf, b[5].buf, b[6].buf, b[7].buf,
                   b[8].buf, b[9].buf, b[10].buf, b[11].buf, b[12].buf, b[13].buf, b[14].buf,
                   b[15].buf, b[16].buf, (int64_t *)b[17].buf + 2 * fid[s], inc_row, inc_ack);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(inc_row);
    PyMem_Free(inc_ack);
    return release_buffers(b, NIN + NOUT, 0, NULL);
}

/* place_rows(tid, live, cursor, chunk, which, rows, taken) -> (k, last): a held chunk's
 * rows put in their places in a hand-on's batches (stream._hand_on). Row i (of tuple
 * tid[i], int64) goes, unless taken before (live: one byte a row, 0 where taken; empty:
 * none taken), to place cursor[tid[i]] (int64 per tuple, -1: the tuple stays), and its
 * tuple's cursor moves on: which[place] = chunk (int32), rows[place] = i (int64). taken
 * (one byte a row) says which rows went; k how many, last the highest place given (-1
 * for none). Places are checked against the length of which and rows. */
static PyObject *place_rows(PyObject *self, PyObject *args)
{
    Py_buffer b[6];
    int chunk;
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*w*iw*w*w*", &b[0], &b[1], &b[2], &chunk, &b[3], &b[4],
                          &b[5]))
        return NULL;
    Py_ssize_t n = b[0].len / 8, ntup = b[2].len / 8, places = b[3].len / 4, k = 0;
    int64_t last = -1;
    const int64_t *tid = b[0].buf;
    const uint8_t *live = b[1].len ? b[1].buf : NULL;
    int64_t *cursor = b[2].buf, *rows = b[4].buf;
    int32_t *which = b[3].buf;
    uint8_t *taken = b[5].buf;
    int ok = (b[1].len == 0 || b[1].len == n) && b[4].len == places * 8 && b[5].len == n;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok &= tid[i] >= 0 && tid[i] < ntup;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t at = live && !live[i] ? -1 : cursor[tid[i]];
            if (at >= places) { /* more rows than the places counted for the tuple */
                ok = 0;
                break;
            }
            taken[i] = at >= 0;
            if (at < 0)
                continue;
            cursor[tid[i]] = at + 1;
            which[at] = chunk;
            rows[at] = i;
            k++;
            if (at > last)
                last = at;
        }
        Py_END_ALLOW_THREADS
    }
    for (int j = 0; j < 6; j++)
        PyBuffer_Release(&b[j]);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "place_rows: inconsistent arrays");
        return NULL;
    }
    return Py_BuildValue("nL", k, (long long)last);
}

/* tally(tid, ts, rows, last_ts): per tuple (int64 arrays indexed by the rows' tuple ids
 * tid), the rows counted (rows[t] += its rows) and the latest time (last_ts[t] = the
 * largest of it and its rows' ts). */
static PyObject *tally(PyObject *self, PyObject *args)
{
    Py_buffer b[4];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*w*w*", &b[0], &b[1], &b[2], &b[3]))
        return NULL;
    Py_ssize_t n = b[0].len / 8, ntup = b[2].len / 8;
    const int64_t *tid = b[0].buf, *ts = b[1].buf;
    int64_t *rows = b[2].buf, *last = b[3].buf;
    int ok = b[1].len == n * 8 && b[3].len == ntup * 8;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok &= tid[i] >= 0 && tid[i] < ntup;
    if (!ok)
        return release_buffers(b, 4, 0, "tally: inconsistent arrays");
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        rows[tid[i]]++;
        if (ts[i] > last[tid[i]])
            last[tid[i]] = ts[i];
    }
    Py_END_ALLOW_THREADS
    return release_buffers(b, 4, 0, NULL);
}

/* take_rows(sources, which, rows, outs): outs[c][i] = sources[c][which[i]][rows[i]] for every
 * column c and i < len(which): a batch's rows gathered from the chunks holding them, in the
 * batch's order (stream._gather), every column in one pass over the rows. sources[c] is a
 * list of arrays (one per chunk) of outs[c]'s item size (1, 2, 4 or 8 bytes); `which` int32,
 * `rows` int64, checked once against each chunk's length in every column. */
static PyObject *take_rows(PyObject *self, PyObject *args)
{
    PyObject *srcs, *outs;
    Py_buffer which, rows;
    if (!PyArg_ParseTuple(args, "O!y*y*O!", &PyList_Type, &srcs, &which, &rows, &PyList_Type,
                          &outs))
        return NULL;
    Py_ssize_t ncol = PyList_GET_SIZE(srcs), n = which.len / 4, k = -1, nbuf = 0;
    int ok = PyList_GET_SIZE(outs) == ncol && rows.len == n * 8 && ncol > 0;
    for (Py_ssize_t c = 0; ok && c < ncol; c++) {
        PyObject *l = PyList_GET_ITEM(srcs, c);
        ok = PyList_Check(l) && (k < 0 || PyList_GET_SIZE(l) == k);
        if (ok)
            k = PyList_GET_SIZE(l);
    }
    /* per column: its output, then its k sources */
    Py_buffer *buf = ok ? PyMem_Calloc((size_t)(ncol * (k + 1)) + 1, sizeof(Py_buffer)) : NULL;
    const char **base = ok ? PyMem_Calloc((size_t)(ncol * k) + 1, sizeof(char *)) : NULL;
    char **out = ok ? PyMem_Calloc((size_t)ncol + 1, sizeof(char *)) : NULL;
    int *item = ok ? PyMem_Calloc((size_t)ncol + 1, sizeof(int)) : NULL;
    Py_ssize_t *len = ok ? PyMem_Calloc((size_t)k + 1, sizeof(Py_ssize_t)) : NULL;
    ok = ok && buf && base && out && item && len;
    for (Py_ssize_t j = 0; ok && j < k; j++)
        len[j] = PY_SSIZE_T_MAX;
    for (Py_ssize_t c = 0; ok && c < ncol; c++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(outs, c), &buf[nbuf], PyBUF_WRITABLE) < 0) {
            ok = 0;
            break;
        }
        Py_ssize_t size = buf[nbuf].len;
        out[c] = buf[nbuf++].buf;
        item[c] = n ? (int)(size / n) : 1;
        ok = (item[c] == 1 || item[c] == 2 || item[c] == 4 || item[c] == 8)
             && size == n * item[c];
        PyObject *l = PyList_GET_ITEM(srcs, c);
        for (Py_ssize_t j = 0; ok && j < k; j++) {
            if (PyObject_GetBuffer(PyList_GET_ITEM(l, j), &buf[nbuf], PyBUF_SIMPLE) < 0) {
                ok = 0;
                break;
            }
            ok = buf[nbuf].len % item[c] == 0;
            base[c * k + j] = buf[nbuf].buf;
            if (buf[nbuf].len / item[c] < len[j])
                len[j] = buf[nbuf].len / item[c];
            nbuf++;
        }
    }
    const int32_t *w = which.buf;
    const int64_t *r = rows.buf;
    for (Py_ssize_t i = 0; ok && i < n; i++)
        ok &= w[i] >= 0 && w[i] < k && r[i] >= 0 && r[i] < len[w[i]];
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            const char *const *from = base + w[i];
            int64_t at = r[i];
            for (Py_ssize_t c = 0; c < ncol; c++, from += k) {
                switch (item[c]) {
                case 8: ((uint64_t *)out[c])[i] = ((const uint64_t *)*from)[at]; break;
                case 4: ((uint32_t *)out[c])[i] = ((const uint32_t *)*from)[at]; break;
                case 2: ((uint16_t *)out[c])[i] = ((const uint16_t *)*from)[at]; break;
                default: ((uint8_t *)out[c])[i] = ((const uint8_t *)*from)[at]; break;
                }
            }
        }
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t j = 0; j < nbuf; j++)
        PyBuffer_Release(&buf[j]);
    PyMem_Free(buf);
    PyMem_Free(base);
    PyMem_Free(out);
    PyMem_Free(item);
    PyMem_Free(len);
    PyBuffer_Release(&which);
    PyBuffer_Release(&rows);
    if (PyErr_Occurred())
        return NULL;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "take_rows: inconsistent arrays");
        return NULL;
    }
    Py_RETURN_NONE;
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
        return release_buffers(b, 12, 0, "tuple_ids: inconsistent columns or table");
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
        return release_buffers(b, 2, 0, "reslot: inconsistent table");
    for (Py_ssize_t t = 0; t < count; t++)
        slots[probe(slots, nslots - 1, words, words + t * 5)] = t;
    return release_buffers(b, 2, 0, NULL);
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
        return release_buffers(b, 5, 0, "neighbours: inconsistent columns");
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
    return release_buffers(b, 5, 0, NULL);
}

/* turn_stats(flow, dir, ts, payload, acked_by, quick_ns, typical, count, smallest, upper, late)
 * -> number of late rows: flows._turn_stats, the data -> ACK turnarounds that are the path
 * (neither a delayed ACK nor the peer's application), per direction group (flow * 2 + dir). Rows come in flow order (time order
 * within a flow). A sample is a row with payload whose first covering ACK (`acked_by`, -1
 * if none) came at or after it, carries no data and came within `quick_ns`. Per group:
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
        return release_buffers(b, 9, 0, "turn_stats: inconsistent columns");
    int64_t *count = b[5].buf, *smallest = b[6].buf, *upper = b[7].buf, *late = b[8].buf;
    Py_ssize_t nlate = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t first[2][MAX_TYPICAL];
    memset(count, 0, groups * 8);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t g = 2 * flow[i] + dir[i];
        if (by[i] >= 0 && payload[i] > 0) {
            int64_t turn = ts[by[i]] - ts[i];
            if (turn >= 0 && payload[by[i]] == 0 && turn < quick) {
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

/* data_turns(flow, dir, ts, payload, has_data, retrans, keepalive, out_flow, out_client,
 * out_first, out_last, out_bytes): the turns of rows in (flow, time) order (flow, ts, payload
 * int64; dir int8; the rest bool): each run of rows of new data (data, neither a
 * retransmission nor a keepalive) of one sender within a flow: its flow, whether the client
 * (dir 0) sent it, its first and last row's time and its bytes, written to the outs (room
 * for every row); returns how many (nagleprobe.exchanges.turns is its numpy twin). */
static PyObject *data_turns(PyObject *self, PyObject *args)
{
    Py_buffer b[12];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*w*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4],
                          &b[5], &b[6], &b[7], &b[8], &b[9], &b[10], &b[11]))
        return NULL;
    Py_ssize_t n = b[0].len / 8, k = 0;
    const int64_t *flow = b[0].buf, *ts = b[2].buf, *pay = b[3].buf;
    const int8_t *dir = b[1].buf;
    const uint8_t *data = b[4].buf, *retrans = b[5].buf, *keepalive = b[6].buf;
    int64_t *of = b[7].buf, *first = b[9].buf, *last = b[10].buf, *bytes = b[11].buf;
    uint8_t *client = b[8].buf;
    int ok = b[1].len == n && b[2].len == n * 8 && b[3].len == n * 8 && b[4].len == n
             && b[5].len == n && b[6].len == n && b[7].len >= n * 8 && b[8].len >= n
             && b[9].len >= n * 8 && b[10].len >= n * 8 && b[11].len >= n * 8;
    if (!ok)
        return release_buffers(b, 12, 0, "data_turns: inconsistent arrays");
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!data[i] || retrans[i] || keepalive[i])
            continue;
        uint8_t c = dir[i] == 0;
        if (k == 0 || of[k - 1] != flow[i] || client[k - 1] != c) {
            of[k] = flow[i];
            client[k] = c;
            first[k] = ts[i];
            bytes[k] = 0;
            k++;
        }
        last[k - 1] = ts[i];
        bytes[k - 1] += pay[i];
    }
    Py_END_ALLOW_THREADS
    release_buffers(b, 12, 0, NULL);
    return PyLong_FromSsize_t(k);
}

static PyMethodDef methods[] = {
    {"neighbours", neighbours, METH_VARARGS,
     "Nearest earlier (or later) row of each row's flow in the same and the other direction."},
    {"tuple_ids", tuple_ids, METH_VARARGS,
     "Ids (by first appearance) and direction of each row's unordered 4-tuple."},
    {"place_rows", place_rows, METH_VARARGS,
     "A held chunk's rows put in their places in a hand-on's batches."},
    {"tally", tally, METH_VARARGS, "Per tuple: rows counted and the latest time."},
    {"take_rows", take_rows, METH_VARARGS,
     "A batch's rows gathered from the chunks holding them, every column in one pass."},
    {"reslot", reslot, METH_VARARGS, "Fill an empty 4-tuple table from its words."},
    {"segments", segments, METH_VARARGS,
     "Sequence space, classification and ACK links of every segment, per connection."},
    {"data_turns", data_turns, METH_VARARGS,
     "The runs of data rows of one sender within a flow: request and response turns."},
    {"turn_stats", turn_stats, METH_VARARGS,
     "Per direction, the data -> pure ACK turnarounds that are the path."},
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
