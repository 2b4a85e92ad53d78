/* The yardstick of issue 17: the least work any TCP analysis of a pcap must do, in plain C.
 *
 * Walks the records of a pcap file (little-endian, microsecond or nanosecond times,
 * Ethernet with optional 802.1Q tags, IPv4 or IPv6 without extension headers), pulls each
 * TCP packet's fields into arrays (time, addresses, ports, sequence and acknowledgement
 * numbers, flags, window, payload length) and numbers its connection with an open-addressing
 * hash table of 4-tuples (either direction one connection). Prints packets, TCP packets,
 * connections and a checksum of the arrays (so nothing is optimised away). No analysis.
 *
 *     cc -O2 -o cwalk benchmarks/cwalk.c && ./cwalk capture.pcap
 *
 * benchmarks/bench_cwalk.py builds it and times it against `nagleprobe analyze`.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    uint64_t a_hi, a_lo, b_hi, b_lo; /* addresses, the lower endpoint first */
    uint32_t ports;                  /* lower endpoint's port << 16 | higher's */
    int64_t id;                      /* -1: empty slot */
} Slot;

static Slot *table;
static uint64_t mask, used;

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static void grow(void);

static int64_t flow_id(uint64_t a_hi, uint64_t a_lo, uint64_t b_hi, uint64_t b_lo, uint32_t ports)
{
    uint64_t h = mix(a_hi * 31 + a_lo) ^ mix(b_hi * 17 + b_lo + ports);
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        Slot *s = &table[i];
        if (s->id < 0) {
            s->a_hi = a_hi, s->a_lo = a_lo, s->b_hi = b_hi, s->b_lo = b_lo, s->ports = ports;
            s->id = (int64_t)used++;
            int64_t id = s->id;
            if (used * 2 > mask)
                grow();
            return id;
        }
        if (s->a_hi == a_hi && s->a_lo == a_lo && s->b_hi == b_hi && s->b_lo == b_lo &&
            s->ports == ports)
            return s->id;
    }
}

