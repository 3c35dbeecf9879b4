//! Persist barriers inserted by a rule (`[persist]`) into traces that have none.

use secmem_sim::{Config, TraceInput};

mod common;

#[test]
fn a_barrier_after_every_store_is_what_the_workload_s_own_persisted_writes_give() {
    let by_rule = secmem_sim::run(&common::cfg("horus", &["persist.barriers=every-store"]), &TraceInput::Workload).unwrap();
    let by_workload = secmem_sim::run(&common::cfg("horus", &["workload.persist_writes=true"]), &TraceInput::Workload).unwrap();
    assert_eq!(by_rule["stats"], by_workload["stats"]);
    let core = &by_rule["stats"]["core"];
    assert_eq!((core["flushes"].as_u64(), core["fences"].as_u64()), (core["writes"].as_u64(), core["writes"].as_u64()));
}

#[test]
fn epochs_of_n_stores_fence_once_per_epoch_and_persist_what_a_plain_run_leaves_in_the_caches() {
    let plain = secmem_sim::run(&common::cfg("horus", &[]), &TraceInput::Workload).unwrap();
    let epochs = secmem_sim::run(&common::cfg("horus", &["persist.barriers=every-n-stores", "persist.every_n_stores=16"]), &TraceInput::Workload).unwrap();
    let writes = plain["stats"]["core"]["writes"].as_u64().unwrap();
    assert_eq!(epochs["stats"]["core"]["fences"].as_u64(), Some(writes / 16));
    let flushes = epochs["stats"]["core"]["flushes"].as_u64().unwrap();
    assert!(flushes <= writes / 16 * 16 && flushes > 0, "{flushes} flushes of distinct lines");
    // Flushed lines reach memory: more data writes than the write-back caches alone send.
    let data_writes = |r: &serde_json::Value| r["stats"]["memory"]["writes"]["data"].as_u64().unwrap();
    assert!(data_writes(&epochs) > data_writes(&plain), "{} vs {}", data_writes(&epochs), data_writes(&plain));
}

#[test]
fn a_zero_epoch_or_two_sources_of_barriers_are_refused_naming_the_field() {
    let e = Config::load(None, None, &["persist.barriers=every-n-stores".into(), "persist.every_n_stores=0".into()]).unwrap_err();
    assert_eq!(e.field, "persist.every_n_stores");
    let e = Config::load(None, None, &["persist.barriers=every-store".into(), "workload.persist_writes=true".into()]).unwrap_err();
    assert_eq!(e.field, "persist.barriers");
    let e = Config::load(None, None, &["persist.barriers=sometimes".into()]).unwrap_err();
    assert_eq!(e.field, "persist.barriers");
}
