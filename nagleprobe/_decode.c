/* The common case of decode.decode in one pass over the records, compiled.
 *
 * decode(data, offset, caplen, linktype, slow, *columns) -> (k, s)
 *
 * `columns` are the output buffers of COMPILED_COLUMNS (_columns.h, generated from
 * decode.COMPILED_COLUMNS), in that order; the module exports their names as
 * COMPILED_COLUMNS.
 *
 * For each record i (its bytes at data[offset[i]:offset[i] + caplen[i]], link type
 * linktype[i]) that is a well-formed TCP segment in one of the usual shapes (supported link
 * type, IPv4 or IPv6 without extension headers, not a fragment, headers within the captured
 * bytes and the IP lengths, IP length not 0), writes its header fields to the next row k of
 * the output columns (so row k is the k-th record not in `slow`: no array of rows is
 * written, fresh pages being most of the cost). Every other record's index goes to slow[s],
 * in order, for the numpy decoder, which counts why it is skipped or decodes it (IPv6 extension headers, TSO
 * super-frames). The fields are exactly those of the numpy decoder; tests/test_decode.py
 * checks that. Input columns: int64 offset and caplen, int32 linktype; outputs have
 * decode.TCP_COLUMNS' types and room for every record. Plain C, no numpy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_columns.h"

static inline uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static inline uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

static int ver_of_ethertype(uint32_t et) { return et == 0x0800 ? 4 : et == 0x86DD ? 6 : 0; }

static int ver_of_family(uint32_t fam)
{
    return fam == 2 ? 4 : (fam == 24 || fam == 28 || fam == 30) ? 6 : 0;
}

/* Offset of the network header from the record start and the IP version; version 0 when
 * the record is not plainly IP (the numpy decoder then says why). */
