//! Drains the worst-case content under every scheme and prints one JSON line each, without
//! Python: `cargo run --release -p secmem-sim --example drain -- [key=value ...]`.
use secmem_sim::config::Config;
use secmem_sim::harness::drain::{drain_run, DrainContent, DrainScheme};

fn main() {
    let overrides: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match Config::load(Some("horus"), None, &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    for scheme in DrainScheme::all() {
        let t = std::time::Instant::now();
        match drain_run(&cfg, scheme, &DrainContent::WorstCase, true) {
            Ok(o) => {
                let mut v = o.to_json();
                v["wall_s"] = t.elapsed().as_secs_f64().into();
                println!("{v}");
            }
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        }
    }
}
