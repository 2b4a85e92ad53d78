//! npclassic: a TCP client on the smoltcp userspace stack, attached to a TAP device, used to
//! make real captures of a CLASSIC-Nagle sender (RFC 896: a sub-MSS segment is held while
//! *any* data is unacknowledged) talking to a Linux kernel socket.
//!
//! smoltcp 0.12's Nagle test is in `Socket::seq_to_transmit` (src/socket/tcp.rs):
//! `data_in_flight = remote_last_seq != local_seq_no` and
//! `if self.nagle && data_in_flight && !can_send_full && !want_fin { can_send = false }`,
//! i.e. the classic rule, not Linux's Minshall variant.
//!
//!     npclassic --tap TAP --ip 10.98.1.1/24 --dst 10.98.1.2 --port 8000 --sport 40100
//!               --mode fulltail|bulk|small [--n 20] [--nagle on|off] [--ack-delay-ms 10|0]
//!               [--msg 1560] [--reply 64]                       (fulltail)
//!               [--sizes 1,3,5] [--cycles 7] [--mss 1460] [--tail 100] [--pace-ms 100] (bulk)
//!               [--link-mbps 0|10]   (0: frames leave back to back; N: spaced as on N Mbit/s)
//!               --log FILE
//!
//! Every application event is timed with std::time::Instant (CLOCK_MONOTONIC) and written to
//! the JSON log; ground truth comes from these logs and the Linux peer's logs only.

use std::collections::HashMap;
use std::fs;
use std::os::unix::io::AsRawFd;
use std::str::FromStr;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{wait as phy_wait, Device, DeviceCapabilities, Medium, TunTapInterface, TxToken};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, Ipv4Address};

/// The TAP device, optionally with a link rate: after each frame is handed to the TAP the
/// sender sleeps for the frame's serialization time at `mbps` (e.g. a 10 Mbit/s Ethernet of
/// an embedded device), so back-to-back segments reach the peer spaced, as on such a link.
struct Paced {
    inner: TunTapInterface,
    mbps: u64,
}

struct PacedTx<T: TxToken> {
    inner: T,
    mbps: u64,
}

impl<T: TxToken> TxToken for PacedTx<T> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let r = self.inner.consume(len, f);
        if self.mbps > 0 {
            // bits / (Mbit/s) = microseconds; + 8 B preamble/SFD + 4 B FCS on the wire
            std::thread::sleep(StdDuration::from_nanos(((len as u64 + 12) * 8 * 1000) / self.mbps));
        }
        r
    }
}

impl Device for Paced {
    type RxToken<'a> = <TunTapInterface as Device>::RxToken<'a>;
    type TxToken<'a> = PacedTx<<TunTapInterface as Device>::TxToken<'a>>;

    fn receive(&mut self, ts: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let mbps = self.mbps;
        self.inner.receive(ts).map(|(rx, tx)| (rx, PacedTx { inner: tx, mbps }))
    }

    fn transmit(&mut self, ts: Instant) -> Option<Self::TxToken<'_>> {
        let mbps = self.mbps;
        self.inner.transmit(ts).map(|tx| PacedTx { inner: tx, mbps })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.inner.capabilities()
    }
}

struct Net {
    iface: Interface,
    dev: Paced,
    sockets: SocketSet<'static>,
    h: SocketHandle,
    fd: i32,
}

impl Net {
    fn sock(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.h)
    }

    /// One poll: ingress of everything queued on the TAP, then egress (one segment per socket).
    fn poll(&mut self) {
        self.iface.poll(Instant::now(), &mut self.dev, &mut self.sockets);
    }

    /// Poll until `done` holds (checked after every poll), sleeping on the TAP fd in between
    /// for at most smoltcp's own next timer (delayed ACK, retransmission ...).
    fn pump_until<F: FnMut(&mut tcp::Socket<'static>) -> bool>(&mut self, limit: StdDuration, mut done: F) -> bool {
        let start = StdInstant::now();
        loop {
            self.poll();
            if done(self.sock()) {
                return true;
            }
            if start.elapsed() > limit {
                return false;
            }
            let mut d = self.iface.poll_delay(Instant::now(), &self.sockets);
            let cap = Duration::from_millis(50);
            if d.map_or(true, |x| x > cap) {
                d = Some(cap);
            }
            phy_wait(self.fd, d).expect("wait");
        }
    }

    /// Keep polling for `dur` (pacing between records) so timers and ACKs are served.
    fn pump_for(&mut self, dur: StdDuration) {
        let end = StdInstant::now() + dur;
        loop {
            self.poll();
            let now = StdInstant::now();
            if now >= end {
                return;
            }
            let left = Duration::from_micros((end - now).as_micros() as u64);
            let d = match self.iface.poll_delay(Instant::now(), &self.sockets) {
                Some(x) if x < left => x,
                _ => left,
            };
            phy_wait(self.fd, Some(d)).expect("wait");
        }
    }
}