static int link_layer(const uint8_t *p, int64_t cap, int32_t lt, int64_t *l3)
{
    switch (lt) {
    case 1: { /* EN10MB, up to MAX_VLAN_TAGS 802.1Q / QinQ tags */
        if (cap < ETHERNET_SIZE)
            return 0;
        uint32_t et = be16(p + ETHERNET_ETHERTYPE);
        int64_t hdr = ETHERNET_SIZE;
        for (int t = 0; t < MAX_VLAN_TAGS && IS_VLAN_TPID(et); t++) {
            if (cap < hdr + VLAN_TAG_SIZE)
                return 0;
            et = be16(p + hdr + VLAN_TAG_ETHERTYPE);
            hdr += VLAN_TAG_SIZE;
        }
        *l3 = hdr;
        return ver_of_ethertype(et);
    }
    case 113: /* LINUX_SLL */
        if (cap < SLL_SIZE)
            return 0;
        *l3 = SLL_SIZE;
        return ver_of_ethertype(be16(p + SLL_PROTOCOL));
    case 276: /* LINUX_SLL2 */
        if (cap < SLL2_SIZE)
            return 0;
        *l3 = SLL2_SIZE;
        return ver_of_ethertype(be16(p + SLL2_PROTOCOL));
    case 12: case 101: /* RAW */
        if (cap < 1)
            return 0;
        *l3 = 0;
        return (p[0] >> 4) == 4 ? 4 : (p[0] >> 4) == 6 ? 6 : 0;
    case 228: *l3 = 0; return 4;
    case 229: *l3 = 0; return 6;
    case 0: { /* NULL: the family in the capturing host's byte order */
        if (cap < LOOPBACK_SIZE)
            return 0;
        uint32_t le = (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
        *l3 = LOOPBACK_SIZE;
        return ver_of_family(le <= 0xFFFF ? le : be32(p));
    }
    case 108: /* LOOP */
        if (cap < LOOPBACK_SIZE)
            return 0;
        *l3 = LOOPBACK_SIZE;
        return ver_of_family(be32(p));
    }
    return 0;
}

/* the output columns, one pointer per COMPILED_COLUMNS entry */
typedef struct {
#define COLUMN_POINTER(name, type) type *name;
    COMPILED_COLUMNS(COLUMN_POINTER)
#undef COLUMN_POINTER
} Columns;

/* TCP options as the numpy decoder reads them: a non-SYN segment whose options start with
 * the usual timestamp layout (and are at least 12 bytes) gives only its timestamp; others
 * are parsed option by option, the last of a kind winning, up to end-of-list or a malformed
 * option. */
static void options(const uint8_t *o, int n, uint16_t flags, const Columns *c, Py_ssize_t k)
{
    int32_t mss = -1;
    int16_t ws = -1;
    uint8_t sack = 0, has_ts = 0;
    uint32_t tsval = 0;
    if (n >= 12 && !(flags & SYN)) {
        if (o[0] == 1 && o[1] == 1 && o[2] == 8 && o[3] == 10) {
            tsval = be32(o + 4);
            has_ts = 1;
            goto done;
        }
        if (o[0] == 8 && o[1] == 10) {
            tsval = be32(o + 2);
            has_ts = 1;
            goto done;
        }
    }
    for (int pos = 0; pos < n;) {
        int kind = o[pos];
        if (kind == 1) {
            pos++;
            continue;
        }
        if (kind == 0 || pos + 1 >= n)
            break;
        int ln = o[pos + 1];
        if (ln < 2 || pos + ln > n)
            break;
        const uint8_t *v = o + pos + 2;
        if (kind == 2 && ln == 4)
            mss = (int32_t)be16(v);
        else if (kind == 3 && ln == 3)
            ws = v[0];
        else if (kind == 4 && ln == 2)
            sack = 1;
        else if (kind == 8 && ln == 10) {
            tsval = be32(v);
            has_ts = 1;
        }
        pos += ln;
    }
done:
    c->mss[k] = mss;
    c->wscale[k] = ws;
    c->sack_ok[k] = sack;
    c->tsval[k] = tsval;
    c->has_ts[k] = has_ts;
}

/* Decode one record into row k; 0 if it is not in the common shape. */
static int decode_record(const uint8_t *p, int64_t cap, int32_t lt, const Columns *c, Py_ssize_t k)
{
    int64_t l3 = 0, l4, avail;
    int ver = link_layer(p, cap, lt, &l3);
    const uint8_t *h = p + l3;
    if (ver == 4) {
        if (l3 + IPV4_SIZE > cap || (h[IPV4_VERSION_IHL] >> 4) != 4)
            return 0;
        int64_t ihl = (int64_t)(h[IPV4_VERSION_IHL] & 0x0F) * 4, tot = be16(h + IPV4_TOTAL_LENGTH);
        if (ihl < IPV4_SIZE || tot == 0 || l3 + ihl > cap || h[IPV4_PROTOCOL] != 6
            || (be16(h + IPV4_FRAGMENT) & 0x3FFF) || tot < ihl + TCP_SIZE)
            return 0;
        c->src_hi[k] = c->dst_hi[k] = 0;
        c->ipid[k] = (uint16_t)be16(h + IPV4_ID);
        c->src_lo[k] = be32(h + IPV4_SRC) | V4_MAPPED;
        c->dst_lo[k] = be32(h + IPV4_DST) | V4_MAPPED;
        l4 = l3 + ihl;
        avail = tot - ihl;
    } else if (ver == 6) {
        if (l3 + IPV6_SIZE > cap || (h[0] >> 4) != 6)
            return 0;
        avail = be16(h + IPV6_PAYLOAD_LENGTH);
        if (avail == 0 || h[IPV6_NEXT_HEADER] != 6)
            return 0;
        c->ipid[k] = 0;
        c->src_hi[k] = be64(h + IPV6_SRC);
        c->src_lo[k] = be64(h + IPV6_SRC + 8);
        c->dst_hi[k] = be64(h + IPV6_DST);
        c->dst_lo[k] = be64(h + IPV6_DST + 8);
        l4 = l3 + IPV6_SIZE;
    } else {
        return 0;
    }
    if (l4 + TCP_SIZE > cap)
        return 0;
    const uint8_t *t = p + l4;
    int64_t doff = (int64_t)(t[TCP_OFFSET_FLAGS] >> 4) * 4;
    if (doff < TCP_SIZE || l4 + doff > cap || doff > avail)
        return 0;
    uint16_t flags = (uint16_t)((t[TCP_OFFSET_FLAGS] & 1) << 8 | t[TCP_OFFSET_FLAGS + 1]);
    c->ipver[k] = (uint8_t)ver;
    c->sport[k] = (uint16_t)be16(t + TCP_SPORT);
    c->dport[k] = (uint16_t)be16(t + TCP_DPORT);
    c->seq[k] = be32(t + TCP_SEQ);
    c->ack[k] = be32(t + TCP_ACK);
    c->flags[k] = flags;
    c->window[k] = (uint16_t)be16(t + TCP_WINDOW);
    c->payload[k] = (int32_t)(avail - doff);
    options(t + TCP_SIZE, (int)(doff - TCP_SIZE), flags, c, k);
    return 1;
}

#define NIN 4 /* data, offset, caplen, linktype (read-only); then slow and the columns */
#define NOUT (1 + N_COMPILED_COLUMNS)

static PyObject *decode(PyObject *self, PyObject *args)
{
    Py_buffer b[NIN + NOUT];
    memset(b, 0, sizeof b);
    if (PyTuple_GET_SIZE(args) != NIN + NOUT) {
        PyErr_Format(PyExc_TypeError, "decode takes %d buffers (%zd given)", NIN + NOUT,
                     PyTuple_GET_SIZE(args));
        return NULL;
    }
    for (int j = 0; j < NIN + NOUT; j++)
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(args, j), &b[j],
                               j < NIN ? PyBUF_SIMPLE : PyBUF_WRITABLE) < 0) {
            while (j-- > 0)
                PyBuffer_Release(&b[j]);
            return NULL;
        }
    /* element sizes of offset caplen linktype slow, then the columns */
