"""A connection's handshake, held for its whole life when the rest of it is analysed a piece
at a time (`pieces.Ledger`, for the stream and `watch`), and moved in sequence space to just
before the rows a piece carries.

The handshake rows carry what no later packet says again: the MSS and window scale of the
SYNs, the roles (who sent the SYN; without one, the first packet's direction and ports), and
the handshake's round trips. Once packets between the handshake and the rows carried were
let go of, the handshake's sequence and acknowledgement numbers are moved (`rebased`) so that
the analysis (`flows.build_flows`) reads the rows as following it: per direction, the
handshake then ends where the sender had sent up to, and acknowledges what the sender had
acknowledged, when the rows begin. Sequence numbers wrap at 4 GiB; a connection that has
sent gigabytes since its SYN is read right this way.
"""

from __future__ import annotations

import numpy as np

from .columns import Columns
from .decode import ACK, FIN, RST, SYN

HANDSHAKE_ROWS = 4  # the first packets of a connection looked at for its handshake
WRAP = 1 << 32


def handshake_mask(rank: np.ndarray, payload: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """Which rows are the handshake, given each row's rank among its connection's rows (0:
    its first): the first HANDSHAKE_ROWS packets without payload, FIN or RST (SYN, SYN/ACK,
    the ACK), and the connection's first packet (it names the roles when there is no SYN)."""
    return (rank == 0) | ((rank < HANDSHAKE_ROWS) & (payload == 0)
                          & ((flags & (FIN | RST)) == 0))


def _top(values: np.ndarray, key: np.ndarray, nkeys: int) -> np.ndarray:
    """Per key, the highest of `values` (sequence numbers, taken modulo 2**32 near each
    other: each is compared with the key's first); -1 for keys without a value."""
    out = np.full(nkeys, -1, dtype=np.int64)
    if not len(values):
        return out
    first = np.full(nkeys, -1, dtype=np.int64)
    first[key[::-1]] = values[::-1]
    ahead = (values - first[key] + (1 << 31)) % WRAP - (1 << 31)  # signed distance
    most = np.full(nkeys, np.iinfo(np.int64).min)
    np.maximum.at(most, key, ahead)
    has = most > np.iinfo(np.int64).min
    out[has] = (first[has] + most[has]) % WRAP
    return out


def _ends(seq: np.ndarray, ack: np.ndarray, payload: np.ndarray, flags: np.ndarray,
          key: np.ndarray, nkeys: int) -> tuple[np.ndarray, np.ndarray]:
    """Of handshake rows sent by `key` (a connection and direction, 0..nkeys-1): per key,
    where its sequence space ends (the highest seq + payload + SYN + FIN, raw 32-bit) and
    the highest acknowledgement it sent (raw); -1 where there is none."""
    seq, ack = seq.astype(np.int64), ack.astype(np.int64)
    f = flags.astype(np.int64)
    end = (seq + payload.astype(np.int64) + ((f & SYN) != 0) + ((f & FIN) != 0)) % WRAP
    acked = (f & ACK) != 0
    return _top(end, key, nkeys), _top(ack[acked], key[acked], nkeys)


def _moved(seq: np.ndarray, ack: np.ndarray, flags: np.ndarray, key: np.ndarray,
           seq_shift: np.ndarray, ack_shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Handshake rows (sent by `key`) with their sequence numbers moved on by
    `seq_shift[key]` and their acknowledgements (where they carry ACK) by `ack_shift[key]`,
    modulo 2**32, in the columns' own dtypes."""
    s = (seq.astype(np.int64) + seq_shift[key]) % WRAP
    acked = (flags.astype(np.int64) & ACK) != 0
    a = np.where(acked, (ack.astype(np.int64) + ack_shift[key]) % WRAP, ack.astype(np.int64))
    return s.astype(seq.dtype), a.astype(ack.dtype)


def _shift_to(target: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Per key, the shift modulo 2**32 that moves `at` to `target` (0 where either is -1:
    unknown)."""
    return np.where((target >= 0) & (at >= 0), (target - at) % WRAP, 0)


def rebased(rows: Columns, hs: np.ndarray, key: np.ndarray, nkeys: int,
            seq_target: np.ndarray, ack_target: np.ndarray,
            also: np.ndarray | None = None) -> Columns:
    """`rows` with the handshake rows `hs` (positions; sent by `key`, a connection and
    direction 0..nkeys-1) moved in sequence space: each key's handshake then ends at
    `seq_target[key]` and acknowledges up to `ack_target[key]`; the rows `also` (a SYN sent
    again) move with them. -1 in a target: that key is not moved."""
    end, top = _ends(rows["seq"][hs], rows["ack"][hs], rows["payload"][hs], rows["flags"][hs],
                     key[hs], nkeys)
    seq_shift = _shift_to(seq_target, end)
    ack_shift = _shift_to(ack_target, top)
    h = hs if also is None else np.r_[hs, also]
    out = {**rows, "seq": rows["seq"].copy(), "ack": rows["ack"].copy()}
    out["seq"][h], out["ack"][h] = _moved(rows["seq"][h], rows["ack"][h], rows["flags"][h],
                                          key[h], seq_shift, ack_shift)
    return out