fn args() -> HashMap<String, String> {
    let mut m = HashMap::new();
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let k = v[i].trim_start_matches("--").to_string();
        let val = v.get(i + 1).cloned().unwrap_or_default();
        m.insert(k, val);
        i += 2;
    }
    m
}

fn get<T: FromStr>(a: &HashMap<String, String>, k: &str, dflt: &str) -> T {
    let s = a.get(k).map(|s| s.as_str()).unwrap_or(dflt);
    s.parse().unwrap_or_else(|_| panic!("bad --{k} {s}"))
}

fn ms(d: StdDuration) -> f64 {
    (d.as_nanos() as f64 / 1e3).round() / 1e3
}

fn list(v: &[f64]) -> String {
    let s: Vec<String> = v.iter().map(|x| format!("{x}")).collect();
    format!("[{}]", s.join(", "))
}

fn main() {
    let a = args();
    let tap: String = get(&a, "tap", "npctap0");
    let ip: String = get(&a, "ip", "10.98.1.1/24");
    let dst: Ipv4Address = get(&a, "dst", "10.98.1.2");
    let port: u16 = get(&a, "port", "8000");
    let sport: u16 = get(&a, "sport", "40100");
    let mode: String = get(&a, "mode", "fulltail");
    let n: usize = get(&a, "n", "20");
    let nagle = get::<String>(&a, "nagle", "on") == "on";
    let ack_delay_ms: u64 = get(&a, "ack-delay-ms", "10");
    let log: String = get(&a, "log", "");
    let link_mbps: u64 = get(&a, "link-mbps", "0");

    let tapdev = TunTapInterface::new(&tap, Medium::Ethernet).expect("open tap");
    let fd = tapdev.as_raw_fd();
    let mut dev = Paced { inner: tapdev, mbps: link_mbps };
    // Opening the TAP brings its carrier up; an ARP request sent at once was ignored by the
    // kernel (smoltcp retried it 1 s later), so give the link a moment first.
    std::thread::sleep(StdDuration::from_millis(200));
    let mut config = Config::new(EthernetAddress([0x02, 0, 0, 0, 0, 0x01]).into());
    config.random_seed = 0x6e70_636c; // fixed: deterministic ISN/ephemeral choices
    let mut iface = Interface::new(config, &mut dev, Instant::now());
    let cidr = IpCidr::from_str(&ip).expect("ip/len");
    iface.update_ip_addrs(|addrs| addrs.push(cidr).unwrap());

    let rx = tcp::SocketBuffer::new(vec![0; 65535]);
    let tx = tcp::SocketBuffer::new(vec![0; 65535]);
    let mut s = tcp::Socket::new(rx, tx);
    s.set_nagle_enabled(nagle);
    s.set_ack_delay(if ack_delay_ms == 0 { None } else { Some(Duration::from_millis(ack_delay_ms)) });
    let mut sockets = SocketSet::new(vec![]);
    let h = sockets.add(s);
    let mut net = Net { iface, dev, sockets, h, fd };
    {
        let cx = net.iface.context();
        let sock = net.sockets.get_mut::<tcp::Socket>(h);
        sock.connect(cx, (IpAddress::Ipv4(dst), port), sport).expect("connect");
    }
    let t_start = StdInstant::now();
    if !net.pump_until(StdDuration::from_secs(5), |s| s.may_send()) {
        panic!("connect timed out");
    }
    let connected_ms = ms(t_start.elapsed());

    let mut out = format!(
        "{{\"role\": \"npclassic\", \"stack\": \"smoltcp 0.12.0\", \"mode\": \"{mode}\", \
         \"nagle\": {nagle}, \"ack_delay_ms\": {ack_delay_ms}, \"sport\": {sport}, \
         \"link_mbps\": {link_mbps}, \
         \"connected_ms\": {connected_ms}"
    );

    match mode.as_str() {
        "fulltail" | "small" => {
            // fulltail: one message of --msg bytes (MSS + tail) written at once, read --reply.
            // small: write 6 B "hello ", let it leave, write 7 B "world\r\n", read the 13 B echo.
            let msg: usize = get(&a, "msg", "1560");
            let reply: usize = if mode == "small" { 13 } else { get(&a, "reply", "64") };
            let mut lat = Vec::new();
            let mut write_at = Vec::new();
            for i in 0..n {
                let t0 = StdInstant::now();
                write_at.push(ms(t0 - t_start));
                if mode == "small" {
                    let sent = net.sock().send_slice(b"hello ").unwrap();
                    assert_eq!(sent, 6);
                    net.poll(); // the head is dispatched here (nothing in flight)
                    let sent = net.sock().send_slice(b"world\r\n").unwrap();
                    assert_eq!(sent, 7);
                } else {
                    let mut m = vec![b'm'; msg];
                    m[..4].copy_from_slice(&(msg as u32).to_be_bytes());
                    m[4] = (i % 256) as u8;
                    let sent = net.sock().send_slice(&m).unwrap();
                    assert_eq!(sent, msg);
                }
                let mut got = 0usize;
                let ok = net.pump_until(StdDuration::from_secs(5), |s| {
                    while s.can_recv() {
                        got += s.recv(|d| (d.len(), d.len())).unwrap();
                    }
                    got >= reply
                });
                assert!(ok, "request {i}: reply timed out");
                assert_eq!(got, reply, "request {i}: unexpected reply size");
                lat.push(ms(t0.elapsed()));
            }
            out += &format!(
                ", \"n\": {n}, \"msg_bytes\": {}, \"reply_bytes\": {reply}, \
                 \"write_at_ms\": {}, \"latency_ms\": {}",
                if mode == "small" { 13 } else { msg },
                list(&write_at),
                list(&lat)
            );
        }
        "bulk" => {
            // records of k full segments + a tail, written at once, paced; the peer only reads.
            let sizes: Vec<usize> = get::<String>(&a, "sizes", "1,3,5")
                .split(',')
                .map(|x| x.parse().unwrap())
                .collect();
            let cycles: usize = get(&a, "cycles", "7");
            let mss: usize = get(&a, "mss", "1460");
            let tail: usize = get(&a, "tail", "100");
            let pace: u64 = get(&a, "pace-ms", "100");
            let mut write_at = Vec::new();
            let mut recs = Vec::new();
            let mut acked_after = Vec::new();
            for c in 0..cycles {
                for &k in &sizes {
                    let len = k * mss + tail;
                    let mut m = vec![b'r'; len];
                    m[..4].copy_from_slice(&(len as u32).to_be_bytes());
                    m[4] = ((c * sizes.len()) % 256) as u8;
                    let t0 = StdInstant::now();
                    write_at.push(ms(t0 - t_start));
                    let sent = net.sock().send_slice(&m).unwrap();
                    assert_eq!(sent, len);
                    // when did the whole record get acknowledged (sender's view)?
                    let ok = net.pump_until(StdDuration::from_secs(5), |s| s.send_queue() == 0);
                    assert!(ok, "record not acknowledged");
                    acked_after.push(ms(t0.elapsed()));
                    recs.push(len as f64);
                    let left = StdDuration::from_millis(pace).saturating_sub(t0.elapsed());
                    net.pump_for(left);
                }
            }
            out += &format!(
                ", \"mss\": {mss}, \"tail\": {tail}, \"pace_ms\": {pace}, \"record_bytes\": {}, \
                 \"write_at_ms\": {}, \"write_to_all_acked_ms\": {}",
                list(&recs),
                list(&write_at),
                list(&acked_after)
            );
        }
        _ => panic!("unknown mode {mode}"),
    }

    // orderly close: wait for everything to be acknowledged, FIN, then the peer's FIN
    net.pump_until(StdDuration::from_secs(3), |s| s.send_queue() == 0);
    net.pump_for(StdDuration::from_millis(100));
    net.sock().close();
    let closed = net.pump_until(StdDuration::from_secs(3), |s| {
        matches!(s.state(), tcp::State::TimeWait | tcp::State::Closed)
    });
    net.pump_for(StdDuration::from_millis(50));
    out += &format!(", \"closed_cleanly\": {closed}}}\n");
    if log.is_empty() {
        print!("{out}");
    } else {
        fs::write(&log, out).expect("write log");
    }
}