#define COLUMN_SIZE(name, type) sizeof(type),
    static const Py_ssize_t size[NIN - 1 + NOUT] = {8, 8, 4, 8, COMPILED_COLUMNS(COLUMN_SIZE)};
#undef COLUMN_SIZE
    Py_ssize_t n = b[1].len / 8, k = 0, s = 0;
    int ok = 1;
    for (int j = 1; j < NIN + NOUT; j++)
        if (b[j].len != n * size[j - 1])
            ok = 0;
    if (!ok) {
        for (int j = 0; j < NIN + NOUT; j++)
            PyBuffer_Release(&b[j]);
        PyErr_SetString(PyExc_ValueError, "column buffers of the wrong size");
        return NULL;
    }
    const uint8_t *data = b[0].buf;
    const int64_t *off = b[1].buf, *cap = b[2].buf;
    const int32_t *lt = b[3].buf;
    int64_t *slow = b[4].buf;
    Columns c;
    const Py_buffer *col = b + NIN + 1;
#define COLUMN_BUFFER(name, type) c.name = (col++)->buf;
    COMPILED_COLUMNS(COLUMN_BUFFER)
#undef COLUMN_BUFFER
    Py_ssize_t len = b[0].len;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (off[i] < 0 || cap[i] < 0 || off[i] > len || cap[i] > len - off[i]
            || !decode_record(data + off[i], cap[i], lt[i], &c, k))
            slow[s++] = i;
        else
            k++;
    }
    Py_END_ALLOW_THREADS
    for (int j = 0; j < NIN + NOUT; j++)
        PyBuffer_Release(&b[j]);
    return Py_BuildValue("nn", k, s);
}


/* peel(data, offset, caplen, linktype, status, inner, kind, key): encap.peel_one of every
 * record, compiled (same statuses, offsets, kinds and keys; tests/test_encap.py checks).
 * status int8, inner int64 (offset of the inner network header from the record start),
 * kind int32 (1 Ethernet frame, 12 IP header), key uint64 (the tunnel, 0 without). */
enum { W_ETH_TYPE, W_FRAME, W_IP, W_MPLS, W_PPPOE };

