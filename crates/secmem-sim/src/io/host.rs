//! The host side of NVMe: cores, per-core queue pairs in host memory, and the life of one
//! command (fetch, DMA, flash, completion entry, MSI, interrupt) as events in time order.
//! Whoever issued a command (an application I/O, or the storage stack's own work) learns of
//! its end from [`Host::step`].

use crate::engine::Engine;
use crate::run::SimError;
use secmem_core::error::ConfigError;
use secmem_core::Cycle;
use secmem_media::{AccessKind, MemRequest, TrafficClass};
use secmem_schemes::controller::PortId;
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::rc::Rc;

/// Who a command works for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owner {
    /// An application I/O (its slot).
    App(usize),
    /// A journal commit (dm-integrity).
    Commit,
    /// The journal writer's copy of data to its place (dm-integrity).
    WriterData,
    /// A metadata buffer read (dm-integrity's dm-bufio).
    MetaRead(u64),
    /// A dirty metadata buffer written by the writer's flush.
    MetaWrite,
    /// A dirty metadata buffer written when evicted.
    EvictWrite,
    /// D-Shield's DIE reads a metadata block for an application I/O (its slot).
    DieRead(usize),
    /// D-Shield's DIE writes a dirty metadata block back.
    DieWrite,
    /// D-Shield-Hyb's DIE reads a metadata block that no command waits for.
    DieFetch,
}

/// A memory access of the I/O path that the secure memory refused.
fn io_path_error(e: impl std::fmt::Display) -> SimError { SimError::Config(ConfigError::new("", format!("memory access of the I/O path failed: {e}"))) }

/// The protection domain a line the drive moves for an application lives in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LineDomain {
    /// The memory's: through the secure memory controller's encryption and MACs.
    Memory,
    /// The storage's: kept as the drive's ciphertext, past the memory's encryption; the line's
    /// page's counter block records it (`recorded`: its record changed, so the block is dirty).
    Storage { recorded: bool },
}

/// Who decides each DMA'd line's domain (D-Shield-Hyb's DIE, by its protection-domain vectors).
pub trait LineDomains {
    /// The drive moves host line `line`, part of drive sector `sector`, into memory
    /// (`to_memory`) or out of it.
    fn dma_line(&mut self, line: u64, sector: u64, to_memory: bool) -> LineDomain;
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step { Fetch, DmaIn, Flash, DmaOut, Complete, Interrupt }

/// An event: a trace request arriving, an application slot submitting, a command's step, or
/// the storage stack's timer.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ev { Arrive(usize), Submit(usize), Cmd(Step, usize), Autocommit }

/// One NVMe command.
#[derive(Copy, Clone, Debug)]
pub struct Cmd {
    pub owner: Owner,
    pub write: bool,
    /// Byte offset on the drive.
    pub offset: u64,
    pub bytes: u32,
    /// The host buffer's first line.
    pub buf_line: u64,
    /// The core that submits it and takes its interrupt.
    pub core: u32,
    entry: u64,
    /// Issued by hardware on the DMA path (D-Shield's hidden metadata queue pair): no core
    /// submits it or takes its interrupt, and its data moves to and from that hardware, not
    /// host memory.
    pub hidden: bool,
    /// Held where its data passes the DMA path (D-Shield's DIE): a read between the flash
    /// and the DMA into host memory, a write between the DMA out of host memory and the
    /// flash, until [`Host::release`].
    pub held: bool,
}

impl Cmd {
    pub fn new(owner: Owner, write: bool, offset: u64, bytes: u32, buf_line: u64, core: u32) -> Cmd {
        Cmd { owner, write, offset, bytes, buf_line, core, entry: 0, hidden: false, held: false }
    }

    /// A command of D-Shield's hidden metadata queue pair ([`Cmd::hidden`]).
    pub fn hidden(owner: Owner, write: bool, offset: u64, bytes: u32, core: u32) -> Cmd { Cmd { hidden: true, ..Cmd::new(owner, write, offset, bytes, 0, core) } }
}

/// The host path's settings in cycles, from `[io]` (`HostTiming::of`).
#[derive(Copy, Clone, Debug)]
pub struct HostTiming {
    /// DMA and queue entries go through the memory controller.
    pub dma: bool,
    /// The first line of the queues (a page pair per core); buffers follow them.
    pub queue_base_line: u64,
    pub submit: u64,
    pub complete: u64,
    pub pcie: u64,
    /// Largest command, bytes: larger transfers are split.
    pub max_transfer: u64,
}

impl HostTiming {
    pub fn of(io: &super::IoConfig, freq_mhz: u64) -> HostTiming {
        let cyc = |us: f64| (us * freq_mhz as f64).round() as u64;
        HostTiming {
            dma: io.dma_through_memory,
            queue_base_line: (io.buffer_base_mib << 20) >> 6,
            submit: cyc(io.submit_us),
            complete: cyc(io.complete_us),
            pcie: cyc(io.pcie_latency_ns / 1000.0),
            max_transfer: u64::from(io.max_transfer_kib) << 10,
        }
    }
}

pub struct Host<'e> {
    pub engine: &'e mut Engine,
    port: PortId,
    /// DMA and queue entries go through the memory controller.
    dma: bool,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    core_free: Vec<u64>,
    /// Core time spent, cycles.
    pub cpu_busy: u64,
    /// Each core's next submission-queue entry.
    pub entries: Vec<u64>,
    cmds: Vec<Cmd>,
    free_cmds: Vec<usize>,
    queue_base_line: u64,
    submit: u64,
    complete: u64,
    pcie: u64,
    /// Largest command, bytes: larger transfers are split.
    max_transfer: u64,
    pub dma_lines: u64,
    /// Application DMA lines through the memory's encryption (a pad and a MAC each).
    pub secure_dma_lines: u64,
    pub commands: u64,
    /// Where application lines live, when not all in the memory's domain.
    pub domains: Option<Rc<RefCell<dyn LineDomains>>>,
    /// Commands stopped at their hold (`Cmd::held`) since the last [`Host::take_held`]: the
    /// command, its id and the time its data reached the hold.
    held: Vec<(Cmd, usize, u64)>,
    /// The step each held command resumes at.
    resume: Vec<Step>,
}

