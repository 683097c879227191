//! A `blkio` (libblkio) vhost-user-blk client: a real third-party frontend, no VM.

use blkio::{Blkio, Blkioq, Completion, MemoryRegion, ReqFlags};
use std::mem::MaybeUninit;

#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Read `len` bytes at disk offset `off` into the buffer at `buf`.
    Read {
        off: u64,
        len: usize,
        buf: usize,
    },
    Write {
        off: u64,
        len: usize,
        buf: usize,
    },
    Flush,
    Discard {
        off: u64,
        len: u64,
    },
    WriteZeroes {
        off: u64,
        len: u64,
        unmap: bool,
    },
    /// Like Read/Write, but the buffer is split into `parts` iovecs (several segments).
    ReadV {
        off: u64,
        len: usize,
        buf: usize,
        parts: usize,
    },
    WriteV {
        off: u64,
        len: usize,
        buf: usize,
        parts: usize,
    },
}

pub struct Client {
    blkio: Blkio,
    pub queues: Vec<Blkioq>,
    region: MemoryRegion,
    pub capacity: u64,
    /// iovec arrays of submitted vectored requests: blkio reads them when it submits.
    iovecs: Vec<Vec<libc::iovec>>,
}

impl Client {
    /// Connects with `num_queues` queues and a shared buffer of `buf_len` bytes.
    pub fn connect(socket: &str, num_queues: usize, buf_len: usize) -> Self {
        Self::try_connect(socket, num_queues, buf_len)
            .unwrap_or_else(|e| panic!("connect {socket}: {e}"))
    }

    pub fn try_connect(
        socket: &str,
        num_queues: usize,
        buf_len: usize,
    ) -> Result<Self, blkio::Error> {
        Self::open(socket, num_queues, buf_len, false)
    }

    /// Connects as a read-only client (blkio refuses read-only devices otherwise).
    pub fn connect_read_only(socket: &str, buf_len: usize) -> Self {
        Self::open(socket, 1, buf_len, true).unwrap_or_else(|e| panic!("connect {socket}: {e}"))
    }

    fn open(
        socket: &str,
        num_queues: usize,
        buf_len: usize,
        read_only: bool,
    ) -> Result<Self, blkio::Error> {
        let mut b = Blkio::new("virtio-blk-vhost-user")?;
        b.set_str("path", socket)?;
        b.set_bool("read-only", read_only)?;
        b.connect()?;
        let capacity = b.get_u64("capacity")?;
        b.set_i32("num-queues", num_queues as i32)?;
        let started = b.start()?;
        let align = b.get_u64("mem-region-alignment")? as usize;
        let region = b.alloc_mem_region(buf_len.div_ceil(align) * align)?;
        b.map_mem_region(&region)?;
        Ok(Client {
            blkio: b,
            queues: started.queues,
            region,
            capacity,
            iovecs: Vec::new(),
        })
    }

    /// Writes `data` at `off`, flushes, and reads it back into a scrubbed buffer: whether
    /// every step succeeded and the bytes came back.
    pub fn write_and_verify(&mut self, off: u64, data: &[u8]) -> bool {
        let len = data.len();
        self.buf()[..len].copy_from_slice(data);
        if self.run(Op::Write { off, len, buf: 0 }) != 0 || self.run(Op::Flush) != 0 {
            return false;
        }
        self.buf()[..len].fill(0xEE);
        self.run(Op::Read { off, len, buf: 0 }) == 0 && self.buf()[..len] == *data
    }

    /// The shared I/O buffer.
    pub fn buf(&mut self) -> &mut [u8] {
        // SAFETY: the region is a live mapping of `len` bytes owned by this client; no
        // request is in flight while the caller holds this borrow (submit/wait take &mut self).
        unsafe { std::slice::from_raw_parts_mut(self.region.addr as *mut u8, self.region.len) }
    }