typedef struct { uint64_t key; int layers; } Tun;

static inline uint64_t mixw(uint64_t h, uint64_t w)
{
    h ^= w;
    h *= MIX_MULTIPLIER;
    return h ^ (h >> MIX_SHIFT);
}

/* a layer: kind, id and (for IP-carried tunnels) the two outer addresses as (hi, lo) */
static void add_layer(Tun *t, uint64_t kind, uint64_t id, int has_ends, const uint64_t e[4])
{
    t->key = mixw(mixw(t->key, kind), id);
    if (has_ends) {
        int swap = e[0] > e[2] || (e[0] == e[2] && e[1] > e[3]);
        const uint64_t *a = swap ? e + 2 : e, *c = swap ? e : e + 2;
        t->key = mixw(mixw(mixw(mixw(t->key, a[0]), a[1]), c[0]), c[1]);
    }
    t->layers++;
}

static int ip_tunnel(const uint8_t *b, int64_t n, int64_t p, uint32_t et)
{
    uint32_t proto;
    int64_t body;
    if (et == 0x0800) {
        if (p + IPV4_SIZE > n || (be16(b + p + IPV4_FRAGMENT) & 0x3FFF))
            return 0;
        proto = b[p + IPV4_PROTOCOL];
        body = p + (int64_t)(b[p + IPV4_VERSION_IHL] & 15) * 4;
    } else {
        if (p + IPV6_SIZE > n)
            return 0;
        proto = b[p + IPV6_NEXT_HEADER];
        body = p + IPV6_SIZE;
    }
    if (proto == 4 || proto == 41 || proto == 47)
        return 1;
    if (proto == 17 && body + UDP_DPORT + 2 <= n) {
        uint32_t dp = be16(b + body + UDP_DPORT);
        return dp == VXLAN_PORT || dp == GENEVE_PORT;
    }
    return 0;
}

