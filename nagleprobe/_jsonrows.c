/* Rows of a table as JSON text, from its columns: the compiled twin of jsonrows.render_python
 * (tests/test_jsonrows.py holds the two equal byte for byte, on every sample's document and
 * on random columns).
 *
 * render(ops, start, stop) -> str: rows start..stop-1, each written by running the program
 * `ops` (a sequence of tuples, see jsonrows.py), joined by commas. Ops:
 *   (0, text)                     literal text
 *   (1, int64, null_mask|None)    integer, or null where the mask is set
 *   (2, float64, k)               number as Python's repr writes it (so as json.dumps does);
 *                                 NaN is null. k >= 0 promises every value is a multiple of
 *                                 10^-k as numpy rounds (np.round(x, k) == x): then the
 *                                 digits are made here, else by Python's float repr
 *   (3, bool)                     true / false
 *   (4, int64 codes, texts)       texts[code] (JSON already), null for a negative code
 *   (5, bool mask, n)             null where the mask is set, and the next n ops skipped
 *   (6, int64 values, int64 offsets, prefix, suffix)
 *                                 prefix v,v,... suffix of values[offsets[r]:offsets[r+1]],
 *                                 null when that is empty
 *   (7, keys, int64 columns)      {"key":v,...} of the columns nonzero in the row
 * Every text must be ASCII (json.dumps writes it so). Plain C, no numpy headers. The rows are
 * written without the GIL (held again only for a float Python's repr must write), so a
 * thread can render one piece of a document while another builds the next.
 *
 * dicts(keys, cols, n) -> [{keys[j]: cols[j][r] for j} for r in range(n)]: the objects of a
 * program's rows (jsonrows.objects), each column a list of n Python values.
 *
 * factorize(objects, codes) -> uniques: the twin of jsonrows.factorize_python. Writes into
 * `codes` (int64, as long as `objects`) the index of each object among the distinct ones, in
 * order of first sight, -1 for None and NaN (missing); returns the distinct objects.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_columns.h"

enum { LIT, INT, FLOAT, BOOL, TEXT, MAYBE, INTLIST, SPARSE };

typedef struct {
    const char *s;
    Py_ssize_t n;
} Str;

typedef struct {
    int code;
    Py_buffer a, b;     /* values; mask / codes / offsets */
    int has_a, has_b;
    long k;             /* FLOAT decimals, MAYBE ops skipped */
    Str lit, prefix, suffix;
    Str *texts;         /* TEXT fragments, SPARSE keys */
    Py_ssize_t ntexts;
    Py_buffer *cols;    /* SPARSE columns */
} Op;

typedef struct {
    char *p;
    Py_ssize_t n, cap;
    PyObject *err;      /* an exception type, set (with msg) where the GIL is not held */
    const char *msg;
} Buf;

static int fail(Buf *b, PyObject *type, const char *msg)
{
    b->err = type;
    b->msg = msg;
    return -1;
}