    pub fn submit(&mut self, queue: usize, op: Op, user_data: usize) {
        let base = self.region.addr as *mut u8;
        let q = &mut self.queues[queue];
        match op {
            // SAFETY (pointer arithmetic): callers keep buf + len inside the region.
            Op::Read { off, len, buf } => q.read(
                off,
                unsafe { base.add(buf) },
                len,
                user_data,
                ReqFlags::empty(),
            ),
            Op::Write { off, len, buf } => q.write(
                off,
                unsafe { base.add(buf) },
                len,
                user_data,
                ReqFlags::empty(),
            ),
            Op::Flush => q.flush(user_data, ReqFlags::empty()),
            Op::Discard { off, len } => q.discard(off, len, user_data, ReqFlags::empty()),
            Op::WriteZeroes { off, len, unmap } => {
                let flags = if unmap {
                    ReqFlags::empty()
                } else {
                    ReqFlags::NO_UNMAP
                };
                q.write_zeroes(off, len, user_data, flags)
            }
            Op::ReadV {
                off,
                len,
                buf,
                parts,
            }
            | Op::WriteV {
                off,
                len,
                buf,
                parts,
            } => {
                // Split into `parts` 512-byte-multiple pieces (the last takes the rest).
                let piece = (len / parts / 512).max(1) * 512;
                let mut iov = Vec::new();
                let mut at = 0;
                while at < len {
                    let n = if iov.len() + 1 == parts {
                        len - at
                    } else {
                        piece.min(len - at)
                    };
                    // SAFETY: inside the region, as above.
                    iov.push(libc::iovec {
                        iov_base: unsafe { base.add(buf + at) }.cast(),
                        iov_len: n,
                    });
                    at += n;
                }
                let (ptr, cnt) = (iov.as_ptr(), iov.len() as u32);
                self.iovecs.push(iov);
                let q = &mut self.queues[queue];
                if matches!(op, Op::ReadV { .. }) {
                    q.readv(off, ptr, cnt, user_data, ReqFlags::empty())
                } else {
                    q.writev(off, ptr, cnt, user_data, ReqFlags::empty())
                }
            }
        }
    }

    /// Waits for `n` completions on `queue`: (user_data, ret) with ret 0 or -errno.
    pub fn wait(&mut self, queue: usize, n: usize) -> Vec<(usize, i32)> {
        let mut out = Vec::with_capacity(n);
        let mut comps: Vec<MaybeUninit<Completion>> =
            (0..n.max(1)).map(|_| MaybeUninit::uninit()).collect();
        while out.len() < n {
            let want = n - out.len();
            let got = self.queues[queue]
                .do_io(&mut comps[..want], 1, None, None)
                .expect("do_io");
            for c in &comps[..got] {
                // SAFETY: do_io initialised the first `got` entries.
                let c = unsafe { c.assume_init_ref() };
                out.push((c.user_data, c.ret));
            }
        }
        self.iovecs.clear();
        out
    }

    /// Submits one request on queue 0 and returns its result (0 or -errno).
    pub fn run(&mut self, op: Op) -> i32 {
        self.submit(0, op, 0);
        self.wait(0, 1)[0].1
    }

    /// Writes `data` at disk offset `off` (from the start of the buffer), reads it back
    /// into the buffer right after it, and returns whether the same bytes came back. The
    /// buffer must hold twice `data`.
    pub fn round_trip(&mut self, off: u64, data: &[u8]) -> bool {
        let len = data.len();
        self.buf()[..len].copy_from_slice(data);
        let wrote = self.run(Op::Write { off, len, buf: 0 });
        let read = self.run(Op::Read { off, len, buf: len });
        wrote == 0 && read == 0 && &self.buf()[len..2 * len] == data
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.blkio.unmap_mem_region(&self.region);
        self.blkio.free_mem_region(&self.region);
    }
}

/// A deterministic pattern for `len` bytes at disk offset `off`, distinct per `seed`.
pub fn pattern(off: u64, len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = off + i as u64;
            (x ^ (x >> 9) ^ (x >> 17)) as u8 ^ seed.wrapping_mul(151)
        })
        .collect()
}

/// xorshift64*: deterministic random offsets and sizes.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