static int peel_one(const uint8_t *b, int64_t n, int32_t lt, int64_t *inner, int32_t *kind,
                    uint64_t *key)
{
    Tun t = {0, 0};
    int what;
    int64_t p;
    uint32_t et = 0;
    static const uint64_t none[4] = {0, 0, 0, 0};
#define FAIL(st) return t.layers ? (st) : NOT_TUNNEL
#define DONE(at, k) do { if (!t.layers) return NOT_TUNNEL; *inner = (at); *kind = (k); \
        *key = t.key ? t.key : 1; return PEELED; } while (0)
    switch (lt) {
    case 1:
        if (n < ETHERNET_SIZE) return NOT_TUNNEL;
        what = W_ETH_TYPE; p = ETHERNET_SIZE; et = be16(b + ETHERNET_ETHERTYPE); break;
    case 113:
        if (n < SLL_SIZE) return NOT_TUNNEL;
        what = W_ETH_TYPE; p = SLL_SIZE; et = be16(b + SLL_PROTOCOL); break;
    case 276:
        if (n < SLL2_SIZE) return NOT_TUNNEL;
        what = W_ETH_TYPE; p = SLL2_SIZE; et = be16(b + SLL2_PROTOCOL); break;
    case 12: case 101: case 228: case 229: what = W_IP; p = 0; break;
    case 0: case 108:
        if (n < LOOPBACK_SIZE) return NOT_TUNNEL;
        what = W_IP; p = LOOPBACK_SIZE; break;
    default: return NOT_TUNNEL;
    }
    if (what == W_ETH_TYPE)
        for (int v = 0; v < MAX_VLAN_TAGS && IS_VLAN_TPID(et); v++) {
            if (p + VLAN_TAG_SIZE > n)
                FAIL(TRUNCATED);
            et = be16(b + p + VLAN_TAG_ETHERTYPE);
            p += VLAN_TAG_SIZE;
        }
    for (;;) {
        if (t.layers > MAX_DEPTH)
            return TOO_DEEP;
        if (what == W_FRAME) {
            int64_t frame = p;
            if (p + ETHERNET_SIZE > n)
                FAIL(TRUNCATED);
            et = be16(b + p + ETHERNET_ETHERTYPE);
            p += ETHERNET_SIZE;
            for (int v = 0; v < MAX_VLAN_TAGS && IS_VLAN_TPID(et); v++) {
                if (p + VLAN_TAG_SIZE > n)
                    FAIL(TRUNCATED);
                et = be16(b + p + VLAN_TAG_ETHERTYPE);
                p += VLAN_TAG_SIZE;
            }
            if ((et == 0x0800 || et == 0x86DD) && !ip_tunnel(b, n, p, et))
                DONE(frame, INNER_ETHERNET);
            what = W_ETH_TYPE;
            continue;
        }
        if (what == W_ETH_TYPE) {
            if (et == 0x0800 || et == 0x86DD) what = W_IP;
            else if (et == 0x8847 || et == 0x8848) what = W_MPLS;
            else if (et == 0x8864) what = W_PPPOE;
            else if (et == 0x6558) what = W_FRAME;
            else FAIL(NOT_IP);
            continue;
        }
        if (what == W_MPLS) {
            for (int i = 0;; i++) {
                if (i == MAX_MPLS_LABELS)
                    return TOO_DEEP;
                if (p + MPLS_LABEL_SIZE > n)
                    return TRUNCATED;
                int bos = b[p + MPLS_LABEL_LABEL_TC_BOS] & 1;
                p += MPLS_LABEL_SIZE;
                if (bos)
                    break;
            }
            add_layer(&t, TUNNEL_MPLS, 0, 0, none);
            if (p >= n)
                return TRUNCATED;
            int nib = b[p] >> 4;
            if (nib == 4 || nib == 6)
                what = W_IP;
            else if (nib == 0) { /* a pseudowire control word, then an Ethernet frame */
                p += PW_CONTROL_WORD;
                what = W_FRAME;
            } else
                return NOT_IP;
            continue;
        }
        if (what == W_PPPOE) {
            if (p + PPPOE_SIZE > n)
                return TRUNCATED;
            if (b[p + PPPOE_VERSION_TYPE] != 0x11 || b[p + PPPOE_CODE] != 0)
                FAIL(NOT_IP);
            add_layer(&t, TUNNEL_PPPOE, be16(b + p + PPPOE_SESSION), 0, none);
            uint32_t proto = be16(b + p + PPPOE_PPP_PROTOCOL);
            p += PPPOE_SIZE;
            if (proto != 0x0021 && proto != 0x0057)
                return NOT_IP;
            what = W_IP;
            continue;
        }
        /* W_IP */
        if (p + 1 > n)
            FAIL(TRUNCATED);
        int v = b[p] >> 4;
        uint32_t proto;
        int64_t body, end;
        uint64_t e[4];
        if (v == 4) {
            if (p + IPV4_SIZE > n)
                FAIL(TRUNCATED);
            int64_t ihl = (int64_t)(b[p + IPV4_VERSION_IHL] & 15) * 4;
            int64_t tot = be16(b + p + IPV4_TOTAL_LENGTH);
            proto = b[p + IPV4_PROTOCOL];
            e[0] = e[2] = 0;
            e[1] = be32(b + p + IPV4_SRC) | V4_MAPPED;
            e[3] = be32(b + p + IPV4_DST) | V4_MAPPED;
            body = p + ihl;
            end = p + tot;
            if (ihl < IPV4_SIZE || (be16(b + p + IPV4_FRAGMENT) & 0x3FFF) || tot < ihl)
                DONE(p, INNER_IP);
        } else if (v == 6) {
            if (p + IPV6_SIZE > n)
                FAIL(TRUNCATED);
            proto = b[p + IPV6_NEXT_HEADER];
            e[0] = be64(b + p + IPV6_SRC);
            e[1] = be64(b + p + IPV6_SRC + 8);
            e[2] = be64(b + p + IPV6_DST);
            e[3] = be64(b + p + IPV6_DST + 8);
            body = p + IPV6_SIZE;
            end = body + be16(b + p + IPV6_PAYLOAD_LENGTH);
        } else
            DONE(p, INNER_IP);
        if (proto == 4 || proto == 41) {
            add_layer(&t, TUNNEL_IPIP, 0, 1, e);
            p = body;
            what = W_IP;
            continue;
        }
        if (proto == 47) {
            if (body + GRE_SIZE > n)
                FAIL(TRUNCATED);
            uint32_t fl = be16(b + body + GRE_FLAGS_VERSION), gp = be16(b + body + GRE_PROTOCOL);
            if (fl & 7)
                DONE(p, INNER_IP);
            int64_t q = body + GRE_SIZE;
            uint64_t gkey = 0;
            if (fl & 0x8000) /* a checksum word */
                q += GRE_WORD;
            if (fl & 0x2000) { /* a key word */
                if (q + GRE_WORD > n)
                    FAIL(TRUNCATED);
                gkey = be32(b + q);
                q += GRE_WORD;
            }
            if (fl & 0x1000) /* a sequence number word */
                q += GRE_WORD;
            if (gp != 0x0800 && gp != 0x86DD && gp != 0x6558 && gp != 0x8847 && gp != 0x8848
                && gp != 0x88BE && gp != 0x22EB)
                DONE(p, INNER_IP);
            add_layer(&t, TUNNEL_GRE, gkey, 1, e);
            if (q > n || q > end)
                return BAD_LENGTH;
            if (gp == 0x88BE && !(fl & 0x1000)) {
                add_layer(&t, TUNNEL_ERSPAN, 0, 0, none);
                p = q;
                what = W_FRAME;
            } else if (gp == 0x88BE || gp == 0x22EB) {
                int64_t hl = gp == 0x88BE ? ERSPAN2_SIZE : ERSPAN3_SIZE;
                if (q + hl > n)
                    return TRUNCATED;
                if (gp == 0x22EB && (b[q + ERSPAN3_FLAGS + 1] & 1)) /* the O flag */
                    hl += ERSPAN3_SUBHEADER;
                add_layer(&t, TUNNEL_ERSPAN, be16(b + q + ERSPAN2_SESSION) & 0x3FF, 0, none);
                p = q + hl;
                what = W_FRAME;
            } else {
                p = q;
                et = gp;
                what = W_ETH_TYPE;
            }
            if (p > end)
                return BAD_LENGTH;
            continue;
        }
        if (proto == 17 && body + UDP_SIZE <= n) {
            uint32_t dp = be16(b + body + UDP_DPORT);
            int64_t ulen = be16(b + body + UDP_LENGTH);
            int64_t h = body + UDP_SIZE; /* the VXLAN or GENEVE header */
            if (dp == VXLAN_PORT) {
                if (h + VXLAN_SIZE > n)
                    FAIL(TRUNCATED);
                if (ulen < UDP_SIZE + VXLAN_SIZE || body + ulen > end) {
                    add_layer(&t, TUNNEL_VXLAN, 0, 1, e);
                    return BAD_LENGTH;
                }
                /* the 24-bit VNI: the word at it, less the reserved byte after */
                add_layer(&t, TUNNEL_VXLAN, (uint64_t)be32(b + h + VXLAN_VNI) >> 8, 1, e);
                p = h + VXLAN_SIZE;
                what = W_FRAME;
                continue;
            }
            if (dp == GENEVE_PORT) {
                if (h + GENEVE_SIZE > n)
                    FAIL(TRUNCATED);
                int64_t hl = GENEVE_SIZE + (int64_t)(b[h + GENEVE_VERSION_OPTLEN] & 0x3F) * 4;
                add_layer(&t, TUNNEL_GENEVE, (uint64_t)be32(b + h + GENEVE_VNI) >> 8, 1, e);
                if (ulen < UDP_SIZE + hl || body + ulen > end)
                    return BAD_LENGTH;
                p = h + hl;
                et = be16(b + h + GENEVE_PROTOCOL);
                what = W_ETH_TYPE;
                if (p > n)
                    return TRUNCATED;
                continue;
            }
        }
        DONE(p, INNER_IP);
    }