static int grow(Buf *b, Py_ssize_t more)
{
    if (b->n + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->n + more)
        cap *= 2;
    char *p = PyMem_RawRealloc(b->p, cap);
    if (!p)
        return fail(b, PyExc_MemoryError, "jsonrows: out of memory");
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int put(Buf *b, const char *s, Py_ssize_t n)
{
    if (grow(b, n) < 0)
        return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

static int put_int(Buf *b, int64_t v)
{
    char tmp[24];
    int i = 24;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[--i] = '-';
    return put(b, tmp + i, 24 - i);
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};

static int put_float(Buf *b, double x, long k)
{
    if (isnan(x))
        return put(b, "null", 4);
    if (isinf(x))
        return fail(b, PyExc_ValueError, "Out of range float values are not JSON compliant");
    double ax = fabs(x);
    /* a multiple of 10^-k of at most 15 significant digits, written without an exponent
       by repr (1e-4 <= |x| < 1e16): its k decimals, trailing zeros cut, are repr's digits */
    if (k >= 0 && k <= 9 && (ax == 0.0 || (ax >= 1e-4 && ax * POW10[k] < 1e15))) {
        int64_t m = llround(ax * POW10[k]);
        char tmp[48];
        int i = 48, d, wrote = 0;
        int64_t ip = m;
        /* fraction digits, least significant first, trailing zeros dropped */
        for (d = 0; d < k; d++) {
            int digit = (int)(ip % 10);
            ip /= 10;
            if (digit || wrote)
                tmp[--i] = (char)('0' + digit), wrote = 1;
        }
        if (!wrote)
            tmp[--i] = '0';
        tmp[--i] = '.';
        do {
            tmp[--i] = (char)('0' + ip % 10);
            ip /= 10;
        } while (ip);
        if (signbit(x))
            tmp[--i] = '-';
        return put(b, tmp + i, 48 - i);
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    char *s = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    int rc = s ? put(b, s, (Py_ssize_t)strlen(s)) : fail(b, PyExc_MemoryError, "jsonrows: repr");
    PyErr_Clear();
    PyMem_Free(s);
    PyGILState_Release(gil);
    return rc;
}

static int ascii_str(PyObject *o, Str *out)
{
    if (!PyUnicode_Check(o) || !PyUnicode_IS_ASCII(o)) {
        PyErr_SetString(PyExc_ValueError, "jsonrows: a text that is not ASCII");
        return -1;
    }
    out->s = (const char *)PyUnicode_DATA(o);
    out->n = PyUnicode_GET_LENGTH(o);
    return 0;
}

static int get_array(PyObject *o, Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t need)
{
    if (PyObject_GetBuffer(o, view, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->itemsize != itemsize || view->len / itemsize < need) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "jsonrows: a column of the wrong type or length");
        return -1;
    }
    return 0;
}

static void free_ops(Op *ops, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Op *op = &ops[i];
        if (op->has_a)
            PyBuffer_Release(&op->a);
        if (op->has_b)
            PyBuffer_Release(&op->b);
        if (op->cols) {
            for (Py_ssize_t j = 0; j < op->ntexts; j++)
                if (op->cols[j].obj)
                    PyBuffer_Release(&op->cols[j]);
            PyMem_Free(op->cols);
        }
        PyMem_Free(op->texts);
    }
    PyMem_Free(ops);
}

static int texts_of(PyObject *seq, Op *op)
{
    PyObject *fast = PySequence_Fast(seq, "jsonrows: texts must be a sequence");
    if (!fast)
        return -1;
    op->ntexts = PySequence_Fast_GET_SIZE(fast);
    op->texts = PyMem_Calloc(op->ntexts ? op->ntexts : 1, sizeof(Str));
    if (!op->texts) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < op->ntexts; j++)
        if (ascii_str(PySequence_Fast_GET_ITEM(fast, j), &op->texts[j]) < 0) {
            Py_DECREF(fast);
            return -1;
        }
    Py_DECREF(fast);  /* the strings stay alive: `ops` holds the sequence */
    return 0;
}

/* Parse one op tuple; `rows` is the number of rows every column must cover. */
static int parse_op(PyObject *t, Op *op, Py_ssize_t rows)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 2) {
        PyErr_SetString(PyExc_ValueError, "jsonrows: an op must be a tuple (code, ...)");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    op->code = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 0));
    PyObject *a1 = PyTuple_GET_ITEM(t, 1), *a2 = n > 2 ? PyTuple_GET_ITEM(t, 2) : NULL;
    switch (op->code) {
    case LIT:
        return ascii_str(a1, &op->lit);
    case INT:
    case FLOAT:
    case BOOL:
    case TEXT:
    case MAYBE:
        if (get_array(a1, &op->a, op->code == BOOL || op->code == MAYBE ? 1 : 8, rows) < 0)
            return -1;
        op->has_a = 1;
        if (op->code == INT && a2 && a2 != Py_None) {
            if (get_array(a2, &op->b, 1, rows) < 0)
                return -1;
            op->has_b = 1;
        }
        if (op->code == FLOAT || op->code == MAYBE) {
            if (!a2)
                goto bad;
            op->k = PyLong_AsLong(a2);
            if (op->k == -1 && PyErr_Occurred())
                return -1;
        }
        if (op->code == TEXT)
            return a2 ? texts_of(a2, op) : (PyErr_SetString(PyExc_ValueError, "jsonrows: TEXT needs texts"), -1);
        return 0;
    case INTLIST:
        if (n != 5)
            goto bad;
        if (get_array(a2, &op->b, 8, rows + 1) < 0)
            return -1;
        op->has_b = 1;
        if (get_array(a1, &op->a, 8, 0) < 0)
            return -1;
        op->has_a = 1;
        return ascii_str(PyTuple_GET_ITEM(t, 3), &op->prefix) < 0 ? -1
             : ascii_str(PyTuple_GET_ITEM(t, 4), &op->suffix);
    case SPARSE: {
        if (!a2 || texts_of(a1, op) < 0)
            goto bad_or_err;
        PyObject *fast = PySequence_Fast(a2, "jsonrows: SPARSE columns must be a sequence");
        if (!fast)
            return -1;
        if (PySequence_Fast_GET_SIZE(fast) != op->ntexts) {
            Py_DECREF(fast);
            goto bad;
        }
        op->cols = PyMem_Calloc(op->ntexts ? op->ntexts : 1, sizeof(Py_buffer));
        if (!op->cols) {
            Py_DECREF(fast);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t j = 0; j < op->ntexts; j++)
            if (get_array(PySequence_Fast_GET_ITEM(fast, j), &op->cols[j], 8, rows) < 0) {
                op->cols[j].obj = NULL;
                Py_DECREF(fast);
                return -1;
            }
        Py_DECREF(fast);
        return 0;
    }
    }