static void grow(void)
{
    Slot *old = table;
    uint64_t n = mask + 1;
    mask = n * 2 - 1;
    table = malloc(sizeof(Slot) * (mask + 1));
    for (uint64_t i = 0; i <= mask; i++)
        table[i].id = -1;
    for (uint64_t j = 0; j < n; j++) {
        if (old[j].id < 0)
            continue;
        Slot *o = &old[j];
        uint64_t h = mix(o->a_hi * 31 + o->a_lo) ^ mix(o->b_hi * 17 + o->b_lo + o->ports);
        uint64_t i = h & mask;
        while (table[i].id >= 0)
            i = (i + 1) & mask;
        table[i] = *o;
    }
    free(old);
}

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }
static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#define GROW(arr, type) arr = realloc(arr, sizeof(type) * cap)

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: cwalk FILE.pcap\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size < 24) {
        perror(argv[1]);
        return 2;
    }
    const uint8_t *m = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    madvise((void *)m, st.st_size, MADV_SEQUENTIAL);
    uint32_t magic = le32(m);
    int64_t frac_ns = magic == 0xA1B23C4D ? 1 : magic == 0xA1B2C3D4 ? 1000 : 0;
    if (!frac_ns || le32(m + 20) != 1) {
        fprintf(stderr, "cwalk: only little-endian Ethernet pcap\n");
        return 2;
    }
    mask = (1 << 16) - 1;
    table = malloc(sizeof(Slot) * (mask + 1));
    for (uint64_t i = 0; i <= mask; i++)
        table[i].id = -1;

    size_t cap = 1 << 20, n = 0, packets = 0;
    int64_t *ts = NULL, *flow = NULL;
    uint64_t *src_hi = NULL, *src_lo = NULL, *dst_hi = NULL, *dst_lo = NULL;
    uint32_t *seq = NULL, *ack = NULL;
    uint16_t *sport = NULL, *dport = NULL, *win = NULL, *flags = NULL;
    int32_t *pay = NULL;
    GROW(ts, int64_t); GROW(flow, int64_t); GROW(src_hi, uint64_t); GROW(src_lo, uint64_t);
    GROW(dst_hi, uint64_t); GROW(dst_lo, uint64_t); GROW(seq, uint32_t); GROW(ack, uint32_t);
    GROW(sport, uint16_t); GROW(dport, uint16_t); GROW(win, uint16_t); GROW(flags, uint16_t);
    GROW(pay, int32_t);

    size_t off = 24, end = (size_t)st.st_size;
    while (off + 16 <= end) {
        const uint8_t *h = m + off;
        uint32_t caplen = le32(h + 8);
        if (caplen > 262144 || off + 16 + caplen > end)
            break;
        const uint8_t *p = h + 16, *e = p + caplen;
        off += 16 + caplen;
        packets++;
        if (caplen < 14)
            continue;
        uint16_t type = be16(p + 12);
        const uint8_t *ip = p + 14;
        while (type == 0x8100 && ip + 4 <= e) {
            type = be16(ip + 2);
            ip += 4;
        }
        uint64_t s_hi, s_lo, d_hi, d_lo;
        const uint8_t *tcp;
        int32_t ip_end_len;
        if (type == 0x0800 && ip + 20 <= e && (ip[0] >> 4) == 4 && ip[9] == 6) {
            int ihl = (ip[0] & 15) * 4;
            s_hi = 0, d_hi = 0, s_lo = be32(ip + 12), d_lo = be32(ip + 16);
            tcp = ip + ihl;
            ip_end_len = (int32_t)be16(ip + 2) - ihl;
        } else if (type == 0x86DD && ip + 40 <= e && ip[6] == 6) {
            s_hi = be64(ip + 8), s_lo = be64(ip + 16), d_hi = be64(ip + 24), d_lo = be64(ip + 32);
            tcp = ip + 40;
            ip_end_len = be16(ip + 4);
        } else
            continue;
        if (tcp + 20 > e)
            continue;
        int doff = (tcp[12] >> 4) * 4;
        if (n == cap) {
            cap *= 2;
            GROW(ts, int64_t); GROW(flow, int64_t); GROW(src_hi, uint64_t);
            GROW(src_lo, uint64_t); GROW(dst_hi, uint64_t); GROW(dst_lo, uint64_t);
            GROW(seq, uint32_t); GROW(ack, uint32_t); GROW(sport, uint16_t);
            GROW(dport, uint16_t); GROW(win, uint16_t); GROW(flags, uint16_t);
            GROW(pay, int32_t);
        }
        ts[n] = (int64_t)le32(h) * 1000000000 + (int64_t)le32(h + 4) * frac_ns;
        src_hi[n] = s_hi, src_lo[n] = s_lo, dst_hi[n] = d_hi, dst_lo[n] = d_lo;
        sport[n] = be16(tcp), dport[n] = be16(tcp + 2);
        seq[n] = be32(tcp + 4), ack[n] = be32(tcp + 8);
        flags[n] = (uint16_t)((tcp[12] & 1) << 8 | tcp[13]);
        win[n] = be16(tcp + 14);
        pay[n] = ip_end_len - doff;
        int low_is_src = s_hi < d_hi || (s_hi == d_hi && (s_lo < d_lo ||
                         (s_lo == d_lo && sport[n] <= dport[n])));
        flow[n] = low_is_src
            ? flow_id(s_hi, s_lo, d_hi, d_lo, (uint32_t)sport[n] << 16 | dport[n])
            : flow_id(d_hi, d_lo, s_hi, s_lo, (uint32_t)dport[n] << 16 | sport[n]);
        n++;
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (uint64_t)ts[i] ^ seq[i] ^ ((uint64_t)ack[i] << 7) ^ flags[i] ^ win[i] ^
               (uint64_t)pay[i] ^ (uint64_t)flow[i] ^ src_lo[i] ^ dst_lo[i] ^ src_hi[i] ^
               dst_hi[i] ^ sport[i] ^ dport[i];
    printf("packets %zu tcp %zu connections %llu checksum %016llx\n", packets, n,
           (unsigned long long)used, (unsigned long long)sum);
    return 0;
}