#undef FAIL
#undef DONE
}

static PyObject *peel(PyObject *self, PyObject *args)
{
    Py_buffer b[8];
    memset(b, 0, sizeof b);
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
                          &b[6], &b[7]))
        return NULL;
    Py_ssize_t n = b[1].len / 8, len = b[0].len;
    static const Py_ssize_t size[7] = {8, 8, 4, 1, 8, 4, 8};
    int ok = 1;
    for (int j = 1; j < 8; j++)
        ok &= b[j].len == n * size[j - 1];
    if (!ok) {
        for (int j = 0; j < 8; j++)
            PyBuffer_Release(&b[j]);
        PyErr_SetString(PyExc_ValueError, "peel: column buffers of the wrong size");
        return NULL;
    }
    const uint8_t *data = b[0].buf;
    const int64_t *off = b[1].buf, *cap = b[2].buf;
    const int32_t *lt = b[3].buf;
    int8_t *status = b[4].buf;
    int64_t *inner = b[5].buf;
    int32_t *kind = b[6].buf;
    uint64_t *key = b[7].buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        inner[i] = 0;
        kind[i] = 0;
        key[i] = 0;
        if (off[i] < 0 || cap[i] < 0 || off[i] > len || cap[i] > len - off[i])
            status[i] = NOT_TUNNEL;
        else
            status[i] = (int8_t)peel_one(data + off[i], cap[i], lt[i], &inner[i], &kind[i],
                                         &key[i]);
        if (status[i] != PEELED)
            inner[i] = kind[i] = 0, key[i] = 0;
    }
    Py_END_ALLOW_THREADS
    for (int j = 0; j < 8; j++)
        PyBuffer_Release(&b[j]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"peel", peel, METH_VARARGS, "Inner packets of tunnelled records."},
    {"decode", decode, METH_VARARGS, "TCP headers of the records in the usual shapes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_decode", NULL, -1, methods};