bad:
    PyErr_SetString(PyExc_ValueError, "jsonrows: a malformed op");
bad_or_err:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "jsonrows: a malformed op");
    return -1;
}

static int write_row(Buf *b, const Op *ops, Py_ssize_t nops, Py_ssize_t r)
{
    for (Py_ssize_t i = 0; i < nops; i++) {
        const Op *op = &ops[i];
        int rc = 0;
        switch (op->code) {
        case LIT:
            rc = put(b, op->lit.s, op->lit.n);
            break;
        case INT:
            if (op->has_b && ((const uint8_t *)op->b.buf)[r])
                rc = put(b, "null", 4);
            else
                rc = put_int(b, ((const int64_t *)op->a.buf)[r]);
            break;
        case FLOAT:
            rc = put_float(b, ((const double *)op->a.buf)[r], op->k);
            break;
        case BOOL:
            rc = ((const uint8_t *)op->a.buf)[r] ? put(b, "true", 4) : put(b, "false", 5);
            break;
        case TEXT: {
            int64_t c = ((const int64_t *)op->a.buf)[r];
            if (c < 0)
                rc = put(b, "null", 4);
            else if (c >= op->ntexts)
                return fail(b, PyExc_IndexError, "jsonrows: a text code out of range");
            else
                rc = put(b, op->texts[c].s, op->texts[c].n);
            break;
        }
        case MAYBE:
            if (((const uint8_t *)op->a.buf)[r]) {
                rc = put(b, "null", 4);
                i += op->k;
            }
            break;
        case INTLIST: {
            const int64_t *off = op->b.buf, *v = op->a.buf;
            int64_t lo = off[r], hi = off[r + 1];
            if (lo < 0 || hi > (int64_t)(op->a.len / 8) || lo > hi)
                return fail(b, PyExc_IndexError, "jsonrows: list offsets out of range");
            if (lo == hi) {
                rc = put(b, "null", 4);
                break;
            }
            rc = put(b, op->prefix.s, op->prefix.n);
            for (int64_t j = lo; j < hi && rc == 0; j++) {
                if (j > lo)
                    rc = put(b, ",", 1);
                if (rc == 0)
                    rc = put_int(b, v[j]);
            }
            if (rc == 0)
                rc = put(b, op->suffix.s, op->suffix.n);
            break;
        }
        case SPARSE: {
            int first = 1;
            rc = put(b, "{", 1);
            for (Py_ssize_t j = 0; j < op->ntexts && rc == 0; j++) {
                int64_t v = ((const int64_t *)op->cols[j].buf)[r];
                if (!v)
                    continue;
                if (!first)
                    rc = put(b, ",", 1);
                first = 0;
                if (rc == 0)
                    rc = put(b, op->texts[j].s, op->texts[j].n);
                if (rc == 0)
                    rc = put_int(b, v);
            }
            if (rc == 0)
                rc = put(b, "}", 1);
            break;
        }
        }
        if (rc < 0)
            return -1;
    }
    return 0;
}

static PyObject *render(PyObject *self, PyObject *args)
{
    PyObject *seq;
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "Onn", &seq, &start, &stop))
        return NULL;
    if (start < 0 || stop < start) {
        PyErr_SetString(PyExc_ValueError, "jsonrows: bad row range");
        return NULL;
    }
    PyObject *fast = PySequence_Fast(seq, "jsonrows: ops must be a sequence");
    if (!fast)
        return NULL;
    Py_ssize_t nops = PySequence_Fast_GET_SIZE(fast);
    Op *ops = PyMem_Calloc(nops ? nops : 1, sizeof(Op));
    if (!ops) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    Buf b = {NULL, 0, 0, NULL, NULL};
    PyObject *out = NULL;
    for (Py_ssize_t i = 0; i < nops; i++)
        if (parse_op(PySequence_Fast_GET_ITEM(fast, i), &ops[i], stop) < 0)
            goto done;
    for (Py_ssize_t i = 0; i < nops; i++)
        if (ops[i].code == MAYBE && (ops[i].k < 0 || ops[i].k > nops - 1 - i)) {
            PyErr_SetString(PyExc_ValueError, "jsonrows: MAYBE skips past the end");
            goto done;
        }
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = start; r < stop && rc == 0; r++) {
        if (r > start)
            rc = put(&b, ",", 1);
        if (rc == 0)
            rc = write_row(&b, ops, nops, r);
    }
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_SetString(b.err, b.msg);
        goto done;
    }
    out = PyUnicode_New(b.n, 127);
    if (out)
        memcpy(PyUnicode_DATA(out), b.p, b.n);