impl<'e> Host<'e> {
    pub fn new(engine: &'e mut Engine, port: PortId, cores: u32, t: HostTiming) -> Host<'e> {
        Host {
            engine,
            port,
            dma: t.dma,
            events: BinaryHeap::new(),
            seq: 0,
            core_free: vec![0; cores as usize],
            cpu_busy: 0,
            entries: vec![0; cores as usize],
            cmds: Vec::new(),
            free_cmds: Vec::new(),
            queue_base_line: t.queue_base_line,
            submit: t.submit,
            complete: t.complete,
            pcie: t.pcie,
            max_transfer: t.max_transfer,
            dma_lines: 0,
            secure_dma_lines: 0,
            commands: 0,
            domains: None,
            held: Vec::new(),
            resume: Vec::new(),
        }
    }

    /// The commands that reached their hold since the last call: `(command, id, time)`.
    pub fn take_held(&mut self) -> Vec<(Cmd, usize, u64)> { std::mem::take(&mut self.held) }

    /// Lets held command `id` go on at `at`.
    pub fn release(&mut self, id: usize, at: u64) { self.push(at, Ev::Cmd(self.resume[id], id)); }

    pub fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, ev)));
    }

    pub fn pop(&mut self) -> Option<(u64, Ev)> { self.events.pop().map(|Reverse((t, _, ev))| (t, ev)) }

    /// Runs `cycles` of work on `core` from `at` (or when the core is free); when it ends.
    pub fn run_on(&mut self, core: u32, at: u64, cycles: u64) -> u64 {
        let c = &mut self.core_free[core as usize];
        let end = at.max(*c) + cycles;
        *c = end;
        self.cpu_busy += cycles;
        end
    }

    /// A memory access of the I/O path; when it is done (at once without the memory side).
    #[inline]
    pub fn mem(&mut self, line: u64, write: bool, at: u64) -> Result<u64, SimError> {
        if !self.dma {
            return Ok(at);
        }
        let e = &mut *self.engine;
        let r = if write { e.design.serve_write(&mut e.mc, line, None, Cycle(at)).map(|c| c.0) } else { e.design.serve_read(&mut e.mc, line, Cycle(at)).map(|(c, _)| c.0) };
        r.map_err(io_path_error)
    }

    /// The memory controller's crypto engine, which units on the I/O path delegate to.
    pub fn crypto_engine(&mut self) -> &mut secmem_schemes::controller::engine::CryptoEngine { &mut self.engine.mc.engine }

    /// A storage-domain line moves as it is: its page's counter block is read for the line's
    /// domain (and changed when `recorded`), the line itself goes to or from the device
    /// without the memory's pad or MAC.
    pub fn storage_domain_line(&mut self, line: u64, to_memory: bool, recorded: bool, at: u64) -> Result<u64, SimError> {
        let mc = &mut self.engine.mc;
        let ctr = mc.fetch_counter_block(line >> 6, recorded, Cycle(at)).map_err(io_path_error)?;
        let data = if to_memory { mc.device_write(line * 64, TrafficClass::Data, Cycle(at)) } else { mc.device_read(line * 64, TrafficClass::Data, Cycle(at)) };
        Ok(ctr.0.max(data.0))
    }

    // A core's submission queue is page 2c past the base, its completion queue page 2c+1.
    fn sq_line(&self, core: u32, entry: u64) -> u64 { self.queue_base_line + u64::from(core) * 128 + entry % 64 }
    fn cq_line(&self, core: u32, entry: u64) -> u64 { self.queue_base_line + u64::from(core) * 128 + 64 + (entry / 4) % 64 }

    /// Submits `cmd` on its core from `at`: the driver's work, the 64 B command written into
    /// the core's submission queue, the doorbell.
    pub fn issue(&mut self, mut cmd: Cmd, at: u64) -> Result<(), SimError> {
        let end = if cmd.hidden { at } else { self.run_on(cmd.core, at, self.submit) };
        cmd.entry = self.entries[cmd.core as usize];
        self.entries[cmd.core as usize] += 1;
        // The doorbell follows the store; the store's persistence is not awaited.
        let _ = self.mem(self.sq_line(cmd.core, cmd.entry), true, end)?;
        let id = match self.free_cmds.pop() {
            Some(id) => {
                self.cmds[id] = cmd;
                id
            }
            None => {
                self.cmds.push(cmd);
                self.resume.push(Step::Fetch);
                self.cmds.len() - 1
            }
        };
        self.commands += 1;
        self.push(end + self.pcie, Ev::Cmd(Step::Fetch, id));
        Ok(())
    }

    /// Submits a transfer of `bytes` as commands of at most the largest transfer each; how many.
    #[allow(clippy::too_many_arguments)] // a command's fields, plus its length and time
    pub fn issue_split(&mut self, owner: Owner, write: bool, offset: u64, bytes: u64, buf_line: u64, core: u32, at: u64) -> Result<u32, SimError> {
        self.issue_split_held(owner, write, offset, bytes, buf_line, core, at, false)
    }

    /// As [`issue_split`](Self::issue_split); `held` commands stop where their data passes the
    /// DMA path ([`Cmd::held`]).
    #[allow(clippy::too_many_arguments)]
    pub fn issue_split_held(&mut self, owner: Owner, write: bool, offset: u64, bytes: u64, buf_line: u64, core: u32, at: u64, held: bool) -> Result<u32, SimError> {
        let mut n = 0;
        let mut done = 0u64;
        while done < bytes {
            let chunk = (bytes - done).min(self.max_transfer);
            let mut cmd = Cmd::new(owner, write, offset + done, chunk as u32, buf_line + done / 64, core);
            cmd.held = held;
            self.issue(cmd, at)?;
            done += chunk;
            n += 1;
        }
        Ok(n)
    }

    /// The drive's DMA of a command's buffer, every line issued at once; done when the last is.
    fn dma(&mut self, c: Cmd, to_memory: bool, at: u64) -> Result<u64, SimError> {
        if c.hidden {
            return Ok(at); // to and from the DIE's buffer
        }
        let lines = u64::from(c.bytes).div_ceil(64);
        self.dma_lines += lines;
        if !self.dma {
            return Ok(at);
        }
        let mut done = at;
        for k in 0..lines {
            let line = c.buf_line + k;
            let domain = match (&self.domains, c.owner) {
                (Some(d), Owner::App(_)) => d.borrow_mut().dma_line(line, c.offset / 512 + k / 8, to_memory),
                _ => LineDomain::Memory,
            };
            done = done.max(match domain {
                LineDomain::Memory => {
                    self.secure_dma_lines += u64::from(matches!(c.owner, Owner::App(_)));
                    self.mem(line, to_memory, at)?
                }
                LineDomain::Storage { recorded } => self.storage_domain_line(line, to_memory, recorded, at)?,
            });
        }
        Ok(done)
    }

    /// Runs one step of command `id` at `now`; at the interrupt's end, the command (now
    /// retired) and the time its core finished handling it.
    pub fn step(&mut self, step: Step, id: usize, now: u64) -> Result<Option<(Cmd, u64)>, SimError> {
        let c = self.cmds[id];
        let (next, at) = match step {
            Step::Fetch => (if c.write { Step::DmaIn } else { Step::Flash }, self.mem(self.sq_line(c.core, c.entry), false, now)?),
            Step::DmaIn => (Step::Flash, self.dma(c, false, now)?),
            Step::Flash => {
                let kind = if c.write { AccessKind::Write } else { AccessKind::Read };
                let req = MemRequest { addr: c.offset, size_bytes: c.bytes, kind, class: TrafficClass::Data, issue: Cycle(now) };
                (if c.write { Step::Complete } else { Step::DmaOut }, self.engine.mc.port_access(self.port, req).0)
            }
            Step::DmaOut => (Step::Complete, self.dma(c, true, now)?),
            Step::Complete => (Step::Interrupt, self.mem(self.cq_line(c.core, c.entry), true, now)? + self.pcie),
            Step::Interrupt if c.hidden => {
                // The DIE takes the completion itself: no interrupt, no core.
                self.free_cmds.push(id);
                return Ok(Some((c, now)));
            }
            Step::Interrupt => {
                // The handler reads the completion entry.
                let end = self.run_on(c.core, now, self.complete);
                let _ = self.mem(self.cq_line(c.core, c.entry), false, end - self.complete)?;
                self.free_cmds.push(id);
                return Ok(Some((c, end)));
            }
        };
        if c.held && ((!c.write && next == Step::DmaOut) || (c.write && next == Step::Flash)) {
            self.resume[id] = next;
            self.held.push((c, id, at));
            return Ok(None);
        }
        self.push(at, Ev::Cmd(next, id));
        Ok(None)
    }
}
