//! Replaying a trace for a campaign: the records of a physical trace go straight to the engine,
//! the events of an OS-level trace through the OS model (faults, page commands, frees); and the
//! plaintext oracle campaigns check memory against, which follows both data writes and page
//! commands.

use crate::config::Config;
use crate::engine::{Engine, RecordError};
use crate::os_trace::OsDriver;
use crate::run::{open_records, SimError, TraceInput};
use rustc_hash::{FxHashMap, FxHashSet};
use secmem_core::addr::LINES_PER_PAGE;
use secmem_schemes::PageCommand;
use secmem_trace::{Event, Record};
use std::cell::RefCell;
use std::rc::Rc;

/// Reads all records (campaigns replay the trace, so it must fit in memory).
pub(crate) fn collect(cfg: &Config, input: &TraceInput) -> Result<Vec<Record>, SimError> {
    let (it, _) = open_records(cfg, input)?;
    let limit = usize::try_from(crate::run::record_limit(cfg)).unwrap_or(usize::MAX);
    it.take(limit).collect::<Result<Vec<_>, _>>().map_err(SimError::from)
}

pub(crate) fn record_error(input: &TraceInput, cfg: &Config, e: crate::engine::RecordError) -> SimError {
    SimError::Record { trace: input.describe(cfg), error: e }
}

/// What a campaign replays: a physical trace's records, or an OS-level trace's events.
pub(crate) enum Replay {
    Records(Vec<Record>),
    Events(Vec<Event>),
}

impl Replay {
    /// The records of `input`; an OS-level trace file (version 2 with the OS flag) as events.
    pub(crate) fn load(cfg: &Config, input: &TraceInput) -> Result<Replay, SimError> {
        if let TraceInput::File(p) = input {
            let stream = crate::run::open_events(cfg, p)?;
            if stream.kind.os_level {
                crate::os_trace::require_core_level(cfg)?;
                let limit = if cfg.run.max_requests == 0 { usize::MAX } else { cfg.run.max_requests as usize };
                let events = stream.events.take(limit).collect::<Result<Vec<_>, _>>()?;
                if cfg.run.warmup_requests > 0 {
                    if let Some(at) = events.iter().position(|e| *e == Event::RoiBegin) {
                        return Err(SimError::Record {
                            trace: input.describe(cfg),
                            error: RecordError {
                                index: at as u64,
                                message: crate::os_trace::roi_conflict(cfg.run.warmup_requests),
                                integrity: None,
                            },
                        });
                    }
                }
                return Ok(Replay::Events(events));
            }
        }
        Ok(Replay::Records(collect(cfg, input)?))
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Replay::Records(r) => r.len(),
            Replay::Events(e) => e.len(),
        }
    }

    /// The first record of the region of interest: after the trace's ROI record if it has
    /// one (`load` refuses one together with a warm-up), else after the warm-up.
    pub(crate) fn roi_start(&self, warmup: u64) -> u64 {
        match self {
            Replay::Events(e) => e.iter().position(|x| *x == Event::RoiBegin).map_or(warmup, |at| at as u64 + 1),
            Replay::Records(_) => warmup,
        }
    }
}

/// The run a campaign steps through: records go straight to the engine, events through the OS
/// model (faults, page commands, frees) and from there to the engine.
pub(crate) enum Live {
    Phys(Box<Engine>),
    Os(Box<OsDriver>),
}

impl Live {
    pub(crate) fn new(cfg: &Config, replay: &Replay) -> Result<Live, SimError> {
        Ok(match replay {
            Replay::Records(_) => Live::Phys(Box::new(Engine::new(cfg)?)),
            Replay::Events(_) => Live::Os(Box::new(crate::os_trace::driver_for(cfg)?)),
        })
    }

    pub(crate) fn engine(&mut self) -> &mut Engine {
        match self {
            Live::Phys(e) => e,
            Live::Os(d) => &mut d.os.engine,
        }
    }