done:
    PyMem_RawFree(b.p);
    free_ops(ops, nops);
    Py_DECREF(fast);
    return out;
}

static int missing(PyObject *v)
{
    return v == Py_None || (PyFloat_Check(v) && isnan(PyFloat_AS_DOUBLE(v)));
}

static PyObject *factorize(PyObject *self, PyObject *args)
{
    PyObject *seq;
    Py_buffer codes;
    if (!PyArg_ParseTuple(args, "Ow*", &seq, &codes))
        return NULL;
    PyObject *fast = PySequence_Fast(seq, "factorize: a sequence of objects");
    PyObject *index = PyDict_New(), *uniques = PyList_New(0);
    Py_ssize_t n = fast ? PySequence_Fast_GET_SIZE(fast) : 0;
    int ok = fast && index && uniques;
    if (ok && codes.len != n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "factorize: codes must be int64, one per object");
        ok = 0;
    }
    int64_t *out = codes.buf;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(fast, i);
        if (missing(v)) {
            out[i] = -1;
            continue;
        }
        PyObject *at = PyDict_GetItemWithError(index, v);
        if (at) {
            out[i] = PyLong_AsLongLong(at);
            continue;
        }
        if (PyErr_Occurred())
            ok = 0;
        Py_ssize_t k = PyList_GET_SIZE(uniques);
        PyObject *num = ok ? PyLong_FromSsize_t(k) : NULL;
        ok = num && PyDict_SetItem(index, v, num) == 0 && PyList_Append(uniques, v) == 0;
        Py_XDECREF(num);
        out[i] = k;
    }
    PyBuffer_Release(&codes);
    Py_XDECREF(fast);
    Py_XDECREF(index);
    if (!ok) {
        Py_XDECREF(uniques);
        return NULL;
    }
    return uniques;
}

static PyObject *dicts(PyObject *self, PyObject *args)
{
    PyObject *keys, *cols;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!O!n", &PyList_Type, &keys, &PyList_Type, &cols, &n))
        return NULL;
    Py_ssize_t nk = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(cols) != nk || n < 0) {
        PyErr_SetString(PyExc_ValueError, "dicts: one column per key");
        return NULL;
    }
    for (Py_ssize_t j = 0; j < nk; j++) {
        PyObject *c = PyList_GET_ITEM(cols, j);
        if (!PyList_Check(c) || PyList_GET_SIZE(c) != n) {
            PyErr_SetString(PyExc_ValueError, "dicts: each column a list of one value per row");
            return NULL;
        }
    }
    /* each row's dict a copy of one with every key (None values): no resizing per row */
    PyObject *shape = PyDict_New();
    for (Py_ssize_t j = 0; shape && j < nk; j++)
        if (PyDict_SetItem(shape, PyList_GET_ITEM(keys, j), Py_None) < 0)
            Py_CLEAR(shape);
    PyObject *out = shape ? PyList_New(n) : NULL;
    for (Py_ssize_t r = 0; out && r < n; r++) {
        PyObject *d = PyDict_Copy(shape);
        if (!d) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, r, d);
        for (Py_ssize_t j = 0; j < nk; j++) {
            if (PyDict_SetItem(d, PyList_GET_ITEM(keys, j),
                               PyList_GET_ITEM(PyList_GET_ITEM(cols, j), r)) < 0) {
                Py_CLEAR(out);
                break;
            }
        }
    }
    Py_XDECREF(shape);
    return out;
}

static PyMethodDef methods[] = {
    {"render", render, METH_VARARGS, "Rows start..stop-1 of a program of ops as JSON text."},
    {"factorize", factorize, METH_VARARGS,
     "Codes of objects among the distinct ones (written to an int64 buffer); the distinct."},
    {"dicts", dicts, METH_VARARGS, "Per row r, {keys[j]: cols[j][r]} (keys and cols lists)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jsonrows", NULL, -1, methods};

PyMODINIT_FUNC PyInit__jsonrows(void) { return PyModule_Create(&module); }