/* The names of COMPILED_COLUMNS, in order, as a tuple of str. */
static PyObject *column_names(void)
{
#define COLUMN_NAME(name, type) #name,
    static const char *const names[N_COMPILED_COLUMNS] = {COMPILED_COLUMNS(COLUMN_NAME)};
#undef COLUMN_NAME
    PyObject *t = PyTuple_New(N_COMPILED_COLUMNS);
    for (int j = 0; t != NULL && j < N_COMPILED_COLUMNS; j++) {
        PyObject *s = PyUnicode_FromString(names[j]);
        if (s == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, j, s);
    }
    return t;
}

/* The constants of _columns.h this module was built with, exported for decode.py (the
 * order of the column buffers) and for tests/test_constants.py to pin them to Python's. */
PyMODINIT_FUNC PyInit__decode(void)
{
    PyObject *m = PyModule_Create(&module), *mapped, *mul, *columns;
    if (m == NULL)
        return NULL;
    mapped = PyLong_FromUnsignedLongLong(V4_MAPPED);
    mul = PyLong_FromUnsignedLongLong(MIX_MULTIPLIER);
    columns = column_names();
    if (PyModule_AddIntConstant(m, "SYN", SYN) < 0
        || PyModule_AddIntConstant(m, "MAX_VLAN_TAGS", MAX_VLAN_TAGS) < 0
        || PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) < 0
        || PyModule_AddIntConstant(m, "MAX_MPLS_LABELS", MAX_MPLS_LABELS) < 0
        || PyModule_AddIntConstant(m, "MIX_SHIFT", MIX_SHIFT) < 0
        || PyModule_AddObjectRef(m, "V4_MAPPED", mapped) < 0
        || PyModule_AddObjectRef(m, "MIX_MULTIPLIER", mul) < 0
        || PyModule_AddObjectRef(m, "COMPILED_COLUMNS", columns) < 0) {
        Py_XDECREF(mapped);
        Py_XDECREF(mul);
        Py_XDECREF(columns);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(mapped);
    Py_DECREF(mul);
    Py_DECREF(columns);
    return m;
}