    /// Writes and page commands that reached memory so far: a record that adds to it is a
    /// persist point.
    pub(crate) fn persisted(&self) -> u64 {
        match self {
            Live::Phys(e) => e.core_stats().memory_writes_issued,
            Live::Os(d) => d.os.engine.core_stats().memory_writes_issued + self.page_commands(),
        }
    }

    /// Page commands the design carried out so far (0 for a physical trace).
    pub(crate) fn page_commands(&self) -> u64 {
        match self {
            Live::Phys(_) => 0,
            Live::Os(d) => d.os.stats.page_commands,
        }
    }

    /// Applies record `i` of `replay`; errors name the trace and the record.
    pub(crate) fn step(&mut self, replay: &Replay, i: usize, cfg: &Config, input: &TraceInput) -> Result<(), SimError> {
        if (i as u64).is_multiple_of(crate::interrupt::CHECK_EVERY) {
            crate::interrupt::check()?;
        }
        match (self, replay) {
            (Live::Phys(e), Replay::Records(r)) => e.step(&r[i], i as u64).map_err(|x| record_error(input, cfg, x)),
            (Live::Os(d), Replay::Events(ev)) => d.apply(&ev[i]).map_err(|e| {
                record_error(input, cfg, RecordError { index: i as u64, message: format!("{}: {e}", ev[i]), integrity: None })
            }),
            _ => unreachable!("a live run is built for its replay"),
        }
    }
}

/// The plaintext every line reads as, from what reached memory: a persisted write sets a
/// line; a page command sets or drops a page's lines as the kernel that issued it sees them.
#[derive(Default)]
pub(crate) struct Oracle {
    /// What each line reads as.
    pub(crate) lines: FxHashMap<u64, [u8; 64]>,
    /// Lines whose content is their own last write through the data path, not a page
    /// command's: a read of one reads its own bytes (attacks on those bytes must show).
    pub(crate) own: FxHashSet<u64>,
    /// Lines written since [`mark`](Self::mark) (None before it).
    pub(crate) since_mark: Option<FxHashSet<u64>>,
}

impl Oracle {
    /// A shared oracle fed by `engine`'s persist and page-command hooks.
    pub(crate) fn attach(engine: &mut Engine) -> Rc<RefCell<Oracle>> {
        let oracle: Rc<RefCell<Oracle>> = Rc::default();
        let o = oracle.clone();
        engine.on_persist = Some(Box::new(move |line, data| o.borrow_mut().persisted(line, data)));
        let o = oracle.clone();
        engine.on_page_command = Some(Box::new(move |cmd| o.borrow_mut().page_command(cmd)));
        oracle
    }

    /// From now on, note the lines written.
    pub(crate) fn mark(&mut self) { self.since_mark = Some(FxHashSet::default()); }

    fn persisted(&mut self, line: u64, data: &[u8; 64]) {
        self.lines.insert(line, *data);
        self.own.insert(line);
        if let Some(s) = self.since_mark.as_mut() {
            s.insert(line);
        }
    }

    fn page_command(&mut self, cmd: PageCommand) {
        let lines = |page: u64| page * LINES_PER_PAGE..(page + 1) * LINES_PER_PAGE;
        match cmd {
            // The destination reads as the source does now (a never-written line reads as
            // zeros): the kernel wrote the source's dirty lines back before the command.
            PageCommand::Copy { src, dst } => {
                for (s, d) in lines(src).zip(lines(dst)) {
                    let v = self.lines.get(&s).copied().unwrap_or([0; 64]);
                    self.lines.insert(d, v);
                    self.own.remove(&d);
                }
            }
            PageCommand::Zero { page } => {
                for l in lines(page) {
                    self.lines.insert(l, [0; 64]);
                    self.own.remove(&l);
                }
            }
            // Freed memory holds nothing anyone may read until it is written or copied again.
            PageCommand::Free { page } => {
                for l in lines(page) {
                    self.lines.remove(&l);
                    self.own.remove(&l);
                }
            }
            // A lazy copy made real reads as it did.
            PageCommand::Materialize { .. } => {}
        }
    }
}
